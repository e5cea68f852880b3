package admin

import (
	"errors"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest"
	"github.com/simtel/simtel/internal/testutil/brokertest/inproc"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

func TestTopicLifecycle(t *testing.T) {
	addr := inproc.Start(t, brokertest.GroupDelay(0)).Addr
	c, ctx := newClient(t, addr)

	created, err := c.CreateTopics(ctx, 2, 1, map[string]*string{"retention.ms": kadm.StringPtr("3600000")}, "b", "a")
	if err != nil {
		t.Fatal(err)
	}
	if want := []CreatedTopic{{"a", 2, 1}, {"b", 2, 1}}; !slices.Equal(created, want) {
		t.Fatalf("created %v, want %v", created, want)
	}
	created, err = c.CreateTopics(ctx, 2, 1, nil, "a", "c")
	if !errors.Is(err, kerr.TopicAlreadyExists) || len(created) != 1 || created[0].Topic != "c" {
		t.Fatalf("creating a and c again: created %v, error %v; want c created and TOPIC_ALREADY_EXISTS for a", created, err)
	}

	topics, err := c.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range topics {
		if s.Partitions != 2 || s.Replicas != 1 {
			t.Errorf("%s: %d partitions, replication %d; want 2 and 1", s.Topic, s.Partitions, s.Replicas)
		}
		names = append(names, s.Topic)
	}
	if want := []string{"a", "b", "c"}; !slices.Equal(names, want) {
		t.Errorf("listed %v, want %v", names, want)
	}

	produce(t, ctx, addr, "a", 2, 3)
	d, err := c.DescribeTopic(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Partitions) != 2 || d.Partitions[1].Partition != 1 || d.Partitions[1].Start != 0 || d.Partitions[1].End != 3 {
		t.Errorf("partitions %+v, want 0 and 1 with offsets 0..3", d.Partitions)
	}
	if got := d.Configs["retention.ms"]; got != "3600000" {
		t.Errorf("retention.ms = %q, want 3600000", got)
	}

	if err := c.AlterTopicConfigs(ctx, "a", []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("60000")}}); err != nil {
		t.Fatal(err)
	}
	if err := c.SetPartitions(ctx, "a", 3); err != nil {
		t.Fatal(err)
	}
	if d, err = c.DescribeTopic(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if len(d.Partitions) != 3 || d.Configs["retention.ms"] != "60000" {
		t.Errorf("after alter: %d partitions, retention.ms %q; want 3 and 60000", len(d.Partitions), d.Configs["retention.ms"])
	}

	deleted, err := c.DeleteTopics(ctx, "a", "nope")
	if !errors.Is(err, kerr.UnknownTopicOrPartition) || !slices.Equal(deleted, []string{"a"}) {
		t.Fatalf("deleting a and nope: deleted %v, error %v; want a deleted and UNKNOWN_TOPIC_OR_PARTITION for nope", deleted, err)
	}
	// The broker may list the topic for a moment while it removes it.
	for {
		_, err := c.DescribeTopic(ctx, "a")
		if errors.Is(err, ErrUnknownTopic) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("describing a deleted topic: got %v, want ErrUnknownTopic", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDescribeTopicWithAHungBroker: a broker stopped (SIGSTOP: its
// sockets stay open, so requests to it wait) does not hold the topic's
// description until the caller's deadline: the leaders, replicas and ISR
// come back, and a partition whose offsets its leader did not list shows
// -1 with Unlisted saying why. Which partitions those are is not pinned
// down: the offsets go to the leaders in the client's own metadata, which
// another broker may have refreshed since the description's.
func TestDescribeTopicWithAHungBroker(t *testing.T) {
	bs := brokertest.StartCluster(t, 3, brokertest.Topic("t", 6))
	c, ctx := newClient(t, bs[0].Addr)
	// Leaders move to their preferred replicas soon after the start:
	// stopped before they have, the broker may lead nothing by the time
	// the offsets are asked for.
	var d *TopicDetail
	for {
		var err error
		if d, err = c.DescribeTopic(ctx, "t"); err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(d.Partitions, func(p PartitionDetail) bool { return p.Leader != p.Replicas[0] }) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	hung := int32(-1)
	for _, p := range d.Partitions {
		if p.Leader > 0 {
			hung = p.Leader
			break
		}
	}
	if hung < 0 {
		t.Fatalf("broker 0 leads every partition: %+v", d.Partitions)
	}
	proc := bs[hung].Proc.Cmd.Process
	testutil.Pause(t, proc)
	t.Cleanup(func() { _ = proc.Signal(syscall.SIGCONT) })

	start := time.Now()
	d, err := c.DescribeTopic(ctx, "t")
	took := time.Since(start)
	if err != nil {
		t.Fatalf("with broker %d stopped, after %v: %v", hung, took, err)
	}
	if len(d.Partitions) != 6 {
		t.Fatalf("%d partitions described, want 6", len(d.Partitions))
	}
	unlisted := 0
	for _, p := range d.Partitions {
		switch {
		case p.Start >= 0 && p.End >= p.Start:
		case p.Start == -1 && p.End == -1 && len(d.Unlisted) > 0:
			unlisted++
		default:
			t.Fatalf("partition %d: offsets %d-%d, unlisted %q", p.Partition, p.Start, p.End, d.Unlisted)
		}
	}
	if unlisted == 0 {
		t.Fatalf("with broker %d stopped, every partition's offsets were listed in %v: %+v", hung, took, d.Partitions)
	}
	t.Logf("with broker %d stopped: %d of 6 partitions unlisted in %v (%q)", hung, unlisted, took, d.Unlisted)
}
