package broker_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest"
)

func TestClusterReplicationFailover(t *testing.T) {
	// Frequent snapshots, so restarts go through snapshot restore
	// (truncate the log to the snapshot's end, replay the rest).
	bs, controller := startClusterOf(t, 3, "--replica-snapshot-entries", "100")
	seeds := brokertest.Addrs(bs)
	// SIMTEL_FAILOVER_KILLS: see the kills below. SIMTEL_FAILOVER_GAP (a
	// duration) is the least time between a restart and the next kill
	// (default 1s; a random 0-2 s more is added). A client refreshes
	// metadata at most every 5 s by default (franz-go's MetadataMinAge),
	// so kills closer than that also measure that wait.
	kills := 4
	if v, err := strconv.Atoi(os.Getenv("SIMTEL_FAILOVER_KILLS")); err == nil && v > 0 {
		kills = v
	}
	gap := time.Second
	if d, err := time.ParseDuration(os.Getenv("SIMTEL_FAILOVER_GAP")); err == nil && d > 0 {
		gap = d
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute+time.Duration(kills)*(gap+30*time.Second))
	defer cancel()

	const topic, parts = "repl", 6
	createTopic(t, ctx, []string{bs[controller].Addr}, topic, parts, 3)
	// Leaders spread 2/2/2 and every partition has 3 replicas; wait for
	// the raft leaders to report themselves (epoch > 0).
	waitUntil(t, 30*time.Second, "spread, reported raft leaders", func() string {
		m, err := metadataFrom(ctx, bs[controller].Addr, topic)
		leads := map[int32]int{}
		ok := err == nil && len(m.Topics) == 1 && len(m.Topics[0].Partitions) == parts
		if ok {
			for _, p := range m.Topics[0].Partitions {
				leads[p.Leader]++
				if len(p.Replicas) != 3 || p.LeaderEpoch <= 0 || p.ErrorCode != 0 {
					ok = false
				}
			}
			ok = ok && leads[0] == 2 && leads[1] == 2 && leads[2] == 2
		}
		if !ok {
			return fmt.Sprintf("%v %+v", err, leads)
		}
		return ""
	})

	// Idempotent producers, acks=all (franz-go's default), send until
	// told to stop.
	load := startLoadWith(t, ctx, loadConfig{
		seeds: seeds, topic: topic, producers: 3, prefix: "p",
		opts: []kgo.Opt{kgo.MaxBufferedRecords(2000),
			kgo.RetryTimeout(60 * time.Second), kgo.RecordDeliveryTimeout(90 * time.Second)},
		pauseEvery: 50, pauseAt: 0, pause: 5 * time.Millisecond,
		logDir: os.Getenv("SIMTEL_FAILOVER_LOGS"),
	})
	chk := load.chk

	// A consumer reads all along, through the failovers: it must never
	// see a record twice (an offset reset after a new leader answered
	// OFFSET_OUT_OF_RANGE would show as duplicates) or out of order.
	live, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	liveCtx, stopLive := context.WithCancel(ctx)
	defer stopLive()
	var liveMu sync.Mutex
	liveRead := map[int32][]*kgo.Record{}
	liveN := 0
	liveDone := make(chan struct{})
	go func() {
		defer close(liveDone)
		for liveCtx.Err() == nil {
			fs := live.PollFetches(liveCtx)
			liveMu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				liveRead[r.Partition] = append(liveRead[r.Partition], r)
				liveN++
			})
			liveMu.Unlock()
		}
	}()

	// SIGKILL the leader of a random partition several times, at random
	// moments; each time wait for the next acknowledged write on that
	// partition (the failover time), then restart the broker.
	//
	// SIMTEL_FAILOVER_KILLS sets the number of kills (default 4; the
	// failover figure in bench/docs/replication.md uses 20 with
	// bench/replication-figures.sh failover); SIMTEL_FAILOVER_LOGS
	// names a directory that gets every broker process's log and the
	// producers' client log, to see where a failover's time goes.
	var failovers []time.Duration
	var lastKilled *clusterBroker
	var hwBeforeRestart map[int32]int64
	logsDir := os.Getenv("SIMTEL_FAILOVER_LOGS")
	var procLogs []string
	for _, b := range bs {
		procLogs = append(procLogs, b.Proc.Log)
	}
	defer func() {
		if logsDir == "" {
			return
		}
		for i, l := range procLogs {
			data, _ := os.ReadFile(l)
			_ = os.WriteFile(filepath.Join(logsDir, fmt.Sprintf("broker-%02d.log", i)), data, 0o644)
		}
	}()
	for k := range kills {
		time.Sleep(gap + time.Duration(rand.IntN(2000))*time.Millisecond)
		part := int32(rand.IntN(parts))
		leader, epoch := leaderOf(ctx, seeds, topic, part)
		if leader < 0 {
			t.Fatalf("kill %d: no leader for %s/%d", k, topic, part)
		}
		victim := bs[leader]
		hwBeforeRestart, _ = hwOf(victim.HTTPAddr, topic)
		victim.Proc.Kill()
		killedAt := time.Now()
		var at time.Time
		for {
			var ok bool
			if at, ok = chk.firstAckAfter(part, killedAt); ok {
				break
			}
			if time.Since(killedAt) > 60*time.Second {
				t.Fatalf("kill %d: no write acknowledged on %s/%d within 60s after killing its leader %d", k, topic, part, leader)
			}
			time.Sleep(10 * time.Millisecond)
		}
		failovers = append(failovers, at.Sub(killedAt))
		newLeader, newEpoch := leaderOf(ctx, addrsBut(bs, victim, kafkaAddr), topic, part)
		t.Logf("kill %d: broker %d (leader of %s/%d, epoch %d) killed at %s; next acknowledged write after %v; new leader %d epoch %d",
			k, leader, topic, part, epoch, killedAt.UTC().Format("15:04:05.000"), at.Sub(killedAt).Round(time.Millisecond), newLeader, newEpoch)
		restartWithJoin(t, victim, bs)
		procLogs = append(procLogs, victim.Proc.Log)
		lastKilled = victim
	}

	// The last restarted broker catches up while writes go on: its
	// replicas' applied end moves past where they were at the kill.
	waitUntil(t, 30*time.Second, fmt.Sprintf("restarted broker %d catches up while writes go on", lastKilled.ID), func() string {
		hw, err := hwOf(lastKilled.HTTPAddr, topic)
		caught := err == nil && len(hw) == parts
		for p, v := range hw {
			caught = caught && v > hwBeforeRestart[p]
		}
		if !caught {
			return fmt.Sprintf("now %v, at the kill %v (%v)", hw, hwBeforeRestart, err)
		}
		return ""
	})

	// SIGSTOP a leader for longer than the election timeout: another
	// replica takes over; after SIGCONT the old leader steps down and
	// answers Produce with NOT_LEADER_OR_FOLLOWER.
	stopPart := int32(rand.IntN(parts))
	oldLeader, oldEpoch := leaderOf(ctx, seeds, topic, stopPart)
	stopped := bs[oldLeader]
	testutil.Pause(t, stopped.Proc.Cmd.Process)
	stoppedAt := time.Now()
	var newLeader int32
	for {
		var e int32
		newLeader, e = leaderOf(ctx, addrsBut(bs, stopped, kafkaAddr), topic, stopPart)
		if newLeader >= 0 && newLeader != oldLeader && e > oldEpoch {
			break
		}
		if time.Since(stoppedAt) > 30*time.Second {
			_ = stopped.Proc.Cmd.Process.Signal(syscall.SIGCONT)
			t.Fatalf("no new leader of %s/%d 30s after SIGSTOP of leader %d", topic, stopPart, oldLeader)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Until(stoppedAt.Add(3 * time.Second)))
	if err := stopped.Proc.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGSTOP of broker %d (leader of %s/%d, epoch %d): broker %d took over; SIGCONT after %v",
		oldLeader, topic, stopPart, oldEpoch, newLeader, time.Since(stoppedAt).Round(time.Millisecond))
	raw, err := kgo.NewClient(kgo.SeedBrokers(stopped.Addr))
	if err != nil {
		t.Fatal(err)
	}
	stepDown := time.Now()
	for {
		req := produceRequest(topic, stopPart, plainBatch("after-sigcont"), -1, 5000)
		rctx, rcancel := context.WithTimeout(ctx, 6*time.Second)
		r, err := raw.SeedBrokers()[0].Request(rctx, req)
		rcancel()
		if err == nil {
			code := r.(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode
			if code == kerr.NotLeaderForPartition.Code {
				break
			}
			if code == 0 {
				t.Fatalf("the old leader %d accepted a write to %s/%d after SIGCONT", oldLeader, topic, stopPart)
			}
		}
		if time.Since(stepDown) > 15*time.Second {
			t.Fatalf("old leader %d did not answer NOT_LEADER_OR_FOLLOWER for %s/%d within 15s after SIGCONT (last: %v)", oldLeader, topic, stopPart, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Fetch on the follower it now is: NOT_LEADER_OR_FOLLOWER too.
	freq := kmsg.NewPtrFetchRequest()
	freq.MaxWaitMillis, freq.MaxBytes = 0, 1<<20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = topic
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.Partition, fp.PartitionMaxBytes = stopPart, 1<<20
	ft.Partitions = append(ft.Partitions, fp)
	freq.Topics = append(freq.Topics, ft)
	fr, err := raw.SeedBrokers()[0].Request(ctx, freq)
	if err != nil {
		t.Fatalf("fetch from the old leader: %v", err)
	}
	if code := fr.(*kmsg.FetchResponse).Topics[0].Partitions[0].ErrorCode; code != kerr.NotLeaderForPartition.Code {
		t.Fatalf("fetch of %s/%d from follower %d: %v, want NOT_LEADER_OR_FOLLOWER", topic, stopPart, oldLeader, kerr.ErrorForCode(code))
	}
	raw.Close()
	t.Logf("old leader %d answers Produce and Fetch with NOT_LEADER_OR_FOLLOWER %v after SIGCONT", oldLeader, time.Since(stepDown).Round(time.Millisecond))

	time.Sleep(time.Second)
	load.finish(t)

	// Every replica of every partition ends at the same offset.
	waitUntil(t, 30*time.Second, "replica end offsets agree after the writes stopped", func() string {
		var hws []map[int32]int64
		for _, b := range bs {
			hw, _ := hwOf(b.HTTPAddr, topic)
			hws = append(hws, hw)
		}
		for p := range int32(parts) {
			if hws[0][p] <= 0 || hws[0][p] != hws[1][p] || hws[1][p] != hws[2][p] {
				return fmt.Sprintf("they differ: %v", hws)
			}
		}
		t.Logf("replica end offsets agree on all brokers: %v", hws[0])
		return ""
	})

	chk.mu.Lock()
	acked := len(chk.acked)
	chk.mu.Unlock()
	for deadline := time.Now().Add(60 * time.Second); ; {
		liveMu.Lock()
		n := liveN
		liveMu.Unlock()
		if n >= acked || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second)
	stopLive()
	<-liveDone
	lost, dup, reord, summary := chk.verify(liveRead)
	t.Logf("live consumer (reading through the failovers): %s", summary)
	if lost != 0 || dup != 0 || reord != 0 {
		t.Errorf("live consumer: %s", summary)
	}

	// Snapshots were taken (so the restarts above replayed from them).
	snaps := 0
	for _, b := range bs {
		m, _ := filepath.Glob(filepath.Join(b.Dir, "data", topic+"-*", "raft", "snapshots", "*", "meta.json"))
		snaps += len(m)
	}
	if snaps == 0 {
		t.Fatal("no partition snapshot was taken; the restarts did not exercise snapshot restore")
	}
	t.Logf("%d partition snapshots on disk", snaps)

	// Read everything back and check.
	chk.mu.Lock()
	want := len(chk.acked)
	chk.mu.Unlock()
	lost, dup, reord, summary = chk.verify(readTopic(t, ctx, seeds, topic, want))
	slices.Sort(failovers)
	// Nearest-rank percentiles: with fewer than 100 kills p99 is the
	// maximum.
	rank := func(q float64) time.Duration {
		return failovers[max(0, int(math.Ceil(q*float64(len(failovers))))-1)]
	}
	var all []string
	for _, f := range failovers {
		all = append(all, f.Round(time.Millisecond).String())
	}
	t.Logf("checker: %s; failover (leader kill -> next acknowledged write) over %d kills: p50 %v, p99 %v, max %v, all %v",
		summary, len(failovers), rank(0.5).Round(time.Millisecond), rank(0.99).Round(time.Millisecond),
		failovers[len(failovers)-1].Round(time.Millisecond), strings.Join(all, " "))
	if lost != 0 || dup != 0 || reord != 0 || want == 0 {
		t.Fatalf("checker: %s", summary)
	}
}
