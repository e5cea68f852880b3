package txn

// Transaction coordinators in cluster mode (see doc.go).

import (
	"context"
	"fmt"
	"hash/fnv"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/group"
	"github.com/simtel/simtel/broker/storage"
)

// stateTopicPartitions is the partition count of StateTopic in cluster
// mode: a few, so the coordinators spread over the brokers.
const stateTopicPartitions = 3

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
// for RequireStable OffsetFetches (PendingOffset).
const txnPendingMember = "\x00simtel-txn-pending"

// txnSlot is the coordinator of one state partition this broker leads.
type txnSlot struct {
	part   StatePartition
	term   uint64
	c      *coordinator
	cancel context.CancelFunc
	done   chan struct{} // closed when c.run has returned
}

func (s *txnSlot) valid(p StatePartition) bool {
	return s.part == p && p.IsLeader() && p.Term() == s.term
}

// clusterState is the broker's cluster-mode transaction state.
type clusterState struct {
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

	// wanted: a transactional request found no StateTopic; the
	// coordinator loop asks the controller to create it. wake gets a
	// token when it is set (Wakes).
	wanted atomic.Bool
	wake   chan struct{}

	once        sync.Once
	metrics     *metrics
	peersMu     sync.Mutex
	peers       map[string]*kgo.Client // by Kafka address
	peersClosed bool                   // the broker is stopping: no new clients
}

func (s *Coordinators) clusterMetrics() *metrics {
	cs := &s.cluster
	cs.once.Do(func() {
		cs.metrics = newMetrics(s.cfg.Registerer, func(states ...txnStatus) float64 {
			n := 0.0
			for _, c := range s.all() {
				n += c.count(states...)
			}
			return n
		})
	})
	return cs.metrics
}

// partitionOf maps a transactional id to its state partition.
func partitionOf(id string, n int) int32 {
	h := fnv.New32a()
	h.Write([]byte(id))
	return int32(h.Sum32() % uint32(n))
}

// statePartitions is the partition count of StateTopic in the cluster
// metadata, 0 before the controller created it.
func (s *Coordinators) statePartitions() int {
	return s.b.ClusterPartitions(StateTopic)
}

// Sync has the controller create StateTopic once a transactional request
// needed it, then opens and closes transaction coordinators to match the
// state partitions this broker leads. Closing runs in the background (the
// coordinator's loop may be waiting on a marker); closing tracks it. The
// broker calls it on its coordinators' tick. It reports whether the
// coordinators matched the leaderships already (nothing opened, closed or
// wanted): the broker then ticks slower.
func (s *Coordinators) Sync(ctx context.Context, closing *sync.WaitGroup) (settled bool) {
	s.ensureStateTopic(ctx)
	settled = !s.cluster.wanted.Load()
	parts := s.b.StatePartitions()
	s.cluster.mu.Lock()
	if s.cluster.slots == nil {
		s.cluster.slots = map[int32]*txnSlot{}
	}
	for i, sl := range s.cluster.slots {
		if int(i) < len(parts) && parts[i] != nil && sl.valid(parts[i]) {
			continue
		}
		delete(s.cluster.slots, i)
		settled = false
		closing.Add(1)
		go func() {
			defer closing.Done()
			s.closeSlot(i, sl)
		}()
	}
	s.cluster.mu.Unlock()
	for i, p := range parts {
		if p == nil || !p.IsLeader() {
			continue
		}
		s.cluster.mu.RLock()
		have := s.cluster.slots[int32(i)] != nil
		s.cluster.mu.RUnlock()
		if have {
			continue
		}
		settled = false
		sl, err := s.openSlot(ctx, int32(i), p)
		if err != nil {
			s.log.Error("cannot load the transactions of a state partition this broker leads; retrying", "partition", i, "err", err)
			continue
		}
		s.cluster.mu.Lock()
		s.cluster.slots[int32(i)] = sl
		s.cluster.mu.Unlock()
		s.log.Info("coordinating the transactions of a state partition", "partition", i, "term", sl.term)
	}
	return settled
}

// want asks the coordinator loop to have StateTopic created.
func (c *clusterState) want() {
	c.wanted.Store(true)
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Wakes receives a token when a transactional request needs the
// coordinator loop to run Sync soon (StateTopic is missing).
func (s *Coordinators) Wakes() <-chan struct{} { return s.cluster.wake }

// ensureStateTopic has the controller create StateTopic once a
// transactional request needed it (a cluster without transactions never
// gets it, as a single node), after __consumer_offsets exists (so it gets
// the same replication factor).
func (s *Coordinators) ensureStateTopic(ctx context.Context) {
	if !s.cluster.wanted.Load() {
		return
	}
	if s.b.ClusterPartitions(StateTopic) > 0 {
		s.cluster.wanted.Store(false)
		return
	}
	if s.b.ClusterPartitions(offsetsTopic) == 0 {
		return
	}
	if err := s.b.CreateTopic(ctx, StateTopic, stateTopicPartitions, maps.Clone(stateTopicConfigs)); err != nil {
		s.log.Warn("cannot create the transaction state topic; retrying", "topic", StateTopic, "err", err)
		return
	}
	s.log.Info("transaction state topic created", "topic", StateTopic, "partitions", stateTopicPartitions)
}

func (s *Coordinators) openSlot(ctx context.Context, i int32, p StatePartition) (*txnSlot, error) {
	term := p.Term()
	c := &coordinator{s: s, log: s.log.With("part", "txn", "state_partition", i, "term", term), now: time.Now,
		pending: map[pendingKey]map[string]struct{}{}, state: p, term: term, clustered: true, metrics: s.clusterMetrics()}
	c.mu.txns = map[string]*txnEntry{}
	if err := c.load(); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	sl := &txnSlot{part: p, term: term, c: c, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(sl.done)
		c.run(rctx)
	}()
	return sl, nil
}

func (s *Coordinators) closeSlot(i int32, sl *txnSlot) {
	sl.cancel()
	<-sl.done
	s.log.Info("stopped coordinating the transactions of a state partition", "partition", i, "term", sl.term)
}

// Close stops every coordinator of a cluster broker (shutdown) and the
// clients to the other brokers.
func (s *Coordinators) Close() {
	s.cluster.mu.Lock()
	slots := s.cluster.slots
	s.cluster.slots = map[int32]*txnSlot{}
	s.cluster.mu.Unlock()
	for i, sl := range slots {
		s.closeSlot(i, sl)
	}
	s.cluster.peersMu.Lock()
	for addr, cl := range s.cluster.peers {
		cl.Close()
		delete(s.cluster.peers, addr)
	}
	s.cluster.peersClosed = true
	s.cluster.peersMu.Unlock()
}

// peerRequest sends req to the broker at addr and returns its response.
func (s *Coordinators) peerRequest(ctx context.Context, addr string, req kmsg.Request) (kmsg.Response, error) {
	s.cluster.peersMu.Lock()
	if s.cluster.peersClosed {
		s.cluster.peersMu.Unlock()
		return nil, fmt.Errorf("%w: the broker is shutting down", kerr.CoordinatorNotAvailable)
	}
	if s.cluster.peers == nil {
		s.cluster.peers = map[string]*kgo.Client{}
	}
	cl := s.cluster.peers[addr]
	if cl == nil {
		var err error
		opts := []kgo.Opt{kgo.SeedBrokers(addr), kgo.ClientID("simtel-broker-" + strconv.Itoa(int(s.cfg.NodeID))),
			kgo.DialTimeout(5 * time.Second), kgo.RequestRetries(0)}
		if s.cfg.PeerTLS != nil {
			if tc := s.cfg.PeerTLS(); tc != nil {
				opts = append(opts, kgo.DialTLSConfig(tc))
			}
		}
		cl, err = kgo.NewClient(opts...)
		if err != nil {
			s.cluster.peersMu.Unlock()
			return nil, fmt.Errorf("cannot create a client to broker %s: %w", addr, err)
		}
		s.cluster.peers[addr] = cl
	}
	s.cluster.peersMu.Unlock()
	seeds := cl.SeedBrokers()
	if len(seeds) == 0 {
		return nil, fmt.Errorf("no client connection to broker %s", addr)
	}
	return seeds[0].Request(ctx, req)
}

// writeMarkers writes a marker for every partition of a transaction at
// the partition's leader, all at once (each is a raft round trip), and
// returns the first failure (the caller retries them all: a second marker
// is harmless).
func (s *Coordinators) writeMarkers(ctx context.Context, coordEpoch int32, pid int64, epoch int16, ct storage.ControlType, tps []txnTP) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(tps))
	defer wg.Wait()                // on an early return
	remote := map[string][]txnTP{} // by leader address
	for _, tp := range tps {
		if p := s.b.Partition(tp.Topic, tp.Partition); p != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- p.WriteMarker(ctx, pid, epoch, ct, coordEpoch)
			}()
			continue
		}
		if !s.b.PartitionKnown(tp.Topic, tp.Partition) {
			s.log.Warn("partition of a transaction is gone; no marker written", "producer_id", pid, "topic", tp.Topic, "partition", tp.Partition)
			continue
		}
		id, addr, ok := s.b.LeaderOf(tp.Topic, tp.Partition)
		if !ok || id == s.cfg.NodeID {
			return fmt.Errorf("%w: %s-%d has no ready leader yet", kerr.NotLeaderForPartition, tp.Topic, tp.Partition)
		}
		remote[addr] = append(remote[addr], tp)
	}
	for addr, tps := range remote {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.sendMarkers(ctx, addr, coordEpoch, pid, epoch, ct, tps)
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

// sendMarkers asks the broker at addr, the leader of tps, to write a
// producer's markers there.
func (s *Coordinators) sendMarkers(ctx context.Context, addr string, coordEpoch int32, pid int64, epoch int16, ct storage.ControlType, tps []txnTP) error {
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
	rctx, cancel := context.WithTimeout(ctx, OpTimeout)
	kr, err := s.peerRequest(rctx, addr, req)
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

// commitGroupOffsets writes a committed transaction's offsets to their
// groups: through the local group coordinator, or at the group's
// coordinator broker. A group with no offsets (an aborted transaction)
// only tells the group coordinator to forget the offsets it forwarded.
func (s *Coordinators) commitGroupOffsets(ctx context.Context, txnID string, pid int64, epoch int16, byGroup map[string][]group.CommittedOffset) error {
	if !s.cfg.Clustered {
		for g, offs := range byGroup {
			gc, _ := s.b.GroupCoordinator(g)
			if err := gc.CommitTxnOffsets(g, offs); err != nil {
				return fmt.Errorf("cannot commit the transaction's offsets of group %q: %w", g, err)
			}
		}
		return nil
	}
	for g, offs := range byGroup {
		if c, _ := s.b.GroupCoordinator(g); c != nil {
			if len(offs) == 0 {
				s.setForwarded(txnID, g, nil, false)
				continue
			}
			if err := c.CommitTxnOffsets(g, offs); err != nil {
				return fmt.Errorf("cannot commit the transaction's offsets of group %q: %w", g, err)
			}
			s.setForwarded(txnID, g, nil, false)
			continue
		}
		addr, err := s.b.GroupCoordinatorAddr(g)
		if err != nil {
			return err
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
		rctx, cancel := context.WithTimeout(ctx, OpTimeout)
		kr, err := s.peerRequest(rctx, addr, req)
		cancel()
		if err != nil {
			return fmt.Errorf("cannot send the transaction's offsets of group %q to broker %s: %w", g, addr, err)
		}
		for _, rt := range kr.(*kmsg.TxnOffsetCommitResponse).Topics {
			for _, rp := range rt.Partitions {
				if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
					return fmt.Errorf("broker %s cannot commit the transaction's offset of group %q for %s-%d: %w", addr, g, rt.Topic, rp.Partition, err)
				}
			}
		}
	}
	return nil
}

// recentGroupCoordinator reports whether this broker took over grp's
// offsets partition less than maxTxnTimeout ago: a transaction opened
// under the previous coordinator may still hold offsets for it.
func (s *Coordinators) recentGroupCoordinator(grp string) bool {
	since, ok := s.b.GroupCoordinatorSince(grp)
	return ok && time.Since(since) < maxTxnTimeout
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
func (s *Coordinators) remotePending(grp string) remotePendingAnswer {
	s.cluster.fwdMu.Lock()
	if c, ok := s.cluster.remote[grp]; ok && time.Since(c.at) < remotePendingTTL {
		s.cluster.fwdMu.Unlock()
		return c
	}
	s.cluster.fwdMu.Unlock()

	ans := remotePendingAnswer{keys: map[pendingKey]bool{}}
	addrs := map[string]bool{}
	for i := range s.statePartitions() {
		id, addr, ok := s.b.LeaderOf(StateTopic, int32(i))
		if !ok {
			s.log.Warn("a transaction state partition has no leader; the group's offsets count as unstable", "group", grp, "state_partition", i)
			ans.all = true
			break
		}
		if id != s.cfg.NodeID {
			addrs[addr] = true
		}
	}
	for addr := range addrs {
		if ans.all {
			break
		}
		req := kmsg.NewPtrTxnOffsetCommitRequest()
		req.Group, req.Generation, req.MemberID, req.ProducerID, req.ProducerEpoch = grp, -1, txnPendingMember, -1, -1
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		kr, err := s.peerRequest(ctx, addr, req)
		cancel()
		if err != nil {
			s.log.Warn("cannot ask a transaction coordinator for a group's pending offsets; they count as unstable", "group", grp, "broker", addr, "err", err)
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
	s.cluster.fwdMu.Lock()
	if s.cluster.remote == nil {
		s.cluster.remote = map[string]remotePendingAnswer{}
	}
	for g, c := range s.cluster.remote { // keep the cache small
		if time.Since(c.at) >= remotePendingTTL {
			delete(s.cluster.remote, g)
		}
	}
	s.cluster.remote[grp] = ans
	s.cluster.fwdMu.Unlock()
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
func (s *Coordinators) pendingForGroup(grp string) []kmsg.TxnOffsetCommitResponseTopic {
	byTopic := map[string][]int32{}
	for _, c := range s.all() {
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
func (s *Coordinators) setForwarded(txnID, grp string, topics []kmsg.TxnOffsetCommitRequestTopic, add bool) {
	s.cluster.fwdMu.Lock()
	defer s.cluster.fwdMu.Unlock()
	if s.cluster.forwarded == nil {
		s.cluster.forwarded = map[pendingKey]map[string]struct{}{}
	}
	if !add {
		for k, ids := range s.cluster.forwarded {
			if k.group == grp {
				delete(ids, txnID)
				if len(ids) == 0 {
					delete(s.cluster.forwarded, k)
				}
			}
		}
		return
	}
	for _, t := range topics {
		for _, p := range t.Partitions {
			k := pendingKey{grp, t.Topic, p.Partition}
			if s.cluster.forwarded[k] == nil {
				s.cluster.forwarded[k] = map[string]struct{}{}
			}
			s.cluster.forwarded[k][txnID] = struct{}{}
		}
	}
}

// applyOffsets is the group coordinator's side of txnApplyMember: the
// offsets of a committed transaction (none for an aborted one, which only
// clears what this broker forwarded).
func (s *Coordinators) applyOffsets(r *kmsg.TxnOffsetCommitRequest) int16 {
	c, code := s.b.GroupCoordinator(r.Group)
	if code != 0 {
		return code
	}
	if len(r.Topics) == 0 {
		s.setForwarded(r.TransactionalID, r.Group, nil, false)
		return 0
	}
	defer s.setForwarded(r.TransactionalID, r.Group, nil, false)
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
		s.log.Warn("cannot apply a committed transaction's offsets", "group", r.Group, "transactional_id", r.TransactionalID, "err", err)
		return kerr.CoordinatorNotAvailable.Code
	}
	return 0
}
