package broker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker"
	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest"
)

func TestClusterThreeBrokers(t *testing.T) {
	bs, controller := startClusterOf(t, 3)
	seeds := brokertest.Addrs(bs)
	for _, b := range bs[1:] {
		if got := waitCluster(t, b.Addr, 3); got != controller {
			t.Fatalf("broker %d names controller %d, broker 0 names %d", b.ID, got, controller)
		}
	}
	other := bs[(controller+1)%3]

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// A non-controller refuses topic changes with NOT_CONTROLLER...
	raw, err := kgo.NewClient(kgo.SeedBrokers(other.Addr))
	if err != nil {
		t.Fatal(err)
	}
	creq := kmsg.NewPtrCreateTopicsRequest()
	ct := kmsg.NewCreateTopicsRequestTopic()
	ct.Topic, ct.NumPartitions, ct.ReplicationFactor = "direct", 1, 1
	creq.Topics = append(creq.Topics, ct)
	r, err := raw.SeedBrokers()[0].Request(ctx, creq)
	raw.Close()
	if err != nil {
		t.Fatal(err)
	}
	if code := r.(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode; code != kerr.NotController.Code {
		t.Fatalf("CreateTopics on non-controller %d: error %v, want NOT_CONTROLLER", other.ID, kerr.ErrorForCode(code))
	}

	// ...and the CLI pointed at it still creates the topic (kadm re-routes).
	out, err := exec.CommandContext(ctx, testutil.Binary(t), "topic", "create", "orders", "--partitions", "6", "--brokers", other.Addr).CombinedOutput()
	if err != nil {
		t.Fatalf("simtel topic create via broker %d: %v\n%s", other.ID, err, out)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	leadersOf := func(topic string) map[int32]int {
		t.Helper()
		td, err := adm.ListTopics(ctx, topic)
		if err != nil || td[topic].Err != nil {
			t.Fatalf("list %s: %v %v", topic, err, td[topic].Err)
		}
		got := map[int32]int{}
		for _, p := range td[topic].Partitions {
			got[p.Leader]++
		}
		return got
	}
	if got := leadersOf("orders"); len(got) != 3 || got[0] != 2 || got[1] != 2 || got[2] != 2 {
		t.Fatalf("leaders of orders' 6 partitions: %v, want 2 on each of brokers 0, 1, 2", got)
	}

	// /metrics works with partitions led elsewhere and shows the cluster:
	// 3 alive brokers, and 12 local partitions on each (a replica of each
	// of orders' 6 and of __consumer_offsets' 6, replication factor 3 by
	// default) once it has applied the topics.
	for _, b := range bs {
		waitUntil(t, 10*time.Second, fmt.Sprintf("broker %d /metrics shows 3 alive brokers and 12 local partitions", b.ID), func() string {
			resp, err := http.Get("http://" + b.HTTPAddr + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.Contains(string(body), "simtel_broker_cluster_alive_brokers 3") ||
				strings.Count(string(body), "simtel_broker_partition_high_watermark{partition=") != 12 {
				return fmt.Sprintf("%s:\n%.3000s", resp.Status, body)
			}
			return ""
		})
	}

	// More replicas than alive brokers is refused with a clear error.
	if resp, err := adm.CreateTopic(ctx, 1, 4, nil, "rf4"); err == nil && resp.Err == nil {
		t.Fatal("creating a topic with replication factor 4 on 3 brokers succeeded")
	} else if !errors.Is(resp.Err, kerr.InvalidReplicationFactor) {
		t.Fatalf("RF 4: got %v / %v, want INVALID_REPLICATION_FACTOR", err, resp.Err)
	}

	// Auto-creation through a follower is forwarded to the controller.
	ap, err := kgo.NewClient(kgo.SeedBrokers(other.Addr), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	if err := ap.ProduceSync(ctx, &kgo.Record{Topic: "auto", Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatalf("produce to an auto-created topic through broker %d: %v", other.ID, err)
	}
	ap.Close()

	// Produce with several idempotent producers, acks=all.
	const producers, perProducer = 3, 1000
	type ack struct {
		part int32
		off  int64
	}
	var mu sync.Mutex
	acked := map[string]ack{}
	produce := func(prefix string, n int) {
		t.Helper()
		var wg sync.WaitGroup
		for w := range producers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic("orders"))
				if err != nil {
					t.Error(err)
					return
				}
				defer p.Close()
				for i := range n {
					v := fmt.Sprintf("%s-%d-%06d", prefix, w, i)
					p.Produce(ctx, &kgo.Record{Key: []byte(v), Value: []byte(v)}, func(r *kgo.Record, err error) {
						if err != nil {
							t.Errorf("produce %s: %v", v, err)
							return
						}
						mu.Lock()
						acked[v] = ack{r.Partition, r.Offset}
						mu.Unlock()
					})
				}
				if err := p.Flush(ctx); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	produce("a", perProducer)
	if t.Failed() {
		t.FailNow()
	}

	// One group member reads everything back exactly once, in offset
	// order per partition, and commits.
	consume := func(want int, quiet time.Duration) map[string]ack {
		t.Helper()
		c, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup("readers"), kgo.ConsumeTopics("orders"),
			kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		got := map[string]ack{}
		lastOff := map[int32]int64{}
		cctx, ccancel := context.WithTimeout(ctx, 60*time.Second)
		defer ccancel()
		quietUntil := time.Time{}
		for len(got) < want || (quiet > 0 && time.Now().Before(quietUntil)) {
			if len(got) >= want && quietUntil.IsZero() {
				quietUntil = time.Now().Add(quiet)
			}
			fctx, fcancel := context.WithTimeout(cctx, time.Second)
			fs := c.PollFetches(fctx)
			fcancel()
			if cctx.Err() != nil {
				t.Fatalf("consumed %d of %d records before the deadline", len(got), want)
			}
			fs.EachError(func(topic string, p int32, err error) {
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Logf("fetch %s/%d: %v", topic, p, err)
				}
			})
			fs.EachRecord(func(r *kgo.Record) {
				v := string(r.Value)
				if _, dup := got[v]; dup {
					t.Errorf("record %s read twice", v)
				}
				if last, ok := lastOff[r.Partition]; ok && r.Offset <= last {
					t.Errorf("partition %d: offset %d after %d", r.Partition, r.Offset, last)
				}
				lastOff[r.Partition] = r.Offset
				got[v] = ack{r.Partition, r.Offset}
			})
		}
		if err := c.CommitUncommittedOffsets(ctx); err != nil {
			t.Fatalf("commit: %v", err)
		}
		return got
	}
	got := consume(producers*perProducer, 0)
	for v, a := range acked {
		if got[v] != a {
			t.Fatalf("record %s acknowledged at %v, read at %v", v, a, got[v])
		}
	}
	if len(got) != len(acked) {
		t.Fatalf("read %d records, acknowledged %d", len(got), len(acked))
	}
	// Every broker names the same coordinator for the group.
	coords := map[int32]bool{}
	for _, b := range bs {
		fc, err := kgo.NewClient(kgo.SeedBrokers(b.Addr))
		if err != nil {
			t.Fatal(err)
		}
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorKey = "readers"
		r, err := fc.SeedBrokers()[0].Request(ctx, req)
		fc.Close()
		if err != nil {
			t.Fatal(err)
		}
		coords[r.(*kmsg.FindCoordinatorResponse).NodeID] = true
	}
	if len(coords) != 1 {
		t.Fatalf("brokers disagree on the coordinator of group readers: %v", coords)
	}

	// A topic with partitions on every broker, deleted below while one
	// is down.
	createTopicRF1(t, ctx, adm, "gone", 6)

	// Kill the controller leader; a new one takes over and topic
	// creation keeps working.
	killed := bs[controller]
	killed.Proc.Kill()
	start := time.Now()
	survivors := addrsBut(bs, killed, kafkaAddr)
	for {
		sc, err := kgo.NewClient(kgo.SeedBrokers(survivors...))
		if err != nil {
			t.Fatal(err)
		}
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := kadm.NewClient(sc).CreateTopic(actx, 3, 1, nil, "after-failover")
		acancel()
		sc.Close()
		if err == nil && resp.Err == nil {
			break
		}
		if time.Since(start) > 60*time.Second {
			t.Fatalf("no topic creation within 60s of killing controller %d: %v %v", controller, err, resp.Err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("controller %d killed: next CreateTopics succeeded after %v", controller, time.Since(start).Round(time.Millisecond))
	// Gossip reports it dead; the new controller marks it not alive.
	waitCluster(t, survivors[0], 2)
	t.Logf("controller %d killed: marked not alive after %v", controller, time.Since(start).Round(time.Millisecond))

	for {
		sc, err := kgo.NewClient(kgo.SeedBrokers(survivors...))
		if err != nil {
			t.Fatal(err)
		}
		rs, err := kadm.NewClient(sc).DeleteTopics(ctx, "gone")
		sc.Close()
		if err == nil && rs["gone"].Err == nil {
			break
		}
		if time.Since(start) > 60*time.Second {
			t.Fatalf("cannot delete topic gone: %v %v", err, rs["gone"].Err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Restart it: its raft state brings back the metadata and its
	// partitions keep their records; those of the topic deleted while it
	// was down are removed.
	// Replaying the raft log on restart may open and then drop "gone",
	// which removes its files too; a partition directory of a topic the
	// metadata never had (as after a snapshot) tests the collection of
	// stale directories for sure.
	ghost := filepath.Join(killed.Dir, "data", "ghost-0")
	if err := os.MkdirAll(ghost, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ghost, "00000000000000000000.log"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ghost+".topic-id", []byte("00112233445566778899aabbccddeeff"), 0o644); err != nil {
		t.Fatal(err)
	}
	killed.StartNode(addrsBut(bs, killed, gossipAddr), 3)
	waitCluster(t, killed.Addr, 3)
	waitCluster(t, survivors[0], 3)
	waitNoFiles(t, killed, "gone-")
	waitNoFiles(t, killed, "ghost-")
	m, err := metadataFrom(ctx, killed.Addr, "orders", "after-failover")
	if err != nil {
		t.Fatal(err)
	}
	for _, mt := range m.Topics {
		if mt.ErrorCode != 0 {
			t.Fatalf("restarted broker: topic %s: %v", *mt.Topic, kerr.ErrorForCode(mt.ErrorCode))
		}
	}
	ends, err := adm.ListEndOffsets(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	perPart := map[int32]int64{}
	for _, a := range acked {
		perPart[a.part] = max(perPart[a.part], a.off+1)
	}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil || o.Offset != perPart[o.Partition] {
			t.Errorf("after restart, orders/%d ends at %d (%v), want %d", o.Partition, o.Offset, o.Err, perPart[o.Partition])
		}
	})

	// The group resumes from its committed offsets: only new records.
	acked = map[string]ack{}
	produce("b", 20)
	got = consume(producers*20, 2*time.Second)
	if len(got) != producers*20 {
		t.Fatalf("after the restart the group read %d records, want the %d new ones", len(got), producers*20)
	}
	for v := range got {
		if _, ok := acked[v]; !ok {
			t.Fatalf("group re-read old record %s", v)
		}
	}

	// A fourth broker joins, shows up in Metadata and leads partitions
	// of a topic created afterwards.
	b3 := newClusterBroker(t, 3)
	bs = append(bs, b3)
	b3.StartNodeFresh([]string{bs[0].GossipAddr, bs[1].GossipAddr}, 0)
	for _, b := range bs {
		waitCluster(t, b.Addr, 4)
	}
	createTopicRF1(t, ctx, adm, "later", 8)
	if got := leadersOf("later"); got[3] == 0 {
		t.Fatalf("leaders of later: %v, want some on the new broker 3", got)
	}

	// Configs, partition growth and deletion go through the controller
	// and reach every broker.
	if _, err := adm.CreatePartitions(ctx, 4, "later"); err != nil {
		t.Fatal(err)
	}
	// Metadata is eventually consistent across brokers (as in Kafka).
	waitUntil(t, 10*time.Second, "later has 12 partitions with leaders after adding 4", func() string {
		if got := leadersOf("later"); got[0]+got[1]+got[2]+got[3] != 12 {
			return fmt.Sprintf("leaders %v", got)
		}
		return ""
	})
	// Clients send config changes to any broker: send one to a follower,
	// which forwards it to the controller.
	m, err = metadataFrom(ctx, bs[0].Addr)
	if err != nil {
		t.Fatal(err)
	}
	follower := bs[(m.ControllerID+1)%4]
	fc, err := kgo.NewClient(kgo.SeedBrokers(follower.Addr))
	if err != nil {
		t.Fatal(err)
	}
	areq := kmsg.NewPtrIncrementalAlterConfigsRequest()
	ares := kmsg.NewIncrementalAlterConfigsRequestResource()
	ares.ResourceType, ares.ResourceName = kmsg.ConfigResourceTypeTopic, "later"
	acfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	acfg.Name, acfg.Value = "retention.ms", kmsg.StringPtr("3600000")
	ares.Configs = append(ares.Configs, acfg)
	areq.Resources = append(areq.Resources, ares)
	ar, err := fc.SeedBrokers()[0].Request(ctx, areq)
	fc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if code := ar.(*kmsg.IncrementalAlterConfigsResponse).Resources[0].ErrorCode; code != 0 {
		t.Fatalf("alter configs through follower %d: %v", follower.ID, kerr.ErrorForCode(code))
	}
	for _, b := range bs {
		waitFor := time.Now().Add(10 * time.Second)
		for {
			bc, err := kgo.NewClient(kgo.SeedBrokers(b.Addr))
			if err != nil {
				t.Fatal(err)
			}
			req := kmsg.NewPtrDescribeConfigsRequest()
			res := kmsg.NewDescribeConfigsRequestResource()
			res.ResourceType, res.ResourceName, res.ConfigNames = kmsg.ConfigResourceTypeTopic, "later", []string{"retention.ms"}
			req.Resources = append(req.Resources, res)
			r, err := bc.SeedBrokers()[0].Request(ctx, req)
			bc.Close()
			if err != nil {
				t.Fatal(err)
			}
			dr := r.(*kmsg.DescribeConfigsResponse).Resources[0]
			if len(dr.Configs) == 1 && dr.Configs[0].Value != nil && *dr.Configs[0].Value == "3600000" {
				break
			}
			if time.Now().After(waitFor) {
				t.Fatalf("broker %d: retention.ms of later is %+v, want 3600000", b.ID, dr)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if rs, err := adm.DeleteTopics(ctx, "later"); err != nil || rs["later"].Err != nil {
		t.Fatalf("delete later: %v %v", err, rs)
	}
	for _, b := range bs {
		waitNoFiles(t, b, "later-")
	}
}

// waitNoFiles waits until b's data directory has no entry starting with
// prefix (a deleted topic's partitions and their topic-id markers).
func waitNoFiles(t *testing.T, b *clusterBroker, prefix string) {
	t.Helper()
	waitUntil(t, 10*time.Second, fmt.Sprintf("broker %d has no files of a deleted topic", b.ID), func() string {
		entries, _ := os.ReadDir(filepath.Join(b.Dir, "data"))
		var left []string
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), prefix) {
				left = append(left, e.Name())
			}
		}
		if len(left) > 0 {
			return fmt.Sprintf("left: %v", left)
		}
		return ""
	})
}

func TestClusterConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  broker.Config
		want string // substring of the error; "" for valid
	}{
		{"single node", broker.Config{DataDir: "d"}, ""},
		{"join without raft", broker.Config{DataDir: "d", Join: []string{"h:1"}}, "need --raft-listen"},
		{"raft without gossip", broker.Config{DataDir: "d", RaftListen: "127.0.0.1:1"}, "--gossip-listen"},
		{"gossip port 0", broker.Config{DataDir: "d", RaftListen: "127.0.0.1:1", GossipListen: "127.0.0.1:0", BootstrapExpect: 3}, "fixed port"},
		{"neither join nor bootstrap", broker.Config{DataDir: "d", RaftListen: "127.0.0.1:1", GossipListen: "127.0.0.1:2"}, "--bootstrap-expect N"},
		{"too many voters", broker.Config{DataDir: "d", RaftListen: "127.0.0.1:1", GossipListen: "127.0.0.1:2", BootstrapExpect: 6}, "between 1 and 5"},
		{"node id too large", broker.Config{DataDir: "d", NodeID: 70000, RaftListen: "127.0.0.1:1", GossipListen: "127.0.0.1:2", BootstrapExpect: 1}, "too large"},
		{"valid cluster", broker.Config{DataDir: "d", RaftListen: "127.0.0.1:1", GossipListen: "127.0.0.1:2", Join: []string{"127.0.0.1:3"}}, ""},
	} {
		err := tc.cfg.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: got %v, want no error", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}
