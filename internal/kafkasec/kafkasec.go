// Package kafkasec turns a client's security settings (Kafka's
// security.protocol, sasl.mechanism and the TLS files) into franz-go
// options, so every simtel command that talks to a broker connects the
// same way and fails with the same errors.
//
// The zero Config is PLAINTEXT: no options, the behaviour of a client
// that never heard of security.
package kafkasec

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Kafka's names of the security protocols and SASL mechanisms.
const (
	Plaintext     = "PLAINTEXT"
	SSL           = "SSL"
	SASLPlaintext = "SASL_PLAINTEXT"
	SASLSSL       = "SASL_SSL"

	Plain       = "PLAIN"
	ScramSHA256 = "SCRAM-SHA-256"
	ScramSHA512 = "SCRAM-SHA-512"
	OAuthBearer = "OAUTHBEARER"
)

// Protocols and Mechanisms are the accepted values, for help texts.
var (
	Protocols  = []string{Plaintext, SSL, SASLPlaintext, SASLSSL}
	Mechanisms = []string{Plain, ScramSHA256, ScramSHA512, OAuthBearer}
)

// Config is a client's security settings. Each field is named after the
// command-line flag it comes from, which is what its errors quote.
type Config struct {
	Protocol     string // --security-protocol; empty is PLAINTEXT
	Mechanism    string // --sasl-mechanism
	Username     string // --sasl-username (PLAIN, SCRAM)
	PasswordFile string // --sasl-password-file (PLAIN, SCRAM)
	TokenFile    string // --sasl-token-file (OAUTHBEARER)
	CA           string // --tls-ca; empty: the system's roots
	Cert         string // --tls-cert, a client certificate
	Key          string // --tls-key, its private key
}

func (c Config) protocol() string {
	if c.Protocol == "" {
		return Plaintext
	}
	return strings.ToUpper(c.Protocol)
}

// TLS reports whether the protocol runs over TLS.
func (c Config) TLS() bool { p := c.protocol(); return p == SSL || p == SASLSSL }

// SASL reports whether the protocol authenticates with SASL.
func (c Config) SASL() bool { p := c.protocol(); return p == SASLPlaintext || p == SASLSSL }

// Validate checks that the settings go together, without reading files.
func (c Config) Validate() error {
	p := c.protocol()
	if !slices.Contains(Protocols, p) {
		return fmt.Errorf("--security-protocol %q is not one of %s", c.Protocol, strings.Join(Protocols, ", "))
	}
	m := strings.ToUpper(c.Mechanism)
	if !c.SASL() {
		for _, f := range []struct{ name, v string }{
			{"--sasl-mechanism", c.Mechanism}, {"--sasl-username", c.Username},
			{"--sasl-password-file", c.PasswordFile}, {"--sasl-token-file", c.TokenFile},
		} {
			if f.v != "" {
				return fmt.Errorf("%s is set but --security-protocol is %s: SASL needs SASL_PLAINTEXT or SASL_SSL", f.name, p)
			}
		}
	} else {
		switch m {
		case "":
			return fmt.Errorf("--security-protocol %s needs --sasl-mechanism (%s)", p, strings.Join(Mechanisms, ", "))
		case Plain, ScramSHA256, ScramSHA512:
			if c.Username == "" || c.PasswordFile == "" {
				return fmt.Errorf("--sasl-mechanism %s needs --sasl-username and --sasl-password-file", m)
			}
			if c.TokenFile != "" {
				return fmt.Errorf("--sasl-token-file is for OAUTHBEARER, not %s", m)
			}
		case OAuthBearer:
			if c.TokenFile == "" {
				return errors.New("--sasl-mechanism OAUTHBEARER needs --sasl-token-file")
			}
			if c.Username != "" || c.PasswordFile != "" {
				return errors.New("--sasl-username and --sasl-password-file are for PLAIN and SCRAM, not OAUTHBEARER (the token names the user)")
			}
		default:
			return fmt.Errorf("--sasl-mechanism %q is not one of %s", c.Mechanism, strings.Join(Mechanisms, ", "))
		}
	}
	if !c.TLS() {
		for _, f := range []struct{ name, v string }{{"--tls-ca", c.CA}, {"--tls-cert", c.Cert}, {"--tls-key", c.Key}} {
			if f.v != "" {
				return fmt.Errorf("%s is set but --security-protocol is %s: TLS needs SSL or SASL_SSL", f.name, p)
			}
		}
	}
	if (c.Cert == "") != (c.Key == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	return nil
}

// Opts returns the franz-go options of c: none for PLAINTEXT. It reads
// the TLS files and the password or token file once, so a missing or
// unreadable file is an error here rather than a client that keeps
// failing to connect.
func (c Config) Opts() ([]kgo.Opt, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var opts []kgo.Opt
	if c.TLS() {
		cfg, err := c.tlsConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	if c.SASL() {
		m, err := c.mechanism()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

func (c Config) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CA != "" {
		pem, err := os.ReadFile(c.CA)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s holds no PEM certificate", c.CA)
		}
	}
	if c.Cert != "" {
		pair, err := tls.LoadX509KeyPair(c.Cert, c.Key)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert %s and --tls-key %s: %w", c.Cert, c.Key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// mechanism builds the SASL mechanism. The password and token are read
// from their files again on every authentication (each new connection
// and each re-authentication): a token expires and is replaced in its
// file by whatever renews it, and a password file may be rotated, and a
// long-running agent or sink must pick up the new one without a restart.
func (c Config) mechanism() (sasl.Mechanism, error) {
	m := strings.ToUpper(c.Mechanism)
	if m == OAuthBearer {
		if _, err := readSecret("--sasl-token-file", c.TokenFile); err != nil {
			return nil, err
		}
		return oauth.Oauth(func(context.Context) (oauth.Auth, error) {
			tok, err := readSecret("--sasl-token-file", c.TokenFile)
			return oauth.Auth{Token: tok}, err
		}), nil
	}
	if _, err := readSecret("--sasl-password-file", c.PasswordFile); err != nil {
		return nil, err
	}
	user := c.Username
	pass := func() (string, error) { return readSecret("--sasl-password-file", c.PasswordFile) }
	switch m {
	case Plain:
		return plain.Plain(func(context.Context) (plain.Auth, error) {
			p, err := pass()
			return plain.Auth{User: user, Pass: p}, err
		}), nil
	case ScramSHA256:
		return scram.Sha256(func(context.Context) (scram.Auth, error) {
			p, err := pass()
			return scram.Auth{User: user, Pass: p}, err
		}), nil
	default: // ScramSHA512; Validate let nothing else through
		return scram.Sha512(func(context.Context) (scram.Auth, error) {
			p, err := pass()
			return scram.Auth{User: user, Pass: p}, err
		}), nil
	}
}

// readSecret is the file's content without its trailing newline (what
// `echo secret > file` leaves); an empty secret is an error, since no
// broker accepts it and a half-written file would otherwise look like a
// wrong password.
func readSecret(flag, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flag, err)
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return "", fmt.Errorf("%s %s is empty", flag, path)
	}
	return s, nil
}

// LoginTimeout bounds CheckLogin's wait for a broker to answer.
const LoginTimeout = 10 * time.Second

// CheckLogin connects to brokers once with opts and returns an error if
// the login is refused: a wrong password or user, an expired or rejected
// token, a mechanism the broker does not offer, or a TLS handshake that
// fails (an untrusted certificate, a missing client certificate, a TLS
// client on a plaintext listener). A long-running client would otherwise
// retry such a login forever while looking merely slow. A broker that
// does not answer within LoginTimeout is not an error: the caller's own
// client keeps trying, as it does without security.
func CheckLogin(ctx context.Context, brokers []string, opts []kgo.Opt) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, LoginTimeout)
	defer cancel()
	err = cl.Ping(ctx)
	if err == nil || !Refused(err) {
		return nil
	}
	return fmt.Errorf("brokers %s refused the login: %w", strings.Join(brokers, ","), err)
}

// Refused reports whether err is a failed login or TLS handshake rather
// than an unreachable broker.
func Refused(err error) bool {
	if errors.Is(err, kerr.SaslAuthenticationFailed) || errors.Is(err, kerr.UnsupportedSaslMechanism) ||
		errors.Is(err, kerr.IllegalSaslState) {
		return true
	}
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		alert     tls.AlertError
		record    tls.RecordHeaderError
		verify    *tls.CertificateVerificationError
	)
	return errors.As(err, &unknownCA) || errors.As(err, &hostname) || errors.As(err, &invalid) ||
		errors.As(err, &alert) || errors.As(err, &record) || errors.As(err, &verify)
}
