package broker_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/simtel/simtel/internal/testutil"
)

// KafkaJS is a pure-JavaScript Kafka client with its own implementation of
// the protocol (no librdkafka). tests/kafkajs/compat.mjs drives it: admin
// topic creation, acks=-1 producers (plain and GZIP, idempotent), a
// two-member consumer group reading everything back with content and order
// checks, committed offsets via admin.fetchOffsets, group listing and
// description. CI installs Node.js and the pinned npm packages
// (scripts/install-deps.sh); elsewhere the test skips if they are missing.
func TestKafkaJS(t *testing.T) {
	node, dir := testutil.NodeModules(t, "tests/kafkajs", "Node.js >= 16; CI uses 20", "kafkajs")
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
	if err := cmd.Run(); err != nil {
		t.Fatalf("node compat.mjs against %s failed after %v: %v\n%s", tb.Addr, time.Since(start).Round(time.Millisecond), err, out.String())
	}
	if !strings.Contains(out.String(), "OK: ") {
		t.Fatalf("node compat.mjs exited 0 without its OK line:\n%s", out.String())
	}
	t.Logf("KafkaJS compat check passed in %v:\n%s", time.Since(start).Round(time.Millisecond), out.String())
}
