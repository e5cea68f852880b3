package deploy

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/simtel/simtel/internal/testutil"
)

// plannedBrokerFlags are the cluster flags of the command-line contract
// (DESIGN.md) that the replicated broker will have. The deployment files
// pass them as SIMTEL_* environment variables, which a release without the
// flag ignores; on the command line they would stop it.
var plannedBrokerFlags = map[string]bool{"raft-listen": true, "gossip-listen": true, "join": true, "bootstrap-expect": true}

// binary is the simtel binary under test: $SIMTEL_TEST_BIN (e.g. a
// release build) or the one built from this tree.
func binary(t *testing.T) string {
	t.Helper()
	if b := os.Getenv("SIMTEL_TEST_BIN"); b != "" {
		return b
	}
	return testutil.Binary(t)
}

// cliFlags is what `simtel <cmd> --help` lists.
type cliFlags struct {
	exists   bool              // the command is in the binary
	flags    map[string]bool   // long names, global flags included
	defaults map[string]string // flag → its "(default …)" text, when shown
}

var (
	helpMu    sync.Mutex
	helpCache = map[string]*cliFlags{}
	flagLine  = regexp.MustCompile(`^\s+(?:-\w, )?--([a-z0-9][a-z0-9-]*)(?:\s+\S+)?\s{2,}(.*)$`)
	defaultRe = regexp.MustCompile(`\(default "?([^")]*)"?\)\s*$`)
)

// help runs `simtel <cmd> --help` once per command (cmd may be a
// subcommand path, "user add") and parses its flags.
func help(t *testing.T, cmd string) *cliFlags {
	t.Helper()
	helpMu.Lock()
	defer helpMu.Unlock()
	if f, ok := helpCache[cmd]; ok {
		return f
	}
	out, err := exec.Command(binary(t), append(strings.Fields(cmd), "--help")...).CombinedOutput()
	f := &cliFlags{flags: map[string]bool{}, defaults: map[string]string{}}
	switch {
	case err != nil && strings.Contains(string(out), "unknown command"):
		// not in this binary
	case err != nil:
		t.Fatalf("simtel %s --help: %v\n%s", cmd, err, out)
	default:
		f.exists = true
		sc := bufio.NewScanner(strings.NewReader(string(out)))
		for sc.Scan() {
			m := flagLine.FindStringSubmatch(sc.Text())
			if m == nil {
				continue
			}
			f.flags[m[1]] = true
			if d := defaultRe.FindStringSubmatch(m[2]); d != nil {
				f.defaults[m[1]] = d[1]
			}
		}
		if len(f.flags) < 3 {
			t.Fatalf("simtel %s --help lists only %d flags; is its format still \"  --name type  text\"?\n%s", cmd, len(f.flags), out)
		}
	}
	helpCache[cmd] = f
	return f
}

// needCommand skips the (sub)test when the binary lacks cmd.
func needCommand(t *testing.T, cmd string) *cliFlags {
	t.Helper()
	f := help(t, cmd)
	if !f.exists {
		t.Skipf("`simtel %s` is not in this binary yet (not registered in cmd/simtel/root.go); its checks are skipped", cmd)
	}
	return f
}

// checkArgs checks a command line's flags against --help of its command:
// args[0] is the subcommand; flags are --name, --name=value or
// --name value.
func checkArgs(t *testing.T, where string, args []string) {
	t.Helper()
	if len(args) == 0 {
		t.Errorf("%s: no command", where)
		return
	}
	f := help(t, args[0])
	if !f.exists {
		t.Logf("%s: `simtel %s` is not in this binary yet; its flags are not checked", where, args[0])
		return
	}
	for _, a := range args[1:] {
		if !strings.HasPrefix(a, "--") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !f.flags[name] {
			t.Errorf("%s: --%s is not a flag of `simtel %s` (see its --help)", where, name, args[0])
		}
	}
}

// envFlag maps SIMTEL_SPOOL_DIR to spool-dir; ok is false for other names.
func envFlag(key string) (string, bool) {
	name, ok := strings.CutPrefix(key, "SIMTEL_")
	if !ok || name == "" {
		return "", false
	}
	return strings.ToLower(strings.ReplaceAll(name, "_", "-")), true
}

// checkEnv checks that every SIMTEL_* variable sets a flag of at least one
// of cmds (or a planned broker flag, when cmds has the broker).
func checkEnv(t *testing.T, where string, keys []string, cmds ...string) {
	t.Helper()
	for _, k := range keys {
		flag, ok := envFlag(k)
		if !ok {
			continue
		}
		found, known := false, false
		for _, c := range cmds {
			f := help(t, c)
			if !f.exists {
				continue
			}
			known = true
			if f.flags[flag] || (c == "broker" && plannedBrokerFlags[flag]) {
				found = true
			}
		}
		if known && !found {
			t.Errorf("%s: %s sets --%s, which no command of %v has (see their --help)", where, k, flag, cmds)
		}
	}
}

// interpolate replaces compose's ${VAR:-default} and ${VAR} with the
// default (or nothing).
func interpolate(s string) string {
	return regexp.MustCompile(`\$\{[A-Za-z_][A-Za-z0-9_]*(?::?-([^}]*))?\}`).ReplaceAllString(s, "$1")
}

// yamlDocs decodes every document of a YAML file.
func yamlDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	var docs []map[string]any
	for {
		var d map[string]any
		err := dec.Decode(&d)
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("%s: document %d does not parse: %v", path, len(docs)+1, err)
		}
		if d != nil {
			docs = append(docs, d)
		}
	}
	if len(docs) == 0 {
		t.Fatalf("%s: no YAML documents", path)
	}
	return docs
}

// Accessors for decoded YAML: a missing or mistyped value is the zero value.
func m(v any, path ...string) map[string]any {
	for _, p := range path {
		mm, _ := v.(map[string]any)
		v = mm[p]
	}
	mm, _ := v.(map[string]any)
	return mm
}

func s(v any, path ...string) string {
	for _, p := range path {
		mm, _ := v.(map[string]any)
		v = mm[p]
	}
	switch x := v.(type) {
	case string:
		return x
	case nil:
		return ""
	default:
		b, _ := yaml.Marshal(x)
		return strings.TrimSpace(string(b))
	}
}

func l(v any, path ...string) []any {
	for _, p := range path {
		mm, _ := v.(map[string]any)
		v = mm[p]
	}
	x, _ := v.([]any)
	return x
}

func strs(v []any) []string {
	var out []string
	for _, x := range v {
		out = append(out, s(x))
	}
	return out
}

func keys[V any](mm map[string]V) []string {
	out := make([]string, 0, len(mm))
	for k := range mm {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// envFile is a parsed SIMTEL_*-style environment file: set and commented
// assignments, each with whether a comment explains it.
type envFile struct {
	set       map[string]string
	mentioned map[string]bool // set or commented out
	explained map[string]bool // its block has a comment line that is not an assignment
}

var assignRe = regexp.MustCompile(`^(#\s*)?([A-Z][A-Z0-9_]*)=(.*)$`)

func readEnvFile(t *testing.T, path string) envFile {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	e := envFile{set: map[string]string{}, mentioned: map[string]bool{}, explained: map[string]bool{}}
	var block []string
	var hasComment bool
	flush := func() {
		for _, k := range block {
			e.explained[k] = hasComment
		}
		block, hasComment = nil, false
	}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			flush()
			continue
		}
		a := assignRe.FindStringSubmatch(line)
		switch {
		case a != nil:
			e.mentioned[a[2]] = true
			block = append(block, a[2])
			if a[1] == "" {
				e.set[a[2]] = a[3]
			}
		case strings.HasPrefix(line, "#"):
			hasComment = true
		default:
			t.Errorf("%s:%d: %q is neither a comment nor NAME=value", path, i+1, line)
		}
	}
	flush()
	return e
}
