package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// SkipOrFail stops a test that needs a tool this machine lacks (msg says
// which): under CI=true, where scripts/install-deps.sh installs every tool
// the tests use, it fails the test with msg and ciHint (how to get it);
// elsewhere it skips it.
func SkipOrFail(t testing.TB, msg, ciHint string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + ciHint)
	}
	t.Skip(msg)
}

// NodeModules finds node (needs: which Node.js the test takes) and the npm
// packages pkgs under dir/node_modules, dir being a directory of npm tests
// with its own package.json (tests/kafkajs, tests/iceberg-js) that
// scripts/install-deps.sh fills; a missing one skips the test or fails it
// as SkipOrFail does. It returns node's path and dir's absolute path.
func NodeModules(t testing.TB, dir, needs string, pkgs ...string) (node, abs string) {
	t.Helper()
	hint := "; run scripts/install-deps.sh (npm ci --prefix " + dir + ")"
	node, err := exec.LookPath("node")
	if err != nil {
		SkipOrFail(t, "node is not installed (needs "+needs+")", hint)
	}
	abs = filepath.Join(moduleRoot(t), dir)
	for _, p := range pkgs {
		if _, err := os.Stat(filepath.Join(abs, "node_modules", p, "package.json")); err != nil {
			SkipOrFail(t, dir+"/node_modules/"+p+" is missing", hint)
		}
	}
	return node, abs
}

// moduleRoot is the directory of the go.mod above the test's package
// directory (the one go test runs it in).
func moduleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = up
	}
}
