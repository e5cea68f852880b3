package sink_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/simtel/simtel/internal/kafkasec/kafkasectest"
	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest"
)

// The sink consumes over SASL_SSL with its settings from SIMTEL_*
// variables, as a systemd unit's environment file gives them, and every
// record lands in the lake once; with a wrong password it stops at once
// and says why.
func TestSinkSASLSSL(t *testing.T) {
	b := kafkasectest.Start(t, brokertest.Topic("telemetry", 2))
	e := &env{t: t, dir: t.TempDir(), produced: map[po]sample{}, broker: b.Addr}
	e.lake = "file://" + filepath.Join(e.dir, "lake")
	e.produce(5_000, 1_000, []string{"s1"}, 21)

	cfg := b.SCRAM()
	t.Setenv("SIMTEL_SECURITY_PROTOCOL", cfg.Protocol)
	t.Setenv("SIMTEL_SASL_MECHANISM", cfg.Mechanism)
	t.Setenv("SIMTEL_SASL_USERNAME", cfg.Username)
	t.Setenv("SIMTEL_SASL_PASSWORD_FILE", cfg.PasswordFile)
	t.Setenv("SIMTEL_TLS_CA", cfg.CA)
	p := e.startSink("--brokers", b.Secure, "--flush-age", "500ms", "--jobs-topic", "-")
	st := e.store()
	e.waitCommitted(st, 60*time.Second, p)
	if err := p.Stop(30 * time.Second); err != nil {
		t.Fatalf("sink stop: %v\n%s", err, tail(sinkLog(t, p), 30))
	}
	e.verify(st)

	wrong := filepath.Join(t.TempDir(), "wrong")
	if err := os.WriteFile(wrong, []byte("not the password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	out, err := exec.CommandContext(ctx, testutil.Binary(t), "sink", "--brokers", b.Secure, "--topics", "telemetry",
		"--lake", e.lake, "--sasl-password-file", wrong).CombinedOutput()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("a sink with a wrong password: %v after %v\n%s", err, time.Since(start), out)
	}
	if !strings.Contains(string(out), "refused the login") || !strings.Contains(string(out), "SASL_AUTHENTICATION_FAILED") {
		t.Errorf("a sink with a wrong password says:\n%s", out)
	}
}
