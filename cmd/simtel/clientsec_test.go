package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/simtel/simtel/internal/kafkasec"
	"github.com/simtel/simtel/internal/kafkasec/kafkasectest"
	"github.com/simtel/simtel/internal/testutil"
)

// simtel topic and simtel user over SASL_SSL, with flags and with
// SIMTEL_* variables; a wrong password fails at once and says so.
func TestAdminOverSASLSSL(t *testing.T) {
	b := kafkasectest.Start(t)
	sec := kafkasectest.Flags(b.SCRAM())
	brokers := "--brokers=" + b.Secure
	simtelOK(t, append([]string{"topic", "create", "secured", "-p", "2", brokers}, sec...)...)
	if out := simtelOK(t, append([]string{"topic", "list", brokers}, sec...)...); !strings.Contains(out, "secured") {
		t.Errorf("topic list over SASL_SSL:\n%s", out)
	}
	if out := simtelOK(t, append([]string{"user", "list", brokers}, sec...)...); !strings.Contains(out, kafkasectest.User) {
		t.Errorf("user list over SASL_SSL:\n%s", out)
	}

	// A load generator too: it creates its topic and produces through the
	// secure listener.
	simtelOK(t, append([]string{"bench", "produce", brokers, "--topic", "secured-bench", "--records", "1000", "--json"}, sec...)...)
	if out := simtelOK(t, append([]string{"topic", "describe", "secured-bench", brokers, "-o", "json"}, sec...)...); !strings.Contains(out, "secured-bench") {
		t.Errorf("bench produce over SASL_SSL made no topic:\n%s", out)
	}

	cfg := b.SCRAM()
	cmd := exec.Command(testutil.Binary(t), "topic", "list", brokers)
	cmd.Env = append(os.Environ(), "SIMTEL_SECURITY_PROTOCOL=SASL_SSL", "SIMTEL_SASL_MECHANISM=SCRAM-SHA-256",
		"SIMTEL_SASL_USERNAME="+cfg.Username, "SIMTEL_SASL_PASSWORD_FILE="+cfg.PasswordFile, "SIMTEL_TLS_CA="+cfg.CA)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "secured") {
		t.Errorf("topic list with SIMTEL_* settings: %v\n%s", err, out)
	}

	wrong := filepath.Join(t.TempDir(), "wrong")
	if err := os.WriteFile(wrong, []byte("nope\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, errOut, err := simtelRun(t, append(append([]string{"topic", "list", brokers}, sec...), "--sasl-password-file", wrong)...)
	if err == nil || !strings.Contains(errOut, "SASL_AUTHENTICATION_FAILED") {
		t.Errorf("topic list with a wrong password: %v\n%s", err, errOut)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("a wrong password took %v to fail", d)
	}
	// Without TLS on the SASL_SSL listener nothing gets through, and the
	// command gives up at --timeout rather than hanging.
	_, errOut, err = simtelRun(t, "topic", "list", brokers, "--timeout", "3s", "--security-protocol", "SASL_PLAINTEXT",
		"--sasl-mechanism", "SCRAM-SHA-512", "--sasl-username", kafkasectest.User, "--sasl-password-file", b.PasswordFile)
	if err == nil {
		t.Errorf("a SASL_PLAINTEXT client got through a SASL_SSL listener:\n%s", errOut)
	}
}

// A Slurm hook's security settings come from its --env-file unless the
// command line or the environment gave them.
func TestClientSecFromVars(t *testing.T) {
	var s clientSecFlags
	f := pflag.NewFlagSet("hook", pflag.ContinueOnError)
	s.register(f)
	if err := f.Parse([]string{"--sasl-username", "cli"}); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"SIMTEL_SECURITY_PROTOCOL": "SASL_SSL", "SIMTEL_SASL_MECHANISM": "SCRAM-SHA-512",
		"SIMTEL_SASL_USERNAME": "file", "SIMTEL_SASL_PASSWORD_FILE": "/etc/simtel/slurm.password", "SIMTEL_BROKERS": "b:9092"}
	if err := s.fromVars(f, vars); err != nil {
		t.Fatal(err)
	}
	want := kafkasec.Config{Protocol: "SASL_SSL", Mechanism: "SCRAM-SHA-512", Username: "cli", PasswordFile: "/etc/simtel/slurm.password"}
	if s.cfg != want {
		t.Errorf("got %+v, want %+v", s.cfg, want)
	}
	var names []string
	f.VisitAll(func(fl *pflag.Flag) { names = append(names, fl.Name) })
	if !slices.Equal(names, slices.Sorted(slices.Values(clientSecNames))) {
		t.Errorf("the group registers %v, fromVars knows %v", names, clientSecNames)
	}
}
