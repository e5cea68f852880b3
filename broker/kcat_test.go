package broker_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// kcat is librdkafka's command-line client: the same library Telegraf's
// sibling tools, confluent-kafka-python and many others use. CI installs it
// (scripts/install-deps.sh); elsewhere the test skips if it is missing.
func kcatPath(t *testing.T) string {
	p, err := exec.LookPath("kcat")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("kcat is not installed; scripts/install-deps.sh installs it")
		}
		t.Skip("kcat not installed (apt-get install kcat)")
	}
	return p
}

func runKcat(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kcatPath(t), args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kcat %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

func TestKcat(t *testing.T) {
	kcatPath(t)
	tb := startBroker(t, t.TempDir(), func(c *testConfig) { c.DefaultPartitions = 3 })

	// Produce to a topic that does not exist yet: auto-created with 3 partitions.
	var in strings.Builder
	for i := 0; i < 300; i++ {
		fmt.Fprintf(&in, "k%d:v%d\n", i%10, i)
	}
	runKcat(t, in.String(), "-P", "-b", tb.Addr, "-t", "kc", "-K:", "-z", "snappy")

	meta := runKcat(t, "", "-L", "-b", tb.Addr, "-t", "kc")
	if !strings.Contains(meta, `topic "kc" with 3 partitions`) {
		t.Fatalf("kcat -L: want topic kc with 3 partitions, got:\n%s", meta)
	}

	out := runKcat(t, "", "-C", "-b", tb.Addr, "-t", "kc", "-e", "-f", "%k=%s\n")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 300 {
		t.Fatalf("kcat -C read %d records, want 300:\n%s", len(lines), out)
	}
	seen := map[string]bool{}
	for _, l := range lines {
		seen[l] = true
	}
	for i := 0; i < 300; i++ {
		if want := fmt.Sprintf("k%d=v%d", i%10, i); !seen[want] {
			t.Fatalf("record %s missing from kcat -C output", want)
		}
	}

	// Balanced consumer group: kcat -G reads everything once, commits.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kcatPath(t), "-b", tb.Addr, "-u", "-G", "kcgroup", "-o", "beginning", "-f", "%s\n", "kc")
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	n := 0
	for n < 300 && sc.Scan() {
		if strings.HasPrefix(sc.Text(), "v") {
			n++
		}
	}
	// Give kcat's auto-commit (5s) a chance, then stop it cleanly.
	time.Sleep(6 * time.Second)
	_ = cmd.Process.Signal(os.Interrupt)
	_ = cmd.Wait()
	if n != 300 {
		t.Fatalf("kcat -G read %d records, want 300", n)
	}
	adm := tb.admin()
	offs, err := adm.FetchOffsets(ctxT(t, 10*time.Second), "kcgroup")
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, ps := range offs {
		for _, o := range ps {
			sum += o.At
		}
	}
	if sum != 300 {
		t.Fatalf("kcat group committed offsets summing to %d, want 300", sum)
	}
}
