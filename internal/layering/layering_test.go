package layering

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/simtel/simtel"

// rules: the packages matching pattern, with their tests, depend on none
// of the module's packages under forbidden.
var rules = []struct {
	pattern   string
	forbidden []string
}{
	{"./lake/...", []string{"sink"}},
	{"./agent/...", []string{"broker"}},
	{"./broker/...", []string{"agent", "sink", "lake"}},
}

func TestNoUpwardImports(t *testing.T) {
	for _, r := range rules {
		t.Run(strings.Trim(r.pattern, "./"), func(t *testing.T) {
			cmd := exec.Command("go", "list", "-deps", "-test", "-f", `{{.ImportPath}}|{{join .Imports ","}}`, r.pattern)
			cmd.Dir = "../.." // the module's root
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("go list -deps -test %s: %v\n%s", r.pattern, err, stderr.Bytes())
			}
			// The listing must hold the pattern's own packages, or an empty
			// answer would pass.
			own := module + "/" + strings.TrimSuffix(strings.TrimPrefix(r.pattern, "./"), "/...")
			if !strings.Contains(string(out), own+"|") {
				t.Fatalf("go list -deps -test %s does not list %s:\n%s", r.pattern, own, out)
			}
			for _, v := range violations(string(out), r.forbidden) {
				t.Errorf("%s depends on a package it must not: %s", r.pattern, v)
			}
		})
	}
}

// violations reads the lines "package|import,import,..." of go list and
// returns, for each import of a package under forbidden by a package
// that is not, "importer imports imported".
func violations(listing string, forbidden []string) []string {
	var out []string
	for line := range strings.Lines(listing) {
		pkg, imports, _ := strings.Cut(strings.TrimSpace(line), "|")
		if pkg == "" || under(pkg, forbidden) {
			continue
		}
		for imp := range strings.SplitSeq(imports, ",") {
			if imp != "" && under(imp, forbidden) {
				out = append(out, name(pkg)+" imports "+name(imp))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// under reports whether the package path p (maybe a test variant,
// "p [q.test]") is one of the module's packages under a directory of dirs.
func under(p string, dirs []string) bool {
	p = name(p)
	for _, d := range dirs {
		d = module + "/" + d
		if p == d || strings.HasPrefix(p, d+"/") || p == d+"_test" {
			return true
		}
	}
	return false
}

// name is p without its test variant's suffix (" [q.test]").
func name(p string) string {
	p, _, _ = strings.Cut(p, " [")
	return p
}

// The check itself finds an upward import, in a test or a helper, and
// ignores look-alike paths.
func TestViolations(t *testing.T) {
	listing := strings.Join([]string{
		module + "/agent|" + module + "/agent/lineproto,fmt",
		module + "/agent [" + module + "/agent.test]|" + module + "/internal/testutil/brokertest/inproc [" + module + "/agent.test]",
		module + "/internal/testutil/brokertest/inproc|" + module + "/broker," + module + "/internal/testutil/brokertest",
		module + "/broker|" + module + "/broker/server",
		module + "/brokerage|fmt",
		module + "/agent.test|" + module + "/agent [" + module + "/agent.test]",
	}, "\n") + "\n"
	got := violations(listing, []string{"broker"})
	want := []string{module + "/internal/testutil/brokertest/inproc imports " + module + "/broker"}
	if !slices.Equal(got, want) {
		t.Errorf("violations = %q, want %q", got, want)
	}
	if got := violations(listing, []string{"sink"}); len(got) != 0 {
		t.Errorf("violations of sink = %q, want none", got)
	}
}
