package broker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/broker"
)

// TestRetentionHoldGroups checks that simtel.retention.hold.groups keeps
// every segment at or past the named group's committed offset, and lets
// retention go on once the group commits.
func TestRetentionHoldGroups(t *testing.T) {
	tb := startBroker(t, t.TempDir(), func(c *broker.Config) { c.RetentionCheckInterval = 50 * time.Millisecond })
	ctx := ctxT(t, 30*time.Second)
	adm := tb.admin()
	cfg := map[string]*string{
		"segment.bytes":                kadm.StringPtr("2048"),
		"retention.bytes":              kadm.StringPtr("1"),
		"simtel.retention.hold.groups": kadm.StringPtr("lake-sink"),
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, cfg, "held"); err != nil {
		t.Fatal(err)
	}
	cl := tb.client()
	const n = 200
	for i := range n {
		r := &kgo.Record{Topic: "held", Value: fmt.Appendf(nil, "record %03d %0200d", i, 0)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	start := func() int64 {
		t.Helper()
		so, err := adm.ListStartOffsets(ctx, "held")
		if err != nil {
			t.Fatal(err)
		}
		o, _ := so.Lookup("held", 0)
		return o.Offset
	}
	// No commit by the named group: everything is held.
	time.Sleep(500 * time.Millisecond)
	if got := start(); got != 0 {
		t.Fatalf("log start with no commit by the holding group: got %d, want 0", got)
	}
	commit := func(off int64) {
		t.Helper()
		os := kadm.Offsets{}
		os.Add(kadm.Offset{Topic: "held", Partition: 0, At: off, LeaderEpoch: -1})
		if err := adm.CommitAllOffsets(ctx, "lake-sink", os); err != nil {
			t.Fatal(err)
		}
	}
	waitStart := func(cond func(int64) bool, what string) int64 {
		t.Helper()
		var got int64
		waitUntil(t, 10*time.Second, "log start "+what, func() string {
			if got = start(); !cond(got) {
				return fmt.Sprintf("log start %d", got)
			}
			return ""
		})
		return got
	}
	commit(100)
	got := waitStart(func(o int64) bool { return o > 0 }, "> 0 after the group committed 100")
	if got > 100 {
		t.Fatalf("log start %d passed the holding group's committed offset 100", got)
	}
	time.Sleep(300 * time.Millisecond)
	if got := start(); got > 100 {
		t.Fatalf("log start %d passed the holding group's committed offset 100", got)
	}
	commit(n)
	waitStart(func(o int64) bool { return o > 100 }, "> 100 after the group committed everything")
}
