// Package kafkasectest starts a broker with a SASL_SSL listener, for the
// tests of clients that connect securely: one user with a SCRAM password,
// OAUTHBEARER tokens signed with a known HS256 key, and a test CA.
//
// The broker is a `simtel broker` process (brokertest.Start), so the
// tests that use it do not link the broker: the agent's among them.
package kafkasectest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/internal/kafkasec"
	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest"
)

// User and Password are the SCRAM user the broker knows (both hashes).
const (
	User     = "alice"
	Password = "alice-secret"
)

// Broker is a broker process with a PLAINTEXT listener (Addr, for a
// test's setup) and a SASL_SSL one (Secure) offering PLAIN, both SCRAMs
// and OAUTHBEARER with HS256 tokens.
type Broker struct {
	*brokertest.Broker
	Secure       string
	CA           *testutil.CA
	PasswordFile string // holds Password
	dir          string
	key          []byte
}

// Start starts the broker with opts (Args adds flags) and adds User
// through AlterUserScramCredentials on its PLAINTEXT listener, as an
// operator's kadm would.
func Start(t testing.TB, opts ...brokertest.Option) *Broker {
	t.Helper()
	b := &Broker{Secure: testutil.FreePort(t), CA: testutil.NewCA(t), dir: t.TempDir(),
		key: []byte("an HS256 key of at least 32 bytes, for tests")}
	srv := b.CA.Server(t, "broker")
	keyFile := b.write(t, "hs256.key", string(b.key))
	b.PasswordFile = b.write(t, "password", Password+"\n")
	local := testutil.FreePort(t)
	opts = append([]brokertest.Option{brokertest.Listen(local), brokertest.Args(
		"--listeners", "local="+kafkasec.Plaintext+"://"+local+",secure="+kafkasec.SASLSSL+"://"+b.Secure,
		"--tls-cert", srv.CertFile, "--tls-key", srv.KeyFile,
		"--sasl-mechanisms", strings.Join(kafkasec.Mechanisms, ","),
		"--sasl-oauthbearer-hmac-key-file", keyFile)}, opts...)
	b.Broker = brokertest.Start(t, opts...)

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	res, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{
		{User: User, Mechanism: kadm.ScramSha256, Password: Password},
		{User: User, Mechanism: kadm.ScramSha512, Password: Password},
	})
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		t.Fatalf("cannot add the SCRAM user %s: %v", User, err)
	}
	return b
}

func (b *Broker) write(t testing.TB, name, content string) string {
	t.Helper()
	p := filepath.Join(b.dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// SCRAM is the client configuration of User with SCRAM-SHA-512 over
// SASL_SSL.
func (b *Broker) SCRAM() kafkasec.Config {
	return kafkasec.Config{Protocol: kafkasec.SASLSSL, Mechanism: kafkasec.ScramSHA512,
		Username: User, PasswordFile: b.PasswordFile, CA: b.CA.CAFile}
}

// Flags are the command-line flags of cfg.
func Flags(cfg kafkasec.Config) []string {
	var out []string
	for _, f := range []struct{ name, v string }{
		{"security-protocol", cfg.Protocol}, {"sasl-mechanism", cfg.Mechanism},
		{"sasl-username", cfg.Username}, {"sasl-password-file", cfg.PasswordFile},
		{"sasl-token-file", cfg.TokenFile}, {"tls-ca", cfg.CA}, {"tls-cert", cfg.Cert}, {"tls-key", cfg.Key},
	} {
		if f.v != "" {
			out = append(out, "--"+f.name+"="+f.v)
		}
	}
	return out
}

// Token writes an HS256 token for sub, expiring at exp, to a new file of
// the test and returns the file's path.
func (b *Broker) Token(t testing.TB, name, sub string, exp time.Time) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": sub, "exp": exp.Unix()}).SignedString(b.key)
	if err != nil {
		t.Fatal(err)
	}
	return b.write(t, name, s)
}
