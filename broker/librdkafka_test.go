package broker_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest"
)

// TestLibrdkafka runs tests/librdkafka (confluent-kafka-go v2.11.1, which
// bundles a static librdkafka 2.11: cgo, glibc, linux/amd64) against a
// real `simtel broker` process: ListGroups with the group type and the
// type/state filters, LogAppendTime topics, the transactional flow of
// confluent-kafka-go's own TestTransactionalProducer, and delivery reports
// that agree with the watermarks. The program is a module of its own so
// simtel does not depend on cgo; a build failure fails the test under
// CI=true (scripts/install-deps.sh fetches the module) and skips it
// elsewhere.
func TestLibrdkafka(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a cgo program and starts a broker process")
	}
	dir, err := filepath.Abs(filepath.Join("..", "tests", "librdkafka"))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "librdkafka-compat")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		testutil.SkipOrFail(t, fmt.Sprintf("cannot build tests/librdkafka (needs cgo, gcc and github.com/confluentinc/confluent-kafka-go/v2@v2.11.1): %v\n%s", err, out), "")
	}

	for _, check := range []string{"listgroups", "logappendtime", "txn", "partitions"} {
		t.Run(check, func(t *testing.T) {
			b := brokertest.Start(t, brokertest.SkipShort(), brokertest.Args("--log-level", "info"), brokertest.GroupDelay(0))
			addr := b.Addr
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "-broker", addr, "-check", check)
			cmd.WaitDelay = 5 * time.Second
			out, err := cmd.CombinedOutput()
			if err != nil {
				log, _ := os.ReadFile(b.Proc.Log)
				t.Fatalf("librdkafka check %s against %s: %v\n%s\nbroker log:\n%s", check, addr, err, out, tail(string(log), 4000))
			}
			if !strings.Contains(string(out), "OK: "+check) {
				t.Fatalf("librdkafka check %s exited 0 without its OK line:\n%s", check, out)
			}
			t.Logf("%s", out)
		})
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// TestLogAppendTimeBrokerDefault: a broker started with
// --topic-default message.timestamp.type=LogAppendTime stamps every topic
// it auto-creates: whatever create time the producers put (franz-go: one
// far in the past; kcat: now), kcat (librdkafka 2.0) reads the broker's
// append time back, and the produce response's LogAppendTime field carries
// the same time, as Kafka sends it.
func TestLogAppendTimeBrokerDefault(t *testing.T) {
	kcatPath(t)
	addr := brokertest.Start(t, brokertest.SkipShort(), brokertest.Args("--topic-default", "message.timestamp.type=LogAppendTime")).Addr

	const old = 981173106000 // 2001-02-03, far from the append time
	from := time.Now().UnixMilli()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.AllowAutoTopicCreation(), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.DisableIdempotentWrite())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := ctxT(t, 60*time.Second)
	for i := range 3 {
		r := &kgo.Record{Topic: "lat", Partition: 0, Value: fmt.Appendf(nil, "v%d", i), Timestamp: time.UnixMilli(old)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// The produce response's LogAppendTime (franz-go does not surface
	// it): send a batch the producer made, read back raw, once more.
	fresp, err := fetchOne("lat", 0, 0, 1<<20).RequestWith(ctx, cl)
	if err != nil || len(fresp.Topics) != 1 || len(fresp.Topics[0].Partitions) != 1 {
		t.Fatalf("raw fetch: %v %+v", err, fresp)
	}
	raw := fresp.Topics[0].Partitions[0].RecordBatches
	var first kmsg.RecordBatch
	if err := first.ReadFrom(raw); err != nil {
		t.Fatalf("decode fetched batch: %v", err)
	}
	batch := raw[:12+int(first.Length)]
	prod := produceRequest("lat", 0, batch, -1, 10000)
	presp, err := prod.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	sp := presp.Topics[0].Partitions[0]
	if sp.ErrorCode != 0 || sp.LogAppendTime < from {
		t.Fatalf("produce response: error %d, LogAppendTime %d; want the append time (>= %d)", sp.ErrorCode, sp.LogAppendTime, from)
	}
	runKcat(t, "k:v3\n", "-P", "-b", addr, "-t", "lat", "-p", "0", "-K:")
	to := time.Now().UnixMilli() + 1

	out := runKcat(t, "", "-C", "-b", addr, "-t", "lat", "-e", "-f", "%T %s\n")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 {
		t.Fatalf("kcat read %d messages, want 5:\n%s", len(lines), out)
	}
	for i, l := range lines {
		f := strings.Fields(l)
		ts, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || ts < from || ts > to {
			t.Fatalf("kcat message %d: timestamp %q, want the append time in [%d, %d]", i, l, from, to)
		}
		if i == 3 && ts != sp.LogAppendTime {
			t.Fatalf("message %d: consumers see %d, the produce response said %d", i, ts, sp.LogAppendTime)
		}
	}
	t.Logf("kcat read %q; the produce response said %d", lines, sp.LogAppendTime)
}
