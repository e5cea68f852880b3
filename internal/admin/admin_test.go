package admin

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// newClient returns a Client of addr closed at the test's end, and a
// context bounded to a minute.
func newClient(t *testing.T, addr string) (*Client, context.Context) {
	t.Helper()
	c, err := New([]string{addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c, ctx
}

// produce writes n records to each partition of topic.
func produce(t *testing.T, ctx context.Context, addr, topic string, partitions int32, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for p := range partitions {
		for range n {
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte("v")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestUnreachable(t *testing.T) {
	// A listener that accepts and never answers: the deadline passes.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	// A port nobody listens on: the connection is refused.
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := closed.Addr().String()
	closed.Close()

	for _, addr := range []string{silent.Addr().String(), refused} {
		c, err := New([]string{addr})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, errTopics := c.ListTopics(ctx)
		_, errGroups := c.ListGroups(ctx) // kadm's *ShardErrors around the cause
		cancel()
		c.Close()
		for _, err := range []error{errTopics, errGroups} {
			var ue *UnreachableError
			if !errors.As(err, &ue) {
				t.Errorf("%s: got %v (%T), want an *UnreachableError", addr, err, err)
			}
		}
	}
}

func TestReachKeepsOtherErrors(t *testing.T) {
	err := errors.New("TOPIC_AUTHORIZATION_FAILED")
	if got := reach(err); got != err {
		t.Errorf("reach(%v) = %v, want it unchanged", err, got)
	}
	if reach(nil) != nil {
		t.Error("reach(nil) is not nil")
	}
}
