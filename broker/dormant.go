package broker

// Dormant partitions (--replica-dormant-after). An idle replicated
// partition still costs each of its brokers hashicorp/raft's goroutines
// and timers; with thousands of partitions that is most of an idle
// cluster's CPU. So the leader of a partition that has had no write for
// the configured time puts its raft group to sleep on every replica
// (cluster/dormant.go): no raft instance runs, and the log, the high
// watermark and the producer state stay as they are.
//
// While it sleeps:
//   - Metadata names the leader the group slept with, in its term.
//   - Fetch, ListOffsets and OffsetForLeaderEpoch are answered by that
//     leader from its log, without waking the group (consumers poll idle
//     partitions all the time).
//   - A Produce, a transaction marker or a reassignment at that leader
//     wakes it: it stands for election at once, the other replicas wake
//     for its vote requests, and the request waits for the new term as
//     for a handover (milliseconds).
//   - A follower wakes when its leader's broker dies (the watcher elects
//     at once, cluster/watch.go) or goes silent (cluster/quiet.go); its
//     new raft instance then elects as after any restart.
//
// An offsets partition (__consumer_offsets) sleeps only while its group
// coordinator is quiet: no group has a member or a rebalance, and all it
// holds is in the log. Its coordinator then closes; the next group request
// for one of its groups (or a ListGroups) wakes the partition and waits
// for the coordinator, loaded from the log again, as for a handover.
// __transaction_state never sleeps: the transaction coordinator keeps
// timers of its own.

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/simtel/simtel/broker/cluster"
	"github.com/simtel/simtel/broker/partition"
	"github.com/simtel/simtel/internal/tick"
)

// sleepIdlePartitions puts to sleep, every quarter of
// --replica-dormant-after (at least every second), the replicated
// partitions this broker leads that have had no write for that long,
// sleepWorkers at a time, until ctx ends.
func (b *Broker) sleepIdlePartitions(ctx context.Context) {
	after := b.cfg.ReplicaDormantAfter
	tick.Every(ctx, max(after/4, time.Second), func() { b.sleepIdle(ctx, after) })
}

// sleepWorkers: a sleep is a snapshot and an fsync on each replica and a
// round trip to each follower; thousands of partitions going idle at once
// sleep in parallel.
const sleepWorkers = 8

// sleepIdle is one pass of sleepIdlePartitions.
func (b *Broker) sleepIdle(ctx context.Context, after time.Duration) {
	md := b.cluster.Metadata()
	now := time.Now()
	type idle struct {
		topic string
		i     int
		p     *partition.Partition
	}
	var todo []idle
	for _, tp := range b.allTopics() {
		if tp.name == txnStateTopic {
			continue
		}
		ti := md.Topics[tp.name]
		if ti == nil || ti.ID != tp.id {
			continue
		}
		for i, p := range tp.parts {
			if p == nil || !p.Replicated() || i >= len(ti.Partitions) || !p.IsLeader() || !p.IdleFor(after, now) {
				continue
			}
			if tp.name == offsetsTopic && !b.coordinatorQuiet(int32(i), p) {
				continue
			}
			// Not while a reassignment runs, nor before the placer
			// hands leadership back to a live preferred replica (a
			// dormant group keeps the leader it slept with). An
			// offsets partition's leadership goes back only minutes
			// later (coordinatorLeaderDelay), and a quiet coordinator
			// has no members to move: it sleeps where it is.
			a := ti.Partitions[i]
			notPreferred := len(a.Replicas) > 1 && a.Replicas[0] != b.cfg.NodeID && md.Brokers[a.Replicas[0]].Alive
			if a.Target != nil || notPreferred && tp.name != offsetsTopic {
				continue
			}
			todo = append(todo, idle{tp.name, i, p})
		}
	}
	next := make(chan idle)
	var wg sync.WaitGroup
	for range min(sleepWorkers, len(todo)) {
		wg.Go(func() {
			for x := range next {
				n, err := x.p.Sleep()
				switch {
				case errors.Is(err, cluster.ErrNotIdle):
				case err != nil:
					b.log.Warn("an idle partition did not go to sleep", "topic", x.topic, "partition", x.i, "err", err)
				default:
					b.metrics.dormantSleeps.Inc()
					b.log.Debug("idle partition asleep", "topic", x.topic, "partition", x.i, "followers", n)
				}
			}
		})
	}
	for _, x := range todo {
		if ctx.Err() != nil {
			break
		}
		next <- x
	}
	close(next)
	wg.Wait()
}
