package deploy

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestSystemdSecurityDropIns checks the drop-ins of systemd/security: each
// loads its secrets with LoadCredential= from /etc/simtel/credentials/<part>,
// every SIMTEL_* variable it sets is a flag of its command, every path under
// the credentials directory (%d) names a credential it loads and every
// credential is used; and systemd-analyze verify accepts each unit with its
// drop-in.
func TestSystemdSecurityDropIns(t *testing.T) {
	units := map[string]string{"broker": "simtel-broker", "agent": "simtel-agent", "sink": "simtel-sink"}
	for cmd, unit := range units {
		t.Run(unit, func(t *testing.T) {
			path := filepath.Join("systemd", "security", unit+".conf")
			u := readUnit(t, path)
			creds := map[string]bool{}
			for _, lc := range u["Service"]["LoadCredential"] {
				id, src, ok := strings.Cut(lc, ":")
				want := "/etc/simtel/credentials/" + cmd + "/"
				if !ok || id == "" || !strings.HasPrefix(src, want) {
					t.Errorf("LoadCredential=%s: want ID:%s<file>", lc, want)
				}
				creds[id] = true
			}
			if len(creds) == 0 {
				t.Fatal("no LoadCredential=")
			}
			used := map[string]bool{}
			var vars []string
			for _, line := range u["Service"]["Environment"] {
				for _, kv := range strings.Fields(line) {
					k, v, ok := strings.Cut(kv, "=")
					if !ok {
						t.Errorf("Environment=%s: %q is not KEY=VALUE", line, kv)
						continue
					}
					vars = append(vars, k)
					if id, ok := strings.CutPrefix(v, "%d/"); ok {
						if !creds[id] {
							t.Errorf("%s=%s: no LoadCredential=%s:...", k, v, id)
						}
						used[id] = true
					}
				}
			}
			checkEnv(t, path, vars, cmd)
			for id := range creds {
				if !used[id] {
					t.Errorf("credential %s is loaded but no variable points at %%d/%s", id, id)
				}
			}
		})
	}

	t.Run("systemd-analyze verify", func(t *testing.T) {
		var names []string
		for _, unit := range units {
			names = append(names, unit+".service")
		}
		systemdVerify(t, names, "security")
	})
}
