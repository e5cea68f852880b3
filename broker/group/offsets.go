package group

import (
	"cmp"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// OffsetCommit handles an OffsetCommit request (v0-v9). It returns after
// the accepted offsets are durable in the Store.
//
// Race walk-through: the request is validated under mu, the partitions it
// writes are marked in flight, mu is released for the store call, and the
// offsets are applied in memory under mu once the store has them. A second
// commit (or a delete) of the same partition arriving meanwhile waits for
// the first to finish before calling the store, so the store and memory
// see writes of a partition in the same order: after a restart the store
// holds exactly the offset OffsetFetch returned before it. Commits of
// other partitions, and of other groups, go to the store concurrently and
// share its fsyncs.
func (c *Coordinator) OffsetCommit(req *kmsg.OffsetCommitRequest) *kmsg.OffsetCommitResponse {
	resp := offsetCommitResponse(req, 0)
	setAll := func(e *kerr.Error) *kmsg.OffsetCommitResponse {
		for i := range resp.Topics {
			for j := range resp.Topics[i].Partitions {
				resp.Topics[i].Partitions[j].ErrorCode = e.Code
			}
		}
		return resp
	}
	if req.Group == "" {
		return setAll(kerr.InvalidGroupID)
	}
	// v0 has neither generation nor member id: a simple commit.
	generation, memberID := req.Generation, req.MemberID
	if req.Version == 0 {
		generation, memberID = -1, ""
	}
	var inst *string
	if req.Version >= 7 {
		inst = req.InstanceID
	}

	// Per-partition checks first, outside mu: TopicPartitions calls into
	// the broker's metadata, which must never run under our lock.
	type item struct {
		code *int16
		off  CommittedOffset
	}
	var items []item
	exists := c.partitionCheck()
	now := c.now().UnixMilli()
	for i, t := range req.Topics {
		for j, p := range t.Partitions {
			rp := &resp.Topics[i].Partitions[j]
			meta := ""
			if p.Metadata != nil {
				meta = *p.Metadata
			}
			if len(meta) > maxOffsetMetadataBytes {
				rp.ErrorCode = kerr.OffsetMetadataTooLarge.Code
				continue
			}
			if !exists(t.Topic, p.Partition) {
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				continue
			}
			epoch := int32(-1)
			if req.Version >= 6 {
				epoch = p.LeaderEpoch
			}
			items = append(items, item{code: &rp.ErrorCode, off: CommittedOffset{
				Topic:            strings.Clone(t.Topic),
				Partition:        p.Partition,
				Offset:           p.Offset,
				LeaderEpoch:      epoch,
				Metadata:         strings.Clone(meta),
				CommitTimeMillis: now,
			}})
		}
	}
	tps := make([]TopicPartition, len(items))
	offs := make([]CommittedOffset, len(items))
	for i, it := range items {
		tps[i] = TopicPartition{it.off.Topic, it.off.Partition}
		offs[i] = it.off
	}

	c.mu.Lock()
	var g *group
	for {
		if c.mu.closed {
			c.mu.Unlock()
			return setAll(kerr.CoordinatorNotAvailable)
		}
		g = c.mu.groups[req.Group]
		if g == nil {
			if generation >= 0 {
				// A member commit to a group we do not know: its
				// generation is gone (Kafka answers the same).
				c.mu.Unlock()
				return setAll(kerr.IllegalGeneration)
			}
			// A simple commit creates an Empty group that only
			// holds offsets.
			g = newGroup(strings.Clone(req.Group))
			c.mu.groups[g.name] = g
		}
		if e := c.validateCommitLocked(g, generation, memberID, inst); e != nil {
			if g.pristineLocked() {
				delete(c.mu.groups, g.name)
			}
			c.mu.Unlock()
			return setAll(e)
		}
		if !g.persistConflictLocked(tps, false) {
			break
		}
		if !c.waitPersistLocked(g) {
			c.mu.Unlock()
			return setAll(kerr.CoordinatorNotAvailable)
		}
	}
	if m := g.members[memberID]; m != nil {
		m.lastSeen = c.now()
	}
	if len(items) == 0 {
		if g.pristineLocked() {
			delete(c.mu.groups, g.name)
		}
		c.mu.Unlock()
		return resp
	}
	if err := c.commitOffsetsLocked(g, tps, offs); err != nil {
		c.logger.Error("commit offsets to store failed", "group", req.Group, "partitions", len(offs), "err", err)
		for _, it := range items {
			*it.code = kerr.CoordinatorNotAvailable.Code
		}
	}
	return resp
}

// offsetCommitResponse returns the response to req with every partition
// in it answered code.
func offsetCommitResponse(req *kmsg.OffsetCommitRequest, code int16) *kmsg.OffsetCommitResponse {
	resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition = p.Partition
			rp.ErrorCode = code
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// partitionCheck returns a function that tells whether a partition of a
// topic exists, asking Config.TopicPartitions once per topic (every
// partition exists when it is not set). Called outside mu:
// TopicPartitions calls into the broker's metadata.
func (c *Coordinator) partitionCheck() func(topic string, partition int32) bool {
	if c.topicPartitions == nil {
		return func(string, int32) bool { return true }
	}
	known := make(map[string]int32)
	return func(topic string, partition int32) bool {
		n, ok := known[topic]
		if !ok {
			if n, ok = c.topicPartitions(topic); !ok {
				n = -1
			}
			known[topic] = n
		}
		return partition >= 0 && partition < n
	}
}

// validateCommitLocked mirrors Kafka's ClassicGroup.validateOffsetCommit.
func (c *Coordinator) validateCommitLocked(g *group, generation int32, memberID string, inst *string) *kerr.Error {
	if g.state == stateDead {
		return kerr.CoordinatorNotAvailable
	}
	if generation < 0 && g.state == stateEmpty {
		// Admin tools and consumers that assign partitions themselves
		// store offsets in a group nobody is a member of.
		return nil
	}
	if generation >= 0 || memberID != "" || inst != nil {
		if inst != nil {
			cur, ok := g.static[*inst]
			if !ok {
				return kerr.UnknownMemberID
			}
			if cur != memberID {
				return kerr.FencedInstanceID
			}
		} else if g.members[memberID] == nil {
			return kerr.UnknownMemberID
		}
		if generation != g.generation {
			return kerr.IllegalGeneration
		}
	} else if g.state != stateEmpty {
		// A simple commit to a group with members would race with
		// their commits.
		return kerr.UnknownMemberID
	}
	if g.state == stateCompletingRebalance {
		// The member has the new generation but not its assignment
		// yet: it cannot own what it commits.
		return kerr.RebalanceInProgress
	}
	return nil
}

// OffsetFetch handles an OffsetFetch request: v0-v7 for one group, v8+ for
// many. Null topics (v2+) means all of the group's offsets; partitions
// without a committed offset get offset -1. With RequireStable (v7+) a
// partition for which an open transaction holds an offset answers
// UNSTABLE_OFFSET_COMMIT, so the client retries once it has ended.
func (c *Coordinator) OffsetFetch(req *kmsg.OffsetFetchRequest) *kmsg.OffsetFetchResponse {
	resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
	if req.Version >= 8 {
		for _, rg := range req.Groups {
			var topics []fetchTopic
			if rg.Topics != nil {
				topics = make([]fetchTopic, 0, len(rg.Topics))
				for _, t := range rg.Topics {
					topics = append(topics, fetchTopic{topic: t.Topic, partitions: t.Partitions})
				}
			}
			code, fetched := c.fetchOffsets(rg.Group, topics, rg.Topics == nil, req.Version)
			sg := kmsg.NewOffsetFetchResponseGroup()
			sg.Group = rg.Group
			sg.ErrorCode = code
			for _, t := range c.fetchedTopics(rg.Group, fetched, req.RequireStable, 0) {
				st := kmsg.NewOffsetFetchResponseGroupTopic()
				st.Topic = t.Topic
				for _, p := range t.Partitions {
					// The v8+ partition has the same fields as the v0-v7 one.
					st.Partitions = append(st.Partitions, kmsg.OffsetFetchResponseGroupTopicPartition(p))
				}
				sg.Topics = append(sg.Topics, st)
			}
			resp.Groups = append(resp.Groups, sg)
		}
		return resp
	}

	topics := make([]fetchTopic, 0, len(req.Topics))
	for _, t := range req.Topics {
		topics = append(topics, fetchTopic{topic: t.Topic, partitions: t.Partitions})
	}
	all := req.Topics == nil && req.Version >= 2
	code, fetched := c.fetchOffsets(req.Group, topics, all, req.Version)
	// v0/v1 have no top-level error: report it per partition, as Kafka
	// does.
	partCode := code
	if req.Version >= 2 {
		resp.ErrorCode, partCode = code, 0
	}
	resp.Topics = c.fetchedTopics(req.Group, fetched, req.Version >= 7 && req.RequireStable, partCode)
	return resp
}

// fetchedTopics is the OffsetFetch answer (v0-v7 form) of group's fetched
// offsets: each partition with code, or UNSTABLE_OFFSET_COMMIT when stable
// is asked for and an open transaction holds an offset of it.
func (c *Coordinator) fetchedTopics(group string, fetched []fetchedTopic, stable bool, code int16) []kmsg.OffsetFetchResponseTopic {
	var out []kmsg.OffsetFetchResponseTopic
	for _, ft := range fetched {
		st := kmsg.NewOffsetFetchResponseTopic()
		st.Topic = ft.topic
		for _, fp := range ft.partitions {
			sp := fetchedPartition(fp)
			sp.ErrorCode = code
			if stable && c.unstable(group, ft.topic, fp.Partition) {
				sp.ErrorCode = kerr.UnstableOffsetCommit.Code
			}
			st.Partitions = append(st.Partitions, sp)
		}
		out = append(out, st)
	}
	return out
}

// fetchTopic names the partitions of one topic to fetch.
type fetchTopic struct {
	topic      string
	partitions []int32
}

type fetchedTopic struct {
	topic      string
	partitions []CommittedOffset
}

// fetchedPartition is the OffsetFetch answer for one committed offset.
func fetchedPartition(o CommittedOffset) kmsg.OffsetFetchResponseTopicPartition {
	sp := kmsg.NewOffsetFetchResponseTopicPartition()
	sp.Partition = o.Partition
	sp.Offset = o.Offset
	sp.LeaderEpoch = o.LeaderEpoch
	sp.Metadata = kmsg.StringPtr(o.Metadata)
	return sp
}

// fetchOffsets returns a group-level error code and the offsets asked for
// (all of the group's if all is set). On error the requested partitions
// are still listed, with offset -1, so that v0/v1 can carry the error per
// partition.
func (c *Coordinator) fetchOffsets(name string, topics []fetchTopic, all bool, version int16) (int16, []fetchedTopic) {
	unknown := func(t string, p int32) CommittedOffset {
		return CommittedOffset{Topic: t, Partition: p, Offset: -1, LeaderEpoch: -1}
	}
	requested := func() []fetchedTopic {
		var out []fetchedTopic
		for _, t := range topics {
			ft := fetchedTopic{topic: t.topic}
			for _, p := range t.partitions {
				ft.partitions = append(ft.partitions, unknown(t.topic, p))
			}
			out = append(out, ft)
		}
		return out
	}
	g, code := c.lockGroup(name)
	if code != 0 {
		return code, requested()
	}
	defer c.mu.Unlock()
	var out []fetchedTopic
	if all {
		if g == nil {
			return 0, nil
		}
		byTopic := make(map[string][]CommittedOffset)
		for _, o := range g.offsets {
			byTopic[o.Topic] = append(byTopic[o.Topic], o)
		}
		for t, os := range byTopic {
			slices.SortFunc(os, func(a, b CommittedOffset) int { return cmp.Compare(a.Partition, b.Partition) })
			out = append(out, fetchedTopic{topic: t, partitions: os})
		}
		slices.SortFunc(out, func(a, b fetchedTopic) int { return cmp.Compare(a.topic, b.topic) })
	} else {
		out = requested()
		if g != nil {
			for i := range out {
				for j := range out[i].partitions {
					p := &out[i].partitions[j]
					if o, ok := g.offsets[TopicPartition{p.Topic, p.Partition}]; ok {
						*p = o
					}
				}
			}
		}
	}
	if version < 5 {
		for i := range out {
			for j := range out[i].partitions {
				out[i].partitions[j].LeaderEpoch = -1
			}
		}
	}
	return 0, out
}

// offsetDeleteTopics answers every partition of topics with code, in
// their order.
func offsetDeleteTopics(topics []kmsg.OffsetDeleteRequestTopic, code int16) []kmsg.OffsetDeleteResponseTopic {
	var out []kmsg.OffsetDeleteResponseTopic
	for _, t := range topics {
		rt := kmsg.NewOffsetDeleteResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetDeleteResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, code
			rt.Partitions = append(rt.Partitions, rp)
		}
		out = append(out, rt)
	}
	return out
}

// OffsetDelete handles an OffsetDelete request (v0): an Empty group may
// drop any offsets; a consumer group with members only those of topics
// none of its members subscribe to.
func (c *Coordinator) OffsetDelete(req *kmsg.OffsetDeleteRequest) *kmsg.OffsetDeleteResponse {
	resp := req.ResponseKind().(*kmsg.OffsetDeleteResponse)
	if req.Group == "" {
		resp.ErrorCode = kerr.InvalidGroupID.Code
		return resp
	}
	type item struct {
		code *int16
		tp   TopicPartition
	}
	var items []item
	exists := c.partitionCheck()
	resp.Topics = offsetDeleteTopics(req.Topics, 0)
	for i, t := range req.Topics {
		for j, p := range t.Partitions {
			rp := &resp.Topics[i].Partitions[j]
			if !exists(t.Topic, p.Partition) {
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				continue
			}
			items = append(items, item{code: &rp.ErrorCode, tp: TopicPartition{strings.Clone(t.Topic), p.Partition}})
		}
	}

	c.mu.Lock()
	var g *group
	var del []TopicPartition
	for {
		if c.mu.closed {
			c.mu.Unlock()
			resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
			return resp
		}
		g = c.mu.groups[req.Group]
		if g == nil || g.state == stateDead {
			c.mu.Unlock()
			resp.ErrorCode = kerr.GroupIDNotFound.Code
			return resp
		}
		var subscribed map[string]bool
		allSubscribed := false
		if g.state != stateEmpty {
			if g.protocolType != "consumer" {
				c.mu.Unlock()
				resp.ErrorCode = kerr.NonEmptyGroup.Code
				return resp
			}
			subscribed, allSubscribed = g.subscribedTopicsLocked()
		}
		del = del[:0]
		for _, it := range items {
			if allSubscribed || subscribed[it.tp.Topic] {
				*it.code = kerr.GroupSubscribedToTopic.Code
				continue
			}
			*it.code = 0
			if _, ok := g.offsets[it.tp]; ok {
				del = append(del, it.tp)
			}
		}
		if !g.persistConflictLocked(del, false) {
			break
		}
		if !c.waitPersistLocked(g) {
			c.mu.Unlock()
			resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
			return resp
		}
	}
	if len(del) == 0 {
		c.mu.Unlock()
		return resp
	}
	if err := c.deleteOffsetsLocked(g, del); err != nil {
		c.logger.Error("delete offsets from store failed", "group", req.Group, "err", err)
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
	}
	return resp
}

// subscribedTopicsLocked returns the topics g's members subscribe to, read
// from their consumer protocol metadata. Metadata that does not parse
// makes every topic count as subscribed (all is true): refusing a delete
// is safe, losing the offsets of a live consumer is not.
func (g *group) subscribedTopicsLocked() (topics map[string]bool, all bool) {
	topics = make(map[string]bool)
	for _, m := range g.members {
		for _, p := range m.protocols {
			var md kmsg.ConsumerMemberMetadata
			if err := md.ReadFrom(p.metadata); err != nil {
				return nil, true
			}
			for _, t := range md.Topics {
				topics[t] = true
			}
		}
	}
	return topics, false
}

// DeleteTopicOffsets drops every group's committed offsets of a deleted
// topic. The broker calls it after removing the topic from its metadata,
// so commits racing with it fail TopicPartitions validation; commits of
// the topic already in flight are waited for, then deleted too.
func (c *Coordinator) DeleteTopicOffsets(topic string) {
	c.mu.Lock()
	var names []string
	for name, g := range c.mu.groups {
		if g.hasTopicLocked(topic) {
			names = append(names, name)
		}
	}
	c.mu.Unlock()
	slices.Sort(names)
	for _, name := range names {
		if err := c.deleteTopicOffsetsOf(name, topic); err != nil {
			c.logger.Error("delete offsets of deleted topic failed", "group", name, "topic", topic, "err", err)
		}
	}
}

func (g *group) hasTopicLocked(topic string) bool {
	for tp := range g.offsets {
		if tp.Topic == topic {
			return true
		}
	}
	for tp := range g.inflight {
		if tp.Topic == topic {
			return true
		}
	}
	return false
}

func (c *Coordinator) deleteTopicOffsetsOf(name, topic string) error {
	c.mu.Lock()
	var g *group
	var del []TopicPartition
	for {
		if c.mu.closed {
			c.mu.Unlock()
			return errCoordinatorClosed
		}
		g = c.mu.groups[name]
		if g == nil || g.state == stateDead {
			c.mu.Unlock()
			return nil
		}
		// Wait out in-flight writes of any partition of the topic,
		// not only those already committed: a first commit of a new
		// partition must not land after our delete.
		busy := g.inflightAll
		for tp := range g.inflight {
			busy = busy || tp.Topic == topic
		}
		if !busy {
			break
		}
		if !c.waitPersistLocked(g) {
			c.mu.Unlock()
			return errCoordinatorClosed
		}
	}
	del = del[:0]
	for tp := range g.offsets {
		if tp.Topic == topic {
			del = append(del, tp)
		}
	}
	if len(del) == 0 {
		c.mu.Unlock()
		return nil
	}
	return c.deleteOffsetsLocked(g, del)
}

// Lag is one committed offset of a group with its lag, for the broker's
// simtel_broker_group_lag gauge.
type Lag struct {
	Group     string
	Topic     string
	Partition int32
	Committed int64
	// Lag is the end offset minus Committed (never negative), or -1 if
	// the end offset is unknown (no EndOffset configured, or the
	// partition is gone).
	Lag int64
}

// Lags returns every committed offset with its lag, sorted by group,
// topic and partition.
func (c *Coordinator) Lags() []Lag {
	var lags []Lag
	c.mu.Lock()
	for name, g := range c.mu.groups {
		for _, o := range g.offsets {
			lags = append(lags, Lag{Group: name, Topic: o.Topic, Partition: o.Partition, Committed: o.Offset, Lag: -1})
		}
	}
	c.mu.Unlock()
	// EndOffset calls into the storage layer: never under mu.
	if c.endOffset != nil {
		for i := range lags {
			l := &lags[i]
			if end, ok := c.endOffset(l.Topic, l.Partition); ok && l.Committed >= 0 {
				l.Lag = max(end-l.Committed, 0)
			}
		}
	}
	slices.SortFunc(lags, func(a, b Lag) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return lags
}

// Committed returns the offset a group committed for a partition, for
// retention holds; ok is false when the group or the commit is unknown.
func (c *Coordinator) Committed(group, topic string, partition int32) (offset int64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.mu.groups[group]
	if g == nil {
		return 0, false
	}
	o, ok := g.offsets[TopicPartition{topic, partition}]
	if !ok {
		return 0, false
	}
	return o.Offset, true
}

// commitOffsetsLocked stores offs (one for each of tps) as g's committed
// offsets. The store is written with c.mu released and tps marked in
// flight, so a commit of the same partitions waits for this one and
// readers never see an offset the store has not taken. Called with c.mu
// held; returns with it released.
func (c *Coordinator) commitOffsetsLocked(g *group, tps []TopicPartition, offs []CommittedOffset) error {
	return c.persistLocked(g, tps, func() error { return c.store.Commit(g.name, offs) }, func() {
		for i, tp := range tps {
			g.offsets[tp] = offs[i]
		}
	}, true)
}

// deleteOffsetsLocked deletes g's committed offsets of tps, as
// commitOffsetsLocked stores them.
func (c *Coordinator) deleteOffsetsLocked(g *group, tps []TopicPartition) error {
	return c.persistLocked(g, tps, func() error { return c.store.DeleteOffsets(g.name, tps) }, func() {
		for _, tp := range tps {
			delete(g.offsets, tp)
		}
	}, false)
}

// persistLocked runs write with c.mu released and tps of g in flight,
// then applies the change to memory if write succeeded. g is still the
// group in the map afterwards: only DeleteGroups removes groups, and it
// waits for in-flight writes first. dropIfPristine removes a group that
// holds nothing after a failed write (a commit that created it).
func (c *Coordinator) persistLocked(g *group, tps []TopicPartition, write func() error, apply func(), dropIfPristine bool) error {
	for _, tp := range tps {
		g.inflight[tp] = struct{}{}
	}
	c.ops.Add(1)
	c.mu.Unlock()

	err := write()

	c.mu.Lock()
	if err == nil {
		apply()
	}
	g.persistReleaseLocked(tps, false)
	if err != nil && dropIfPristine && g.pristineLocked() {
		delete(c.mu.groups, g.name)
	}
	c.mu.Unlock()
	c.ops.Done()
	return err
}
