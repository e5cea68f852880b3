package kafkasec_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/internal/kafkasec"
	"github.com/simtel/simtel/internal/kafkasec/kafkasectest"
	"github.com/simtel/simtel/internal/testutil"
)

func client(t *testing.T, seed string, cfg kafkasec.Config, more ...kgo.Opt) *kgo.Client {
	t.Helper()
	opts, err := cfg.Opts()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt{kgo.SeedBrokers(seed)}, opts...), more...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Every mechanism over SASL_SSL produces and consumes; the wrong
// password, an expired token and an untrusted broker certificate are
// refused at once with an error that says so.
func TestSASLSSLEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker")
	}
	b := kafkasectest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	scram256 := b.SCRAM()
	scram256.Mechanism = kafkasec.ScramSHA256
	plain := b.SCRAM()
	plain.Mechanism = kafkasec.Plain
	oauth := kafkasec.Config{Protocol: kafkasec.SASLSSL, Mechanism: kafkasec.OAuthBearer,
		TokenFile: b.Token(t, "token", kafkasectest.User, time.Now().Add(time.Hour)), CA: b.CA.CAFile}
	for _, cfg := range []kafkasec.Config{b.SCRAM(), scram256, plain, oauth} {
		topic := "secure-" + strings.ToLower(cfg.Mechanism)
		cl := client(t, b.Secure, cfg, kgo.DefaultProduceTopic(topic), kgo.ConsumeTopics(topic), kgo.AllowAutoTopicCreation())
		if err := kafkasec.CheckLogin(ctx, []string{b.Secure}, mustOpts(t, cfg)); err != nil {
			t.Fatalf("%s: CheckLogin: %v", cfg.Mechanism, err)
		}
		if err := cl.ProduceSync(ctx, kgo.StringRecord(cfg.Mechanism)).FirstErr(); err != nil {
			t.Fatalf("%s: produce: %v", cfg.Mechanism, err)
		}
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil || len(fs.Records()) != 1 || string(fs.Records()[0].Value) != cfg.Mechanism {
			t.Fatalf("%s: consumed %v, %v", cfg.Mechanism, fs.Records(), err)
		}
	}

	wrong := b.SCRAM()
	wrong.PasswordFile = writeFile(t, "not the password")
	expired := oauth
	expired.TokenFile = b.Token(t, "expired", kafkasectest.User, time.Now().Add(-time.Minute))
	other := b.SCRAM()
	other.CA = testutil.NewCA(t).CAFile
	for _, tc := range []struct {
		name string
		cfg  kafkasec.Config
		is   error
		want string
	}{
		{"wrong password", wrong, kerr.SaslAuthenticationFailed, "SASL_AUTHENTICATION_FAILED"},
		{"expired token", expired, kerr.SaslAuthenticationFailed, "SASL_AUTHENTICATION_FAILED"},
		{"untrusted certificate", other, nil, "certificate signed by unknown authority"},
	} {
		start := time.Now()
		err := kafkasec.CheckLogin(ctx, []string{b.Secure}, mustOpts(t, tc.cfg))
		if err == nil || !strings.Contains(err.Error(), "refused the login") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: CheckLogin: %v; want a refused login with %q", tc.name, err, tc.want)
		}
		if tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("%s: %v is not %v", tc.name, err, tc.is)
		}
		if d := time.Since(start); d >= kafkasec.LoginTimeout {
			t.Errorf("%s: refused only after %v", tc.name, d)
		}
	}

}

func mustOpts(t *testing.T, cfg kafkasec.Config) []kgo.Opt {
	t.Helper()
	opts, err := cfg.Opts()
	if err != nil {
		t.Fatal(err)
	}
	return opts
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
