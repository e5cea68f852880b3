package broker_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// KafkaJS is a pure-JavaScript Kafka client with its own implementation of
// the protocol (no librdkafka). tests/kafkajs/compat.mjs drives it: admin
// topic creation, acks=-1 producers (plain and GZIP, idempotent), a
// two-member consumer group reading everything back with content and order
// checks, committed offsets via admin.fetchOffsets, group listing and
// description. CI installs Node.js and the pinned npm packages
// (scripts/install-deps.sh); elsewhere the test skips if they are missing.
func TestKafkaJS(t *testing.T) {
	skipOrFail := func(msg string) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + "; run scripts/install-deps.sh (npm ci --prefix tests/kafkajs)")
		}
		t.Skip(msg)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		skipOrFail("node is not installed (needs Node.js >= 16; CI uses 20)")
	}
	dir, err := filepath.Abs(filepath.Join("..", "tests", "kafkajs"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "kafkajs", "package.json")); err != nil {
		skipOrFail("tests/kafkajs/node_modules/kafkajs is missing")
	}

	tb := startBroker(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(dir, "compat.mjs"))
	cmd.Dir = dir
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = append(os.Environ(), "SIMTEL_BROKER="+tb.Addr)
	if os.Getenv("KAFKAJS_LOG_LEVEL") == "" && os.Getenv("SIMTEL_TEST_LOG") != "" {
		cmd.Env = append(cmd.Env, "KAFKAJS_LOG_LEVEL=DEBUG")
	}
	var out strings.Builder
	cmd.Stdout = &out
	cmd.Stderr = &out
	start := time.Now()
	err = cmd.Run()
	if err != nil {
		t.Fatalf("node compat.mjs against %s failed after %v: %v\n%s", tb.Addr, time.Since(start).Round(time.Millisecond), err, out.String())
	}
	if !strings.Contains(out.String(), "OK: ") {
		t.Fatalf("node compat.mjs exited 0 without its OK line:\n%s", out.String())
	}
	t.Logf("KafkaJS compat check passed in %v:\n%s", time.Since(start).Round(time.Millisecond), out.String())
}
