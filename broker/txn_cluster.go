package broker

// Transaction coordinators in cluster mode.
//
// __transaction_state is a replicated internal topic (created through the
// controller when the first transactional request finds it missing,
// txnStateTopicPartitions partitions, compacted). A transactional id belongs to partition
// hash(id) mod the partition count, and its coordinator is the raft
// leader of that partition:
//
//   - syncTxnCoordinators (on the group coordinators' tick) opens a
//     txnCoordinator for each state partition this broker leads and is
//     ready in (its raft barrier went through, so the local log holds
//     every committed state record), loading the ids from the log; it
//     closes the ones of partitions it no longer leads or whose term
//     changed. A request for an id of a partition this broker does not
//     lead gets NOT_COORDINATOR; FindCoordinator (key type 1) names the
//     partition's raft leader.
//   - Every state change is one raft entry of the partition
//     (Partition.proposeInternal, refused once the term changed), applied
//     on every replica, answered once committed on a majority. A new
//     leader therefore knows every Ongoing transaction (with its start
//     time: the timeout keeps counting) and every Prepare* decision; its
//     check loop writes the markers of the Prepare* ones and completes
//     them.
//   - Markers go to each data partition's raft leader: written directly
//     when this broker leads it, else in a WriteTxnMarkers request to the
//     leader (27_write_txn_markers.go). Any failure leaves the
//     transaction in Prepare*, retried every txnCheckInterval until every
//     marker is written.
//   - Transactional offsets (TxnOffsetCommit) are sent by clients to the
//     group's coordinator, which checks the member's generation and
//     passes the offsets to the transaction coordinator (a v2
//     TxnOffsetCommit, without the generation fields); they are part of
//     the replicated transaction state. On commit the transaction
//     coordinator writes them to the group: directly when it coordinates
//     the group too, else in a TxnOffsetCommit carrying txnApplyMember,
//     which the group coordinator applies to the group's replicated log.

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/cluster"
	"github.com/simtel/simtel/broker/group"
	"github.com/simtel/simtel/broker/partition"
	"github.com/simtel/simtel/broker/storage"
)

// txnStateTopicPartitions is the partition count of __transaction_state
// in cluster mode: a few, so the coordinators spread over the brokers.
const txnStateTopicPartitions = 3

// txnApplyMember is the member id of the TxnOffsetCommit a transaction
// coordinator sends to a group coordinator to apply a committed
// transaction's offsets. No member of a group can have it: the group
// coordinator makes member ids from a client id and a UUID, never with a
// leading NUL.
const txnApplyMember = "\x00simtel-txn-commit"

// txnPendingMember is the member id of a TxnOffsetCommit that asks a
// broker's transaction coordinators which partitions of the group they
// hold offsets for in open transactions (no topics; the answer lists
// them). A group coordinator that took the group over recently asks it
// for RequireStable OffsetFetches (txnPendingOffset).
const txnPendingMember = "\x00simtel-txn-pending"

// txnSlot is the coordinator of one state partition this broker leads.
type txnSlot struct {
	part   *partition.Partition
	term   uint64
	c      *txnCoordinator
	cancel context.CancelFunc
	done   chan struct{} // closed when c.run has returned
}

func (s *txnSlot) valid(p *partition.Partition) bool {
	return s.part == p && p.IsLeader() && p.Term() == s.term
}

// txnClusterState is the broker's cluster-mode transaction state.
type txnClusterState struct {
	mu    sync.RWMutex
	slots map[int32]*txnSlot

	// forwarded maps a group partition to the transactional ids whose
	// offset for it this broker (the group's coordinator) passed to
	// another broker's transaction coordinator, until that coordinator
	// applies or drops them (txnApplyMember); OffsetFetch with
	// RequireStable answers UNSTABLE_OFFSET_COMMIT meanwhile.
	fwdMu     sync.Mutex
	forwarded map[pendingKey]map[string]struct{}
	// remote caches remotePending's answers by group (under fwdMu).
	remote map[string]remotePendingAnswer

	// wanted: a transactional request found no __transaction_state;
	// the coordinator loop asks the controller to create it.
	wanted atomic.Bool

	once        sync.Once
	ended       *prometheus.CounterVec
	peersMu     sync.Mutex
	peers       map[string]*kgo.Client // by Kafka address
	peersClosed bool                   // the broker is stopping: no new clients
}

func (b *Broker) txnClusterMetrics() *prometheus.CounterVec {
	s := &b.txnc
	s.once.Do(func() {
		s.ended = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "simtel_broker_txn_ended_total", Help: "Transactions ended by the coordinator, by result (commit, abort, timeout: aborted because the producer went quiet)."}, []string{"result"})
		b.metrics.reg.MustRegister(s.ended, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "simtel_broker_txn_ongoing", Help: "Transactions in progress on the coordinators of this broker."}, func() float64 {
			n := 0.0
			for _, c := range b.txnCoordinators() {
				n += c.countOngoing()
			}
			return n
		}))
	})
	return s.ended
}

// txnCoordinators returns every transaction coordinator of this broker.
func (b *Broker) txnCoordinators() []*txnCoordinator {
	if b.cluster == nil {
		if b.txns == nil {
			return nil
		}
		return []*txnCoordinator{b.txns}
	}
	b.txnc.mu.RLock()
	defer b.txnc.mu.RUnlock()
	out := make([]*txnCoordinator, 0, len(b.txnc.slots))
	for _, s := range b.txnc.slots {
		out = append(out, s.c)
	}
	return out
}

// txnPartitionOf maps a transactional id to its state partition.
func txnPartitionOf(id string, n int) int32 {
	h := fnv.New32a()
	h.Write([]byte(id))
	return int32(h.Sum32() % uint32(n))
}

// txnCoordinatorFor returns the coordinator of a transactional id on this
// broker, or the error code to answer with.
func (b *Broker) txnCoordinatorFor(id string) (*txnCoordinator, int16) {
	if b.cluster == nil {
		if b.txns == nil {
			return nil, kerr.CoordinatorNotAvailable.Code
		}
		return b.txns, 0
	}
	n := b.txnStatePartitions()
	if n == 0 {
		b.txnc.wanted.Store(true)
		return nil, kerr.CoordinatorNotAvailable.Code
	}
	i := txnPartitionOf(id, n)
	p := b.localPartition(txnStateTopic, i)
	b.txnc.mu.RLock()
	s := b.txnc.slots[i]
	b.txnc.mu.RUnlock()
	if s != nil && p != nil && s.valid(p) {
		return s.c, 0
	}
	if p != nil && p.IsLeader() {
		return nil, kerr.CoordinatorLoadInProgress.Code
	}
	return nil, kerr.NotCoordinator.Code
}

// txnStatePartitions is the partition count of __transaction_state in
// the cluster metadata, 0 before the controller created it.
func (b *Broker) txnStatePartitions() int {
	if ti := b.cluster.Metadata().Topics[txnStateTopic]; ti != nil {
		return len(ti.Partitions)
	}
	return 0
}

// partitionLeaderBroker names the broker leading a partition: the raft
// leader a local replica knows of (it hears of a new leader before the
// controller does), else the controller's record.
func (b *Broker) partitionLeaderBroker(topic string, i int32) (cluster.BrokerInfo, bool) {
	md := b.cluster.Metadata()
	if p := b.localPartition(topic, i); p != nil && p.Replicated() {
		if _, id := p.Raft().LeaderWithID(); id != "" {
			if n, err := strconv.Atoi(string(id)); err == nil {
				if lb, ok := md.Brokers[int32(n)]; ok && lb.Alive {
					return lb, true
				}
			}
		}
	}
	ti := md.Topics[topic]
	if ti == nil || i < 0 || int(i) >= len(ti.Partitions) {
		return cluster.BrokerInfo{}, false
	}
	lb, ok := md.Brokers[ti.Partitions[i].Leader]
	return lb, ok && lb.Alive
}

// findTxnCoordinator answers FindCoordinator for a transactional id in
// cluster mode.
func (b *Broker) findTxnCoordinator(id string, resp *kmsg.FindCoordinatorResponse) {
	resp.NodeID = -1
	n := b.txnStatePartitions()
	if n == 0 {
		b.txnc.wanted.Store(true)
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		msg := "the controller has not created " + txnStateTopic + " yet; retry"
		resp.ErrorMessage = &msg
		return
	}
	c, _ := b.txnCoordinatorFor(id)
	b.answerCoordinator(resp, c != nil, txnStateTopic, txnPartitionOf(id, n), "the transactional id's")
}

// answerCoordinator fills a FindCoordinator answer in cluster mode: this
// broker if it coordinates the key (local), else the leader of the key's
// partition i of the internal topic; whose names the key in the error.
func (b *Broker) answerCoordinator(resp *kmsg.FindCoordinatorResponse, local bool, topic string, i int32, whose string) {
	if local {
		resp.NodeID = b.cfg.NodeID
		resp.Host, resp.Port = b.advertised()
		return
	}
	lb, ok := b.partitionLeaderBroker(topic, i)
	if !ok {
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		msg := whose + " partition of " + topic + " is electing a leader; retry"
		resp.ErrorMessage = &msg
		return
	}
	resp.NodeID = lb.ID
	resp.Host, resp.Port = splitHostPort(lb.KafkaAddr)
}

// ensureClusterTxnStateTopic has the controller create __transaction_state
// once a transactional request needed it (a cluster without transactions
// never gets it, as a single node), after __consumer_offsets exists (so
// it gets the same replication factor).
func (b *Broker) ensureClusterTxnStateTopic(ctx context.Context) {
	if b.cluster == nil || !b.txnc.wanted.Load() {
		return
	}
	md := b.cluster.Metadata()
	if md.Topics[txnStateTopic] != nil {
		b.txnc.wanted.Store(false)
		return
	}
	if md.Topics[offsetsTopic] == nil {
		return
	}
	cmd := cluster.Command{Op: cluster.OpCreateTopic, Topic: txnStateTopic, Partitions: txnStateTopicPartitions,
		Configs: maps.Clone(txnStateTopicConfigs), ReplicationFactor: -1}
	_, _ = rand.Read(cmd.TopicID[:])
	actx, cancel := context.WithTimeout(ctx, clusterAdminTimeout)
	defer cancel()
	if _, err := b.cluster.Apply(actx, cmd); err != nil && !errors.Is(err, cluster.ErrTopicExists) {
		b.log.Warn("cannot create the transaction state topic; retrying", "topic", txnStateTopic, "err", err)
		return
	}
	b.log.Info("transaction state topic created", "topic", txnStateTopic, "partitions", txnStateTopicPartitions)
}

// syncTxnCoordinators opens and closes transaction coordinators to match
// the state partitions this broker leads. Closing runs in the background
// (the coordinator's loop may be waiting on a marker); closing tracks it.
func (b *Broker) syncTxnCoordinators(ctx context.Context, closing *sync.WaitGroup) {
	var parts []*partition.Partition
	if t := b.topic(txnStateTopic); t != nil {
		parts = t.parts
	}
	b.txnc.mu.Lock()
	if b.txnc.slots == nil {
		b.txnc.slots = map[int32]*txnSlot{}
	}
	for i, s := range b.txnc.slots {
		if int(i) < len(parts) && parts[i] != nil && s.valid(parts[i]) {
			continue
		}
		delete(b.txnc.slots, i)
		closing.Add(1)
		go func() {
			defer closing.Done()
			b.closeTxnSlot(i, s)
		}()
	}
	b.txnc.mu.Unlock()
	b.readyOffsetsLeaders(parts)
	for i, p := range parts {
		if p == nil || !p.IsLeader() {
			continue
		}
		b.txnc.mu.RLock()
		have := b.txnc.slots[int32(i)] != nil
		b.txnc.mu.RUnlock()
		if have {
			continue
		}
		s, err := b.openTxnSlot(ctx, p)
		if err != nil {
			b.log.Error("cannot load the transactions of a state partition this broker leads; retrying", "partition", i, "err", err)
			continue
		}
		b.txnc.mu.Lock()
		b.txnc.slots[int32(i)] = s
		b.txnc.mu.Unlock()
		b.log.Info("coordinating the transactions of a state partition", "partition", i, "term", s.term)
	}
}

func (b *Broker) openTxnSlot(ctx context.Context, p *partition.Partition) (*txnSlot, error) {
	term := p.Term()
	c := &txnCoordinator{b: b, log: b.log.With("part", "txn", "state_partition", p.Index(), "term", term), now: time.Now,
		pending: map[pendingKey]map[string]struct{}{}, state: p, term: term, clustered: true, ended: b.txnClusterMetrics()}
	c.mu.txns = map[string]*txnEntry{}
	if err := c.load(); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	s := &txnSlot{part: p, term: term, c: c, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		c.run(rctx)
	}()
	return s, nil
}

func (b *Broker) closeTxnSlot(i int32, s *txnSlot) {
	s.cancel()
	<-s.done
	b.log.Info("stopped coordinating the transactions of a state partition", "partition", i, "term", s.term)
}

// closeTxnCoordinators stops every coordinator (broker shutdown) and the
// clients to the other brokers.
func (b *Broker) closeTxnCoordinators() {
	b.txnc.mu.Lock()
	slots := b.txnc.slots
	b.txnc.slots = map[int32]*txnSlot{}
	b.txnc.mu.Unlock()
	for i, s := range slots {
		b.closeTxnSlot(i, s)
	}
	b.txnc.peersMu.Lock()
	for addr, cl := range b.txnc.peers {
		cl.Close()
		delete(b.txnc.peers, addr)
	}
	b.txnc.peersClosed = true
	b.txnc.peersMu.Unlock()
}

// peerRequest sends req to the broker at addr and returns its response.
func (b *Broker) peerRequest(ctx context.Context, addr string, req kmsg.Request) (kmsg.Response, error) {
	b.txnc.peersMu.Lock()
	if b.txnc.peersClosed {
		b.txnc.peersMu.Unlock()
		return nil, fmt.Errorf("%w: the broker is shutting down", kerr.CoordinatorNotAvailable)
	}
	if b.txnc.peers == nil {
		b.txnc.peers = map[string]*kgo.Client{}
	}
	cl := b.txnc.peers[addr]
	if cl == nil {
		var err error
		cl, err = kgo.NewClient(kgo.SeedBrokers(addr), kgo.ClientID("simtel-broker-"+strconv.Itoa(int(b.cfg.NodeID))),
			kgo.DialTimeout(5*time.Second), kgo.RequestRetries(0))
		if err != nil {
			b.txnc.peersMu.Unlock()
			return nil, fmt.Errorf("cannot create a client to broker %s: %w", addr, err)
		}
		b.txnc.peers[addr] = cl
	}
	b.txnc.peersMu.Unlock()
	seeds := cl.SeedBrokers()
	if len(seeds) == 0 {
		return nil, fmt.Errorf("no client connection to broker %s", addr)
	}
	return seeds[0].Request(ctx, req)
}

// newProducerID allocates a producer id unique in the cluster (see
// handleInitProducerID).
func (b *Broker) newProducerID() (int64, error) {
	id, err := b.pids.next()
	if err != nil {
		return 0, err
	}
	if b.cluster != nil {
		id = id<<16 | int64(b.cfg.NodeID)
	}
	return id, nil
}

// txnPartitionKnown reports whether a topic partition exists (anywhere
// in the cluster), so a transaction may include it.
func (b *Broker) txnPartitionKnown(topic string, i int32) bool {
	if b.cluster == nil {
		return b.partition(topic, i) != nil
	}
	ti := b.cluster.Metadata().Topics[topic]
	return ti != nil && i >= 0 && int(i) < len(ti.Partitions)
}

// writeTxnMarkers writes a marker for every partition of a transaction
// at the partition's leader, all at once (each is a raft round trip), and
// returns the first failure (the caller retries them all: a second marker
// is harmless).
func (b *Broker) writeTxnMarkers(ctx context.Context, coordEpoch int32, pid int64, epoch int16, ct storage.ControlType, tps []txnTP) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(tps))
	defer wg.Wait()                // on an early return
	remote := map[string][]txnTP{} // by leader address
	for _, tp := range tps {
		if p := b.partition(tp.Topic, tp.Partition); p != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- p.WriteMarker(ctx, pid, epoch, ct, coordEpoch)
			}()
			continue
		}
		if !b.txnPartitionKnown(tp.Topic, tp.Partition) {
			b.log.Warn("partition of a transaction is gone; no marker written", "producer_id", pid, "topic", tp.Topic, "partition", tp.Partition)
			continue
		}
		lb, ok := b.partitionLeaderBroker(tp.Topic, tp.Partition)
		if !ok || lb.ID == b.cfg.NodeID {
			return fmt.Errorf("%w: %s-%d has no ready leader yet", kerr.NotLeaderForPartition, tp.Topic, tp.Partition)
		}
		remote[lb.KafkaAddr] = append(remote[lb.KafkaAddr], tp)
	}
	for addr, tps := range remote {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- b.sendTxnMarkers(ctx, addr, coordEpoch, pid, epoch, ct, tps)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// sendTxnMarkers asks the broker at addr, the leader of tps, to write a
// producer's markers there.
func (b *Broker) sendTxnMarkers(ctx context.Context, addr string, coordEpoch int32, pid int64, epoch int16, ct storage.ControlType, tps []txnTP) error {
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	req.Version = 1
	m := kmsg.NewWriteTxnMarkersRequestMarker()
	m.ProducerID, m.ProducerEpoch, m.Committed, m.CoordinatorEpoch = pid, epoch, ct == storage.ControlCommit, coordEpoch
	byTopic := map[string]int{}
	for _, tp := range tps {
		j, ok := byTopic[tp.Topic]
		if !ok {
			j = len(m.Topics)
			byTopic[tp.Topic] = j
			mt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
			mt.Topic = tp.Topic
			m.Topics = append(m.Topics, mt)
		}
		m.Topics[j].Partitions = append(m.Topics[j].Partitions, tp.Partition)
	}
	req.Markers = append(req.Markers, m)
	rctx, cancel := context.WithTimeout(ctx, txnOpTimeout)
	kr, err := b.peerRequest(rctx, addr, req)
	cancel()
	if err != nil {
		return fmt.Errorf("cannot send transaction markers to broker %s: %w", addr, err)
	}
	for _, rm := range kr.(*kmsg.WriteTxnMarkersResponse).Markers {
		for _, rt := range rm.Topics {
			for _, rp := range rt.Partitions {
				if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
					return fmt.Errorf("broker %s cannot write the transaction marker of %s-%d: %w", addr, rt.Topic, rp.Partition, err)
				}
			}
		}
	}
	return nil
}

// commitTxnGroupOffsets writes a committed transaction's offsets to their
// groups: through the local group coordinator, or at the group's
// coordinator broker. A group with no offsets (an aborted transaction)
// only tells the group coordinator to forget the offsets it forwarded.
func (b *Broker) commitTxnGroupOffsets(ctx context.Context, txnID string, pid int64, epoch int16, byGroup map[string][]group.CommittedOffset) error {
	if b.cluster == nil {
		for g, offs := range byGroup {
			if err := b.groups.CommitTxnOffsets(g, offs); err != nil {
				return fmt.Errorf("cannot commit the transaction's offsets of group %q: %w", g, err)
			}
		}
		return nil
	}
	for g, offs := range byGroup {
		if c, _ := b.coordinatorFor(g); c != nil {
			if len(offs) == 0 {
				b.setForwarded(txnID, g, nil, false)
				continue
			}
			if err := c.CommitTxnOffsets(g, offs); err != nil {
				return fmt.Errorf("cannot commit the transaction's offsets of group %q: %w", g, err)
			}
			b.setForwarded(txnID, g, nil, false)
			continue
		}
		t := b.topic(offsetsTopic)
		n := 0
		if ti := b.cluster.Metadata().Topics[offsetsTopic]; ti != nil {
			n = len(ti.Partitions)
		}
		if t == nil && n == 0 {
			return fmt.Errorf("%w: %s does not exist yet", kerr.CoordinatorNotAvailable, offsetsTopic)
		}
		lb, ok := b.partitionLeaderBroker(offsetsTopic, groupPartition(g, n))
		if !ok || lb.ID == b.cfg.NodeID {
			return fmt.Errorf("%w: the coordinator of group %q is not ready", kerr.CoordinatorNotAvailable, g)
		}
		req := kmsg.NewPtrTxnOffsetCommitRequest()
		req.Version = 3
		req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch = txnID, g, pid, epoch
		req.Generation, req.MemberID = -1, txnApplyMember
		for _, o := range offs {
			rt := kmsg.NewTxnOffsetCommitRequestTopic()
			rt.Topic = o.Topic
			rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch = o.Partition, o.Offset, o.LeaderEpoch
			meta := o.Metadata
			rp.Metadata = &meta
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
		}
		rctx, cancel := context.WithTimeout(ctx, txnOpTimeout)
		kr, err := b.peerRequest(rctx, lb.KafkaAddr, req)
		cancel()
		if err != nil {
			return fmt.Errorf("cannot send the transaction's offsets of group %q to broker %s: %w", g, lb.KafkaAddr, err)
		}
		for _, rt := range kr.(*kmsg.TxnOffsetCommitResponse).Topics {
			for _, rp := range rt.Partitions {
				if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
					return fmt.Errorf("broker %s cannot commit the transaction's offset of group %q for %s-%d: %w", lb.KafkaAddr, g, rt.Topic, rp.Partition, err)
				}
			}
		}
	}
	return nil
}

// txnPendingOffset reports whether a transaction holds an uncommitted
// offset for the group partition: one recorded by a coordinator here, one
// this group coordinator passed to another broker's, or, while this
// broker has coordinated the group for less than the longest transaction
// timeout, one a previous coordinator of the group passed on (asked of
// the other brokers' transaction coordinators: the marks of passed-on
// offsets are in the memory of the broker that passed them).
func (b *Broker) txnPendingOffset(grp, topic string, part int32) bool {
	for _, c := range b.txnCoordinators() {
		if c.pendingOffset(grp, topic, part) {
			return true
		}
	}
	if b.cluster == nil {
		return false
	}
	b.txnc.fwdMu.Lock()
	marked := len(b.txnc.forwarded[pendingKey{grp, topic, part}]) > 0
	b.txnc.fwdMu.Unlock()
	if marked || !b.recentGroupCoordinator(grp) {
		return marked
	}
	ans := b.remotePending(grp)
	return ans.all || ans.keys[pendingKey{grp, topic, part}]
}

// recentGroupCoordinator reports whether this broker took over grp's
// offsets partition less than maxTxnTimeout ago: a transaction opened
// under the previous coordinator may still hold offsets for it.
func (b *Broker) recentGroupCoordinator(grp string) bool {
	t := b.topic(offsetsTopic)
	if t == nil || len(t.parts) == 0 {
		return false
	}
	b.coords.RLock()
	s := b.coords.slots[groupPartition(grp, len(t.parts))]
	b.coords.RUnlock()
	return s != nil && time.Since(s.since) < maxTxnTimeout
}

// remotePendingTTL is how long an answer of the other brokers' transaction
// coordinators is reused: one OffsetFetch asks per partition.
const remotePendingTTL = 250 * time.Millisecond

// remotePending returns which group partitions a transaction coordinator
// on another broker holds offsets of grp for. An unreachable coordinator
// makes every partition of the group count as pending (all: the client
// retries UNSTABLE_OFFSET_COMMIT) rather than risk handing out an offset
// a transaction is about to replace. Answers, failures included, are
// reused for remotePendingTTL, so an OffsetFetch of many partitions asks
// once.
func (b *Broker) remotePending(grp string) remotePendingAnswer {
	b.txnc.fwdMu.Lock()
	if c, ok := b.txnc.remote[grp]; ok && time.Since(c.at) < remotePendingTTL {
		b.txnc.fwdMu.Unlock()
		return c
	}
	b.txnc.fwdMu.Unlock()

	ans := remotePendingAnswer{keys: map[pendingKey]bool{}}
	addrs := map[string]bool{}
	for i := range b.txnStatePartitions() {
		lb, ok := b.partitionLeaderBroker(txnStateTopic, int32(i))
		if !ok {
			b.log.Warn("a transaction state partition has no leader; the group's offsets count as unstable", "group", grp, "state_partition", i)
			ans.all = true
			break
		}
		if lb.ID != b.cfg.NodeID {
			addrs[lb.KafkaAddr] = true
		}
	}
	for addr := range addrs {
		if ans.all {
			break
		}
		req := kmsg.NewPtrTxnOffsetCommitRequest()
		req.Group, req.Generation, req.MemberID, req.ProducerID, req.ProducerEpoch = grp, -1, txnPendingMember, -1, -1
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		kr, err := b.peerRequest(ctx, addr, req)
		cancel()
		if err != nil {
			b.log.Warn("cannot ask a transaction coordinator for a group's pending offsets; they count as unstable", "group", grp, "broker", addr, "err", err)
			ans.all = true
			break
		}
		for _, t := range kr.(*kmsg.TxnOffsetCommitResponse).Topics {
			for _, p := range t.Partitions {
				ans.keys[pendingKey{grp, t.Topic, p.Partition}] = true
			}
		}
	}
	ans.at = time.Now()
	b.txnc.fwdMu.Lock()
	if b.txnc.remote == nil {
		b.txnc.remote = map[string]remotePendingAnswer{}
	}
	for g, c := range b.txnc.remote { // keep the cache small
		if time.Since(c.at) >= remotePendingTTL {
			delete(b.txnc.remote, g)
		}
	}
	b.txnc.remote[grp] = ans
	b.txnc.fwdMu.Unlock()
	return ans
}

// remotePendingAnswer is an answer of remotePending.
type remotePendingAnswer struct {
	at   time.Time
	all  bool // a coordinator could not be asked: everything counts
	keys map[pendingKey]bool
}

// pendingForGroup answers txnPendingMember: the group partitions for
// which a coordinator here holds offsets of an open transaction.
func (b *Broker) pendingForGroup(grp string) []kmsg.TxnOffsetCommitResponseTopic {
	byTopic := map[string][]int32{}
	for _, c := range b.txnCoordinators() {
		for _, k := range c.pendingOf(grp) {
			byTopic[k.topic] = append(byTopic[k.topic], k.partition)
		}
	}
	var out []kmsg.TxnOffsetCommitResponseTopic
	for topic, parts := range byTopic {
		rt := kmsg.NewTxnOffsetCommitResponseTopic()
		rt.Topic = topic
		for _, p := range parts {
			rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
			rp.Partition = p
			rt.Partitions = append(rt.Partitions, rp)
		}
		out = append(out, rt)
	}
	return out
}

// setForwarded records (add) or forgets the offsets of a transactional
// id's TxnOffsetCommit passed on to its coordinator; forgetting with
// r.Topics empty forgets every partition of the group.
func (b *Broker) setForwarded(txnID, grp string, topics []kmsg.TxnOffsetCommitRequestTopic, add bool) {
	b.txnc.fwdMu.Lock()
	defer b.txnc.fwdMu.Unlock()
	if b.txnc.forwarded == nil {
		b.txnc.forwarded = map[pendingKey]map[string]struct{}{}
	}
	if !add {
		for k, ids := range b.txnc.forwarded {
			if k.group == grp {
				delete(ids, txnID)
				if len(ids) == 0 {
					delete(b.txnc.forwarded, k)
				}
			}
		}
		return
	}
	for _, t := range topics {
		for _, p := range t.Partitions {
			k := pendingKey{grp, t.Topic, p.Partition}
			if b.txnc.forwarded[k] == nil {
				b.txnc.forwarded[k] = map[string]struct{}{}
			}
			b.txnc.forwarded[k][txnID] = struct{}{}
		}
	}
}

// applyTxnOffsets is the group coordinator's side of txnApplyMember: the
// offsets of a committed transaction (none for an aborted one, which only
// clears what this broker forwarded).
func (b *Broker) applyTxnOffsets(r *kmsg.TxnOffsetCommitRequest) int16 {
	c, code := b.coordinatorFor(r.Group)
	if code != 0 {
		return code
	}
	if len(r.Topics) == 0 {
		b.setForwarded(r.TransactionalID, r.Group, nil, false)
		return 0
	}
	defer b.setForwarded(r.TransactionalID, r.Group, nil, false)
	now := time.Now().UnixMilli()
	var offs []group.CommittedOffset
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			meta := ""
			if p.Metadata != nil {
				meta = *p.Metadata
			}
			offs = append(offs, group.CommittedOffset{Topic: t.Topic, Partition: p.Partition, Offset: p.Offset,
				LeaderEpoch: p.LeaderEpoch, Metadata: meta, CommitTimeMillis: now})
		}
	}
	if err := c.CommitTxnOffsets(r.Group, offs); err != nil {
		b.log.Warn("cannot apply a committed transaction's offsets", "group", r.Group, "transactional_id", r.TransactionalID, "err", err)
		return kerr.CoordinatorNotAvailable.Code
	}
	return 0
}

// verifyTxnPartition checks, for a transactional produce on a replicated
// partition, that the partition is in the producer's ongoing transaction:
// at the local coordinator, or with a verify-only AddPartitionsToTxn (v4)
// at the coordinator broker.
func (b *Broker) verifyTxnPartition(ctx context.Context, txnID string, pid int64, epoch int16, tp txnTP) error {
	one := kmsg.NewPtrAddPartitionsToTxnRequest()
	one.Version = 3
	one.TransactionalID, one.ProducerID, one.ProducerEpoch = txnID, pid, epoch
	rt := kmsg.NewAddPartitionsToTxnRequestTopic()
	rt.Topic, rt.Partitions = tp.Topic, []int32{tp.Partition}
	one.Topics = append(one.Topics, rt)
	code := int16(0)
	if c, cc := b.txnCoordinatorFor(txnID); c != nil {
		for _, st := range c.verifyPartitions(one).Topics {
			for _, sp := range st.Partitions {
				code = sp.ErrorCode
			}
		}
	} else if cc != kerr.NotCoordinator.Code {
		code = cc
	} else {
		n := b.txnStatePartitions()
		lb, ok := b.partitionLeaderBroker(txnStateTopic, txnPartitionOf(txnID, n))
		if n == 0 || !ok {
			return fmt.Errorf("%w: the coordinator of transactional id %q is not known yet", kerr.NotEnoughReplicas, txnID)
		}
		req := kmsg.NewPtrAddPartitionsToTxnRequest()
		req.Version = 4
		tx := kmsg.NewAddPartitionsToTxnRequestTransaction()
		tx.TransactionalID, tx.ProducerID, tx.ProducerEpoch, tx.VerifyOnly = txnID, pid, epoch, true
		tt := kmsg.NewAddPartitionsToTxnRequestTransactionTopic()
		tt.Topic, tt.Partitions = tp.Topic, []int32{tp.Partition}
		tx.Topics = append(tx.Topics, tt)
		req.Transactions = append(req.Transactions, tx)
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		kr, err := b.peerRequest(rctx, lb.KafkaAddr, req)
		cancel()
		if err != nil {
			return fmt.Errorf("%w: cannot ask the transaction coordinator %s: %v", kerr.NotEnoughReplicas, lb.KafkaAddr, err)
		}
		resp := kr.(*kmsg.AddPartitionsToTxnResponse)
		if resp.ErrorCode != 0 {
			code = resp.ErrorCode
		}
		for _, t := range resp.Transactions {
			for _, st := range t.Topics {
				for _, sp := range st.Partitions {
					if sp.ErrorCode != 0 {
						code = sp.ErrorCode
					}
				}
			}
		}
	}
	switch code {
	case 0:
		return nil
	case kerr.NotCoordinator.Code, kerr.CoordinatorNotAvailable.Code, kerr.CoordinatorLoadInProgress.Code, kerr.ConcurrentTransactions.Code:
		// The coordinator is moving: the producer retries.
		return fmt.Errorf("%w: the transaction coordinator of %q is not ready (%v)", kerr.NotEnoughReplicas, txnID, kerr.ErrorForCode(code))
	}
	return fmt.Errorf("%w: %s-%d is not in the ongoing transaction of %q", kerr.ErrorForCode(code), tp.Topic, tp.Partition, txnID)
}
