package gossip

import (
	"slices"
	"time"

	"github.com/hashicorp/memberlist"
)

// delegate is the Pool's face towards memberlist (Delegate and
// EventDelegate). memberlist calls it from its own goroutines, some while
// holding its node lock, so nothing here calls back into memberlist.
type delegate struct {
	p *Pool
}

var (
	_ memberlist.Delegate      = (*delegate)(nil)
	_ memberlist.EventDelegate = (*delegate)(nil)
)

// NodeMeta returns the meta prepared by SetHolding, which never exceeds
// memberlist.MetaMaxSize (the only limit memberlist passes).
func (d *delegate) NodeMeta(limit int) []byte {
	d.p.mu.Lock()
	defer d.p.mu.Unlock()
	if len(d.p.mu.meta) > limit {
		return nil
	}
	return slices.Clone(d.p.mu.meta)
}

// NotifyMsg receives records. A gossiped record newer than the one held
// for its node is stored and queued again, so it spreads epidemically like
// memberlist's own alive messages; an old or duplicate one stops here. A
// record sent directly (small pools) went to every member already and is
// only stored.
func (d *delegate) NotifyMsg(b []byte) {
	if len(b) == 0 || (b[0] != msgRecord && b[0] != msgDirect) {
		return
	}
	rec, err := decodeRecord(b)
	if err != nil {
		d.p.log.Debug("gossip record dropped", "err", err)
		return
	}
	raw := slices.Clone(b)
	gossiped := raw[0] == msgRecord
	raw[0] = msgRecord // stored records are passed on as gossip
	d.p.storeRecord(rec, raw, gossiped)
}

func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	return d.p.queue.GetBroadcasts(overhead, limit)
}

// LocalState sends the records that memberlist's own push/pull, which
// carries every node's meta, cannot replace: this node's when its meta
// holds only the stamp, and the stored records that are newer than the
// meta of their node. A join sends the same.
func (d *delegate) LocalState(join bool) []byte {
	p := d.p
	p.mu.Lock()
	defer p.mu.Unlock()
	var recs [][]byte
	if p.mu.external {
		recs = append(recs, p.mu.record)
	}
	for name, r := range p.mu.records {
		m, ok := p.mu.members[name]
		if !ok {
			continue
		}
		if mt, err := decodeMeta(m.meta); err != nil || mt.external || r.rec.stamp.newer(mt.stamp) {
			recs = append(recs, r.raw)
		}
	}
	return encodeState(recs)
}

func (d *delegate) MergeRemoteState(buf []byte, join bool) {
	raws, err := decodeState(buf)
	if err != nil {
		d.p.log.Debug("gossip remote state dropped", "err", err)
		return
	}
	for _, raw := range raws {
		rec, err := decodeRecord(raw)
		if err != nil {
			d.p.log.Debug("gossip record dropped", "err", err)
			continue
		}
		d.p.storeRecord(rec, slices.Clone(raw), false)
	}
}

// NotifyJoin, NotifyUpdate and NotifyLeave copy memberlist's view of a node
// into the pool's member table. memberlist calls them one at a time, with
// its node lock held.
func (d *delegate) NotifyJoin(n *memberlist.Node)   { d.p.setMember(n, true) }
func (d *delegate) NotifyUpdate(n *memberlist.Node) { d.p.setMember(n, true) }

// NotifyLeave is called both for a node that left (closed its Pool) and
// for one declared dead after failed probes; memberlist does not tell the
// delegate which (Node.State is not maintained in the copy it passes). The
// node stays in views with Alive false until collect drops it.
func (d *delegate) NotifyLeave(n *memberlist.Node) { d.p.setMember(n, false) }

func (p *Pool) setMember(n *memberlist.Node, alive bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m, had := p.mu.members[n.Name]
	wasAlive := had && m.alive
	switch {
	case alive:
		p.mu.members[n.Name] = &member{
			node:  memberlist.Node{Name: n.Name, Addr: slices.Clone(n.Addr), Port: n.Port},
			addr:  n.Address(),
			meta:  slices.Clone(n.Meta),
			alive: true,
		}
	case had:
		m.alive, m.downAt = false, time.Now()
	}
	switch {
	case alive && !wasAlive:
		p.numNodes.Add(1)
	case !alive && wasAlive:
		p.numNodes.Add(-1)
	}
}

// storeRecord keeps rec if it is newer than what is held for its node and,
// when rebroadcast is set, queues it for further gossip. Records about this
// node are ignored: it is the authority on itself.
func (p *Pool) storeRecord(rec record, raw []byte, rebroadcast bool) {
	if rec.node == p.cfg.NodeName {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if cur, ok := p.mu.records[rec.node]; ok && !rec.stamp.newer(cur.rec.stamp) {
		return
	}
	p.mu.records[rec.node] = &storedRecord{rec: rec, raw: raw, received: time.Now()}
	if rebroadcast && len(raw) <= p.maxBroadcast {
		p.queue.QueueBroadcast(&recordBroadcast{node: rec.node, msg: raw})
	}
}

// recordBroadcast is one node's record in the queue; a newer record of the
// same node replaces it (NamedBroadcast).
type recordBroadcast struct {
	node string
	msg  []byte
}

var _ memberlist.NamedBroadcast = (*recordBroadcast)(nil)

func (b *recordBroadcast) Name() string    { return "record/" + b.node }
func (b *recordBroadcast) Message() []byte { return b.msg }
func (b *recordBroadcast) Finished()       {}
func (b *recordBroadcast) Invalidates(other memberlist.Broadcast) bool {
	o, ok := other.(memberlist.NamedBroadcast)
	return ok && o.Name() == b.Name()
}

// newRecordQueue returns the queue for record broadcasts.
func newRecordQueue(numNodes func() int, retransmitMult int) *memberlist.TransmitLimitedQueue {
	q := &memberlist.TransmitLimitedQueue{NumNodes: numNodes, RetransmitMult: retransmitMult}
	q.QueueBroadcast(anchor{})
	return q
}

// anchor is queued once and never sent: its message is larger than any
// packet. It works around a TransmitLimitedQueue bug in memberlist v0.7.0
// (hashicorp/memberlist#263): the queue resets its id counter whenever it
// becomes empty, also in the middle of replacing a named broadcast, and a
// later broadcast of the same length and transmit count then reuses an id
// still in the queue and silently replaces that broadcast in the btree.
// With the anchor in place the queue is never empty and ids are not
// reused. (memberlist's own queue, which carries the meta updates, has the
// same bug; there push/pull repairs a lost update.)
type anchor struct{}

var anchorMsg = make([]byte, 1<<16)

func (anchor) Invalidates(memberlist.Broadcast) bool { return false }
func (anchor) Message() []byte                       { return anchorMsg }
func (anchor) Finished()                             {}
func (anchor) UniqueBroadcast()                      {}
