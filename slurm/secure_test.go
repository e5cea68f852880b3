package slurm

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/simtel/simtel/internal/kafkasec/kafkasectest"
	"github.com/simtel/simtel/internal/testutil"
)

// `simtel slurm prolog` publishes through a SASL_SSL listener with the
// security settings of its --env-file, Slurm giving it nothing else.
func TestHookCommandOverSASLSSL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	b := kafkasectest.Start(t)
	cfg := b.SCRAM()
	envFile := filepath.Join(t.TempDir(), "slurm.env")
	env := strings.Join([]string{"SIMTEL_BROKERS=" + b.Secure, "SIMTEL_TIMEOUT=20s",
		"SIMTEL_SECURITY_PROTOCOL=" + cfg.Protocol, "SIMTEL_SASL_MECHANISM=" + cfg.Mechanism,
		"SIMTEL_SASL_USERNAME=" + cfg.Username, "SIMTEL_SASL_PASSWORD_FILE=" + cfg.PasswordFile,
		"SIMTEL_TLS_CA=" + cfg.CA}, "\n")
	if err := os.WriteFile(envFile, []byte(env+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testutil.Binary(t), "slurm", "prolog", "--env-file", envFile, "--scontrol", fakeScontrol(t, prologLine))
	cmd.Env = []string{"SLURM_JOB_ID=8", "SLURMD_NODENAME=n1", "SLURM_JOB_NODELIST=n1"}
	if out, err := cmd.CombinedOutput(); err != nil || strings.Contains(string(out), "level=ERROR") {
		t.Fatalf("prolog: %v\n%s", err, out)
	}
	if runs := registeredRuns(t, b.Addr); len(runs) != 1 || runs[0].Run != "8" || len(runs[0].NodesUp) != 1 {
		t.Fatalf("runs after the prolog over SASL_SSL: %+v", runs)
	}
}
