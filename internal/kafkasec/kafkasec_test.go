package kafkasec

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string // part of the error; "" for none
	}{
		{Config{}, ""},
		{Config{Protocol: "plaintext"}, ""},
		{Config{Protocol: "SSL", CA: "ca.pem"}, ""},
		{Config{Protocol: "SSL", Cert: "c.pem", Key: "k.pem"}, ""},
		{Config{Protocol: "SASL_SSL", Mechanism: "scram-sha-512", Username: "u", PasswordFile: "p"}, ""},
		{Config{Protocol: "SASL_PLAINTEXT", Mechanism: "OAUTHBEARER", TokenFile: "t"}, ""},
		{Config{Protocol: "TLS"}, `--security-protocol "TLS" is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL`},
		{Config{Mechanism: "PLAIN"}, "--sasl-mechanism is set but --security-protocol is PLAINTEXT: SASL needs SASL_PLAINTEXT or SASL_SSL"},
		{Config{Protocol: "SSL", Username: "u"}, "--sasl-username is set but --security-protocol is SSL"},
		{Config{Protocol: "SASL_SSL"}, "--security-protocol SASL_SSL needs --sasl-mechanism"},
		{Config{Protocol: "SASL_SSL", Mechanism: "GSSAPI"}, `--sasl-mechanism "GSSAPI" is not one of`},
		{Config{Protocol: "SASL_SSL", Mechanism: "PLAIN", Username: "u"}, "--sasl-mechanism PLAIN needs --sasl-username and --sasl-password-file"},
		{Config{Protocol: "SASL_SSL", Mechanism: "SCRAM-SHA-256", Username: "u", PasswordFile: "p", TokenFile: "t"}, "--sasl-token-file is for OAUTHBEARER"},
		{Config{Protocol: "SASL_SSL", Mechanism: "OAUTHBEARER"}, "OAUTHBEARER needs --sasl-token-file"},
		{Config{Protocol: "SASL_SSL", Mechanism: "OAUTHBEARER", TokenFile: "t", Username: "u"}, "not OAUTHBEARER"},
		{Config{CA: "ca.pem"}, "--tls-ca is set but --security-protocol is PLAINTEXT: TLS needs SSL or SASL_SSL"},
		{Config{Protocol: "SASL_PLAINTEXT", Mechanism: "PLAIN", Username: "u", PasswordFile: "p", Key: "k"}, "--tls-key is set but"},
		{Config{Protocol: "SSL", Cert: "c.pem"}, "--tls-cert and --tls-key go together"},
	} {
		err := tc.cfg.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.cfg, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: got %v, want an error with %q", tc.cfg, err, tc.want)
		}
	}
}

func TestOptsPlaintextIsNone(t *testing.T) {
	opts, err := Config{}.Opts()
	if err != nil || len(opts) != 0 {
		t.Fatalf("PLAINTEXT: %d options, %v; want none", len(opts), err)
	}
}

func TestOptsFileErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	notPEM := filepath.Join(dir, "not.pem")
	for _, p := range []string{empty, notPEM} {
		if err := os.WriteFile(p, []byte(map[string]string{empty: "\n", notPEM: "hello"}[p]), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	missing := filepath.Join(dir, "missing")
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Protocol: "SASL_PLAINTEXT", Mechanism: "PLAIN", Username: "u", PasswordFile: missing}, "--sasl-password-file: open " + missing},
		{Config{Protocol: "SASL_PLAINTEXT", Mechanism: "SCRAM-SHA-512", Username: "u", PasswordFile: empty}, "--sasl-password-file " + empty + " is empty"},
		{Config{Protocol: "SASL_PLAINTEXT", Mechanism: "OAUTHBEARER", TokenFile: missing}, "--sasl-token-file: open " + missing},
		{Config{Protocol: "SSL", CA: missing}, "--tls-ca: open " + missing},
		{Config{Protocol: "SSL", CA: notPEM}, "holds no PEM certificate"},
		{Config{Protocol: "SSL", Cert: notPEM, Key: notPEM}, "--tls-cert " + notPEM + " and --tls-key"},
	} {
		if _, err := tc.cfg.Opts(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want an error with %q", tc.cfg, err, tc.want)
		}
	}
}

// The token and the password are read at every login, so a renewed token
// is what the next connection sends.
func TestSecretsRereadAtLogin(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	pw := filepath.Join(dir, "password")
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(tok, "first\n")
	write(pw, "first\n")
	oauthM, err := Config{Protocol: "SASL_SSL", Mechanism: "OAUTHBEARER", TokenFile: tok}.mechanism()
	if err != nil {
		t.Fatal(err)
	}
	plainM, err := Config{Protocol: "SASL_SSL", Mechanism: "PLAIN", Username: "bob", PasswordFile: pw}.mechanism()
	if err != nil {
		t.Fatal(err)
	}
	login := func(want string) {
		t.Helper()
		_, msg, err := oauthM.Authenticate(context.Background(), "broker:9093")
		if err != nil || !strings.Contains(string(msg), "auth=Bearer "+want+"\x01") {
			t.Errorf("OAUTHBEARER sent %q, %v; want the token %s", msg, err, want)
		}
		_, msg, err = plainM.Authenticate(context.Background(), "broker:9093")
		if err != nil || string(msg) != "\x00bob\x00"+want {
			t.Errorf("PLAIN sent %q, %v; want the password %s", msg, err, want)
		}
	}
	login("first")
	write(tok, "second")
	write(pw, "second")
	login("second")
	if err := os.Remove(tok); err != nil {
		t.Fatal(err)
	}
	if _, _, err := oauthM.Authenticate(context.Background(), "broker:9093"); err == nil || !strings.Contains(err.Error(), "--sasl-token-file") {
		t.Errorf("a removed token file: %v", err)
	}
}
