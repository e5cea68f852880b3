package broker

// Produce, versions 3-10 (record batches, magic 2, only).
//
// A request with a transactional id may hold only transactional batches
// of that id's current producer id and epoch, for partitions added to its
// ongoing transaction, as its coordinator (package txn) knows it
// (transactions.go). On a single node the check and the append happen
// under the transaction's lock, so no batch lands after its marker; in a
// cluster the replicas refuse a batch of an epoch a marker fenced.
//
// A topic with message.timestamp.type=LogAppendTime has its batches
// stamped with the broker's clock before anything else sees them (see
// storage.StampLogAppendTime); the response's LogAppendTime carries that
// time, -1 for CreateTime topics.
//
// A partition answered NOT_LEADER_OR_FOLLOWER in a cluster carries the
// leader this broker knows (CurrentLeader, with its address in the
// response's Brokers; v10+, KIP-951) when that is another live broker:
// a client moves the partition there at once instead of asking for
// metadata, which franz-go does at most every 5 s (MetadataMinAge). Each
// such refresh also restarts that wait, so a leader that dies within 5 s
// of a leadership move (a restarted broker taking its partitions back)
// used to cost its clients the rest of the 5 s.
//
// Appends happen on the connection's read loop, in request order, so an
// idempotent producer's pipelined batches reach the log in sequence order.
// acks=all then waits for the commit (fsync, shared with every other
// producer waiting on the same partition) off the read loop; acks=1 answers
// after the append and lets the flusher commit; acks=0 gets no response.

import (
	"context"
	"slices"
	"time"

	"github.com/hashicorp/raft"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/broker/cluster"
	"github.com/simtel/simtel/broker/kapi"
	"github.com/simtel/simtel/broker/partition"
	"github.com/simtel/simtel/broker/server"
	"github.com/simtel/simtel/broker/storage"
)

var _ = apis.AddServe(kapi.API{Key: 0, Min: 3, Max: 10},
	func(b *Broker, r *kapi.Request) {
		req := r.Msg.(*kmsg.ProduceRequest)
		// Write on each topic, and on the transactional id of a
		// transactional request (its every partition refused without
		// it), as Kafka authorizes Produce.
		denied := kapi.DeniedTopics(r, kmsg.ACLOperationWrite, req.Topics, func(t *kmsg.ProduceRequestTopic) string { return t.Topic })
		txnDenied := req.TransactionID != nil && !r.Allowed(kmsg.ACLOperationWrite, auth.TransactionalID(*req.TransactionID))
		b.handleProduce(r.Ctx, req, r.Listener, r.Slot.(*server.Slot), denied, txnDenied)
	})

type produceWait struct {
	part *partition.Partition
	last int64
	rp   *kmsg.ProduceResponseTopicPartition
	// fut is set for a replicated partition: the raft entry to wait for
	// (acks=1 and acks=all alike: the answer comes after a majority has
	// the entry and it is applied).
	fut raft.ApplyFuture
	n   int // bytes, for the metrics
}

func (b *Broker) handleProduce(ctx context.Context, r *kmsg.ProduceRequest, listener string, p *server.Slot, denied map[string]bool, txnDenied bool) {
	// A partition in a handover, or of a topic created a moment ago, may
	// be this broker's to serve shortly (handover.go).
	b.awaitProduceLeaders(ctx, r)
	resp := r.ResponseKind().(*kmsg.ProduceResponse)
	resp.Version = r.Version
	acks := r.Acks
	badAcks := acks != 0 && acks != 1 && acks != -1
	var waits []produceWait
	var touched []*partition.Partition

	resp.Topics = make([]kmsg.ProduceResponseTopic, len(r.Topics))
	for i := range r.Topics {
		rt := &r.Topics[i]
		st := &resp.Topics[i]
		st.Topic = rt.Topic
		st.Partitions = make([]kmsg.ProduceResponseTopicPartition, len(rt.Partitions))
		for j := range rt.Partitions {
			rp := &rt.Partitions[j]
			sp := &st.Partitions[j]
			sp.Default()
			sp.Partition = rp.Partition
			switch {
			case badAcks:
				sp.ErrorCode = kerr.InvalidRequiredAcks.Code
				continue
			case txnDenied:
				sp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
				continue
			case denied[rt.Topic]:
				sp.ErrorCode = kerr.TopicAuthorizationFailed.Code
				continue
			case rt.Topic == offsetsTopic || rt.Topic == txnStateTopic:
				// Only the group coordinator writes it, as in Kafka.
				sp.ErrorCode = kerr.InvalidTopicException.Code
				msg := "cannot produce to the internal topic " + rt.Topic
				sp.ErrorMessage = &msg
				continue
			}
			part := b.partition(rt.Topic, rp.Partition)
			if part == nil {
				sp.ErrorCode = b.absentPartitionCode(rt.Topic, rp.Partition)
				continue
			}
			if part.LogAppendTime() {
				// Stamped here, once, before the append or the raft
				// entry: every replica stores the same bytes, and a
				// follower never consults its own clock.
				now := time.Now().UnixMilli()
				stamped, err := storage.StampLogAppendTime(rp.Records, 0, now)
				if err != nil {
					err = partition.KafkaError(err)
					sp.ErrorCode = kapi.ErrorCode(err)
					msg := err.Error()
					sp.ErrorMessage = &msg
					b.metrics.produceErrors.WithLabelValues(kerr.ErrorForCode(sp.ErrorCode).Error()).Inc()
					continue
				}
				rp.Records = stamped
				sp.LogAppendTime = now
			}
			if part.Replicated() {
				var fut raft.ApplyFuture
				var err error
				if r.TransactionID != nil {
					fut, err = b.replicateTxn(ctx, *r.TransactionID, part, rp.Records)
				} else {
					fut, err = part.Replicate(rp.Records)
				}
				if err != nil {
					sp.ErrorCode = kapi.ErrorCode(err)
					msg := err.Error()
					sp.ErrorMessage = &msg
					b.metrics.produceErrors.WithLabelValues(kerr.ErrorForCode(sp.ErrorCode).Error()).Inc()
					continue
				}
				// acks=0 is not waited for: the entry is applied (or lost
				// with the leader) in the background.
				waits = append(waits, produceWait{part: part, rp: sp, fut: fut, n: len(rp.Records)})
				continue
			}
			var res partition.AppendResult
			if r.TransactionID != nil && b.cluster != nil {
				res = b.produceTxnUnreplicated(ctx, *r.TransactionID, part, rp.Records)
			} else if r.TransactionID != nil {
				res = b.produceTxn(*r.TransactionID, part, rp.Records)
			} else {
				res = part.Append(rp.Records)
			}
			if res.Err != nil {
				sp.ErrorCode = kapi.ErrorCode(res.Err)
				msg := res.Err.Error()
				sp.ErrorMessage = &msg
				b.metrics.produceErrors.WithLabelValues(kerr.ErrorForCode(sp.ErrorCode).Error()).Inc()
				b.log.Debug("produce refused", "topic", rt.Topic, "partition", rp.Partition, "err", res.Err)
				continue
			}
			sp.BaseOffset = res.Base
			sp.LogStartOffset = part.Log().StartOffset()
			if !res.Duplicate {
				b.metrics.producedBytes.Add(float64(len(rp.Records)))
				b.metrics.producedRecords.Add(float64(res.Last - res.Base + 1))
			}
			if acks == -1 {
				last := res.Last
				if res.Duplicate {
					last = res.Base
				}
				waits = append(waits, produceWait{part: part, last: last, rp: sp})
			} else {
				touched = append(touched, part)
			}
		}
	}
	for _, part := range touched {
		part.CommitLater()
	}
	if acks == 0 && !badAcks {
		waits = nil
		// No response; like Kafka, drop the connection if anything failed
		// so the client refreshes its metadata instead of sending into a void.
		failed := false
		for _, t := range resp.Topics {
			for _, sp := range t.Partitions {
				failed = failed || sp.ErrorCode != 0
			}
		}
		p.FinishNoResponse(failed)
		return
	}
	if len(waits) == 0 {
		if b.leaderHints(resp, listener) {
			p.Finish(resp)
			return
		}
		// Off the read loop, like the waits below.
		go func() {
			b.awaitLeaderHints(resp, listener)
			p.Finish(resp)
		}()
		return
	}
	go func() {
		timeout := time.Duration(r.TimeoutMillis) * time.Millisecond
		if timeout <= 0 {
			timeout = 30 * time.Second
		}
		wctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		for _, w := range waits {
			if w.fut != nil {
				res := partition.ApplyResult(w.fut)
				if res.Err != nil {
					w.rp.ErrorCode = kapi.ErrorCode(res.Err)
					w.rp.BaseOffset = -1
					msg := res.Err.Error()
					w.rp.ErrorMessage = &msg
					b.metrics.produceErrors.WithLabelValues(kerr.ErrorForCode(w.rp.ErrorCode).Error()).Inc()
					continue
				}
				w.rp.BaseOffset = res.Base
				w.rp.LogStartOffset = w.part.Log().StartOffset()
				if !res.Duplicate {
					b.metrics.producedBytes.Add(float64(w.n))
					b.metrics.producedRecords.Add(float64(res.Last - res.Base + 1))
				}
				continue
			}
			if err := w.part.Commit(wctx, w.last); err != nil {
				w.rp.ErrorCode = kapi.ErrorCode(err)
				w.rp.BaseOffset = -1
				msg := err.Error()
				w.rp.ErrorMessage = &msg
				b.log.Warn("produce not committed", "topic", w.part.Topic(), "partition", w.part.Index(), "err", err)
			}
		}
		b.awaitLeaderHints(resp, listener)
		p.Finish(resp)
	}()
}

// awaitLeaderHints fills resp's leader hints (leaderHints), waiting up to
// handoverWait for a replica here that names no other live leader yet:
// the leader handing its leadership to another replica (the preferred
// leader back after a restart) refuses writes until the other has won,
// and without a hint franz-go asks for metadata, which it does at most
// every 5 s. The election usually ends within milliseconds, but on a busy
// machine one after a leader died can take seconds (awaitElections).
func (b *Broker) awaitLeaderHints(resp *kmsg.ProduceResponse, listener string) {
	deadline := time.Now().Add(b.handoverWait())
	for !b.leaderHints(resp, listener) && time.Now().Before(deadline) {
		time.Sleep(handoverPoll)
	}
}

// leaderHints fills CurrentLeader of each partition of resp answered
// NOT_LEADER_OR_FOLLOWER with the leader this broker knows, and Brokers
// with its address on the client's listener, when it is another live
// broker (v10+, in a cluster). The leader and epoch are the ones a
// Metadata answer would name (handleClusterMetadata). It reports false
// while the replica here of such a partition knows no leader, still
// names itself or follows a broker seen gone (an election or a
// leadership transfer is running) and a quorum of its replicas is live:
// its hint may come shortly.
func (b *Broker) leaderHints(resp *kmsg.ProduceResponse, listener string) (done bool) {
	if resp.Version < 10 || b.cluster == nil {
		return true
	}
	done = true
	var md *cluster.Metadata
	for i := range resp.Topics {
		st := &resp.Topics[i]
		for j := range st.Partitions {
			sp := &st.Partitions[j]
			if sp.ErrorCode != kerr.NotLeaderForPartition.Code || sp.CurrentLeader.LeaderID >= 0 {
				continue
			}
			if md == nil {
				md = b.cluster.Metadata()
			}
			ti := md.Topics[st.Topic]
			if ti == nil || sp.Partition < 0 || int(sp.Partition) >= len(ti.Partitions) {
				continue
			}
			a := ti.Partitions[sp.Partition]
			leader, epoch := a.Leader, a.LeaderEpoch
			l, e, replica, ok := b.localLeader(st.Topic, ti.ID, int(sp.Partition))
			if ok && e >= epoch {
				leader, epoch = l, e
			}
			if replica && (!ok || l == b.cfg.NodeID || b.cluster.PeerDown(l)) && b.canElect(md, a) {
				done = false
				continue
			}
			br, ok := md.Brokers[leader]
			if leader == b.cfg.NodeID || !ok || !br.Alive || b.cluster.PeerDown(leader) {
				continue
			}
			host, port, ok := brokerAddr(listener, br)
			if !ok {
				continue
			}
			sp.CurrentLeader.LeaderID, sp.CurrentLeader.LeaderEpoch = leader, epoch
			if !slices.ContainsFunc(resp.Brokers, func(rb kmsg.ProduceResponseBroker) bool { return rb.NodeID == leader }) {
				rb := kmsg.NewProduceResponseBroker()
				rb.NodeID, rb.Host, rb.Port = leader, host, port
				resp.Brokers = append(resp.Brokers, rb)
			}
		}
	}
	return done
}
