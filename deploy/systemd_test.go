package deploy

import (
	"bufio"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/simtel/simtel/internal/testutil"
)

// unitFile is a parsed systemd unit: section → key → values in order.
type unitFile map[string]map[string][]string

func (u unitFile) get(section, key string) string {
	v := u[section][key]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

func readUnit(t *testing.T, path string) unitFile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unitFile{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			u[section] = map[string][]string{}
		case strings.HasSuffix(line, `\`):
			t.Fatalf("%s:%d: continued lines are not used in these units", path, n)
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: %q is not key=value inside a section", path, n, line)
			}
			u[section][k] = append(u[section][k], v)
		}
	}
	return u
}

// TestSystemdUnits checks the units' structure and flags, and runs
// systemd-analyze verify on them when it is installed.
func TestSystemdUnits(t *testing.T) {
	units := map[string]string{"broker": "simtel-broker.service", "agent": "simtel-agent.service", "sink": "simtel-sink.service"}
	for cmd, name := range units {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join("systemd", name)
			u := readUnit(t, path)
			for _, c := range []struct{ section, key, want string }{
				{"Unit", "After", ""}, {"Unit", "Description", ""},
				{"Service", "User", "simtel"}, {"Service", "Group", "simtel"},
				{"Service", "StateDirectory", "simtel-" + cmd},
				{"Service", "Restart", "on-failure"}, {"Service", "KillSignal", "SIGTERM"},
				{"Service", "NoNewPrivileges", "yes"}, {"Service", "ProtectSystem", "strict"},
				{"Service", "ProtectHome", "yes"}, {"Service", "PrivateTmp", "yes"},
				{"Service", "LimitNOFILE", ""}, {"Service", "TimeoutStopSec", ""},
				{"Install", "WantedBy", "multi-user.target"},
			} {
				got := u.get(c.section, c.key)
				if got == "" || (c.want != "" && got != c.want) {
					t.Errorf("[%s] %s: got %q, want %q", c.section, c.key, got, c.want)
				}
			}
			stateDir := "/var/lib/" + u.get("Service", "StateDirectory")
			if rw := u.get("Service", "ReadWritePaths"); !strings.Contains(" "+rw+" ", " "+stateDir+" ") {
				t.Errorf("ReadWritePaths %q does not hold the state directory %s", rw, stateDir)
			}
			envFiles := strings.Join(u["Service"]["EnvironmentFile"], " ")
			for _, want := range []string{"-/etc/simtel/simtel.env", "-/etc/simtel/" + cmd + ".env"} {
				if !strings.Contains(envFiles, want) {
					t.Errorf("EnvironmentFile: got %q, want %s among them", envFiles, want)
				}
			}

			exec := strings.Fields(strings.ReplaceAll(u.get("Service", "ExecStart"), "%S", "/var/lib"))
			if len(exec) < 2 || exec[0] != "/usr/local/bin/simtel" || exec[1] != cmd {
				t.Fatalf("ExecStart: got %q, want /usr/local/bin/simtel %s ...", exec, cmd)
			}
			checkArgs(t, path+" ExecStart", exec[1:])
			for i, a := range exec {
				if (a == "--data-dir" || a == "--spool-dir") && i+1 < len(exec) && !strings.HasPrefix(exec[i+1], stateDir) {
					t.Errorf("%s %s is outside the writable state directory %s", a, exec[i+1], stateDir)
				}
			}

			// The stop timeout must leave room for the command's own
			// shutdown (the agent sends its spool, the sink flushes).
			stop, err := time.ParseDuration(u.get("Service", "TimeoutStopSec"))
			if err != nil {
				t.Fatalf("TimeoutStopSec %q: %v", u.get("Service", "TimeoutStopSec"), err)
			}
			if f := help(t, cmd); f.exists && f.flags["shutdown-timeout"] {
				shutdown := f.defaults["shutdown-timeout"]
				for i, a := range exec {
					if a == "--shutdown-timeout" && i+1 < len(exec) {
						shutdown = exec[i+1]
					}
				}
				d, err := time.ParseDuration(shutdown)
				if err != nil {
					t.Fatalf("shutdown timeout %q: %v", shutdown, err)
				}
				if stop < d+10*time.Second {
					t.Errorf("TimeoutStopSec %s leaves less than 10s above --shutdown-timeout %s", stop, d)
				}
			}
		})
	}

	t.Run("systemd-analyze verify", func(t *testing.T) { systemdVerify(t, slices.Collect(maps.Values(units)), "") })
}

// systemdVerify runs systemd-analyze verify on copies of the units in
// systemd/ (unit file names), their ExecStart pointed at the binary under
// test; with dropInDir, each unit gets systemd/<dropInDir>/<unit
// without .service>.conf as a drop-in. Any output is a finding: verify
// exits 0 on unknown keys and bad values but prints them.
func systemdVerify(t *testing.T, units []string, dropInDir string) {
	t.Helper()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		testutil.SkipOrFail(t, "systemd-analyze is not installed (apt-get install -y systemd); the units were only parsed", "; scripts/install-deps.sh installs it under CI")
	}
	dir := t.TempDir()
	var paths []string
	for _, name := range units {
		b, err := os.ReadFile(filepath.Join("systemd", name))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(strings.ReplaceAll(string(b), "/usr/local/bin/simtel", binary(t))), 0o644); err != nil {
			t.Fatal(err)
		}
		if dropInDir != "" {
			// verify reads a unit's drop-ins from <unit>.d next to it.
			drop, err := os.ReadFile(filepath.Join("systemd", dropInDir, strings.TrimSuffix(name, ".service")+".conf"))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(p+".d", 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(p+".d", dropInDir+".conf"), drop, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		paths = append(paths, p)
	}
	out, err := exec.Command(analyze, append([]string{"verify"}, paths...)...).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestEnvFiles checks the environment files: every SIMTEL_* variable is a
// flag of its command, every flag of the command is explained in its
// example, and every assignment has a comment.
func TestEnvFiles(t *testing.T) {
	shared := readEnvFile(t, filepath.Join("systemd", "simtel.env"))
	checkEnv(t, "systemd/simtel.env", keys(shared.mentioned), "broker", "agent", "sink")
	for k := range shared.mentioned {
		if !shared.explained[k] {
			t.Errorf("systemd/simtel.env: %s has no comment explaining it", k)
		}
	}
	for _, cmd := range []string{"broker", "agent", "sink"} {
		t.Run(cmd, func(t *testing.T) {
			path := filepath.Join("examples", cmd+".env")
			e := readEnvFile(t, path)
			f := needCommand(t, cmd)
			checkEnv(t, path, keys(e.mentioned), cmd)
			for k := range e.mentioned {
				if !e.explained[k] {
					t.Errorf("%s: %s has no comment explaining it", path, k)
				}
			}
			for flag := range f.flags {
				if flag == "help" {
					continue
				}
				k := "SIMTEL_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
				if !e.mentioned[k] {
					t.Errorf("%s: --%s (%s) is not explained; every flag of `simtel %s --help` should be", path, flag, k, cmd)
				}
			}
		})
	}
}
