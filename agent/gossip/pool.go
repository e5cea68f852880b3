package gossip

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Holding is what one node holds of one policy.
type Holding struct {
	// Version is the policy version; 0 means none.
	Version int64 `json:"version"`
	// Since is when this node got Version (its verified copy landed in
	// the local cache). It travels with millisecond precision.
	Since time.Time `json:"since"`
}

// Pool is this node's membership in the gossip pool of a run. All methods
// are safe for concurrent use.
type Pool struct {
	cfg   Config
	log   *slog.Logger
	addr  string // advertised host:port, fixed at Start
	ml    *memberlist.Memberlist
	queue *memberlist.TransmitLimitedQueue // record broadcasts
	boot  uint64                           // start time, unix ns; orders records across restarts

	// numNodes counts live members for the queue's retransmit limit; the
	// queue asks while holding its lock, so it must not take mu.
	numNodes atomic.Int64

	maxBroadcast int           // largest record sent by UDP gossip
	backoffMin   time.Duration // join retry
	backoffMax   time.Duration
	leaveTimeout time.Duration
	gcEvery      time.Duration // how often failed members and stale records are dropped
	recordGrace  time.Duration // how long a record of a non-member is kept
	deadKeep     time.Duration // how long a departed member stays in views

	advertise chan struct{} // capacity 1: "meta changed, call UpdateNode"
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error

	// Lock order: memberlist's internal locks, then mu, then the queue's
	// lock. memberlist calls the delegate (which takes mu) while holding
	// its own locks, so mu is never held while calling into memberlist.
	mu struct {
		sync.Mutex
		holdings map[string]Holding // this node's, by policy name
		names    map[uint64]string  // policy key -> name, to catch hash collisions
		seq      uint64             // bumped on every change of holdings
		meta     []byte             // what NodeMeta returns
		external bool               // holdings do not fit the meta, which holds only the stamp
		record   []byte             // own encoded record
		warned   bool               // logged that the record is too big for UDP
		records  map[string]*storedRecord
		// members mirrors memberlist's node table, copied in the event
		// callbacks (under memberlist's lock): the *Node values memberlist
		// hands out are updated in place, so reading them later races.
		members map[string]*member
	}
}

type member struct {
	node   memberlist.Node // Name, Addr, Port only: for SendReliable
	addr   string
	meta   []byte
	alive  bool      // false once it left or was declared dead
	downAt time.Time // when it went away
}

type storedRecord struct {
	rec      record
	raw      []byte
	received time.Time
}

// Start creates the node's memberlist on cfg.Bind and returns. Joining the
// seeds happens in the background (see Config.Join); Close stops it.
func Start(cfg Config) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Pool{
		cfg:       cfg,
		log:       cfg.Logger,
		boot:      uint64(time.Now().UnixNano()),
		advertise: make(chan struct{}, 1),
	}
	p.mu.holdings = make(map[string]Holding)
	p.mu.names = make(map[uint64]string)
	p.mu.records = make(map[string]*storedRecord)
	p.mu.members = make(map[string]*member)
	p.mu.meta = appendMetaFields(encodeInlineMeta(stamp{boot: p.boot}, nil), cfg.Relay)

	d := &delegate{p: p}
	mc, err := cfg.memberlistConfig(d)
	if err != nil {
		return nil, err
	}
	p.queue = newRecordQueue(func() int { return max(int(p.numNodes.Load()), 1) }, mc.RetransmitMult)
	// The label header (2 bytes + label) and memberlist's compound and
	// user-message framing share the packet with the record.
	p.maxBroadcast = mc.UDPBufferSize - 64 - len(mc.Label)
	p.leaveTimeout = 5 * time.Second
	p.backoffMin, p.backoffMax = time.Second, 30*time.Second
	if cfg.Fast {
		p.leaveTimeout = time.Second
		p.backoffMin, p.backoffMax = 50*time.Millisecond, time.Second
	}
	p.gcEvery = min(mc.PushPullInterval, mc.GossipToTheDeadTime) / 2
	p.recordGrace = 2 * mc.PushPullInterval
	p.deadKeep = mc.GossipToTheDeadTime

	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("cannot start gossip on %s: %w", cfg.Bind, err)
	}
	p.ml = ml
	p.mu.Lock()
	if self, ok := p.mu.members[cfg.NodeName]; ok { // NotifyJoin(self) ran in Create
		p.addr = self.addr
	}
	p.mu.Unlock()

	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	p.wg.Add(1)
	go p.advertiseLoop(ctx)
	seeds := p.seeds()
	if len(seeds) > 0 {
		p.wg.Add(1)
		go p.joinLoop(ctx, seeds)
	}
	p.log.Info("gossip started", "node", cfg.NodeName, "addr", p.Addr(), "cluster", cfg.Cluster, "seeds", seeds)
	return p, nil
}

// Addr returns the host:port other nodes reach this node at (with the
// real port when Bind asked for port 0).
func (p *Pool) Addr() string {
	return p.addr
}

// Members returns the number of live members this node knows, itself
// included (the nodes that View counts).
func (p *Pool) Members() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, m := range p.mu.members {
		if m.alive {
			n++
		}
	}
	return n
}

// SetHolding sets this node's advertised holding of policy and pushes it
// to the pool promptly. A Version <= 0 withdraws the policy. A zero Since
// means now. Setting the same holding again is a no-op.
func (p *Pool) SetHolding(policy string, h Holding) {
	if h.Version > 0 && h.Since.IsZero() {
		h.Since = time.Now()
	}
	// The wire carries milliseconds; truncate here too so this node's own
	// view equals what its peers see.
	h.Since = fromMillis(toMillis(h.Since))

	p.mu.Lock()
	defer p.mu.Unlock()
	cur, had := p.mu.holdings[policy]
	key := policyKey(policy)
	switch {
	case h.Version <= 0 && !had:
		return
	case h.Version <= 0:
		delete(p.mu.holdings, policy)
		delete(p.mu.names, key)
	case had && cur.Version == h.Version && cur.Since.Equal(h.Since):
		return
	default:
		if other, ok := p.mu.names[key]; ok && other != policy {
			p.log.Error("policy names collide in gossip, not advertising", "policy", policy, "other", other)
			return
		}
		p.mu.holdings[policy] = h
		p.mu.names[key] = policy
	}
	p.mu.seq++
	p.rebuildLocked()
	select {
	case p.advertise <- struct{}{}:
	default: // an update is already pending; it will read the newest meta
	}
}

// rebuildLocked re-encodes this node's meta and record after a change of
// holdings. The meta holds the holdings inline when they fit
// memberlist.MetaMaxSize (about 30 policies, whatever their names), else
// only the stamp, and then the record is queued for broadcast. It is
// queued under mu so that two concurrent changes cannot queue their
// records out of order.
func (p *Pool) rebuildLocked() {
	es := make([]entry, 0, len(p.mu.holdings))
	for name, h := range p.mu.holdings {
		es = append(es, entry{key: policyKey(name), version: h.Version, sinceMs: toMillis(h.Since)})
	}
	sortEntries(es)
	st := stamp{boot: p.boot, seq: p.mu.seq}
	p.mu.record = encodeRecord(record{node: p.cfg.NodeName, stamp: st, entries: es})
	if m := appendMetaFields(encodeInlineMeta(st, es), p.cfg.Relay); len(m) <= memberlist.MetaMaxSize {
		p.mu.meta, p.mu.external = m, false
		return
	}
	p.mu.meta, p.mu.external = appendMetaFields(encodeExternalMeta(st), p.cfg.Relay), true
	if len(p.mu.record) > p.maxBroadcast {
		if !p.mu.warned {
			p.mu.warned = true
			p.log.Warn("gossip holdings too large for a broadcast, relying on push-pull",
				"policies", len(es), "bytes", len(p.mu.record), "limit", p.maxBroadcast)
		}
		return
	}
	p.queue.QueueBroadcast(&recordBroadcast{node: p.cfg.NodeName, msg: p.mu.record})
}

// Close leaves the pool (other nodes see this node as left at once rather
// than after failure detection), shuts memberlist down and waits for the
// pool's goroutines. A leave that times out is logged, not returned.
func (p *Pool) Close() error {
	p.closeOnce.Do(func() {
		p.cancel()
		if err := p.ml.Leave(p.leaveTimeout); err != nil {
			p.log.Warn("gossip leave incomplete", "err", err)
		}
		if err := p.ml.Shutdown(); err != nil {
			p.closeErr = fmt.Errorf("cannot shut down gossip on %s: %w", p.cfg.Bind, err)
		}
		p.wg.Wait()
	})
	return p.closeErr
}

// advertiseLoop owns UpdateNode calls and the record garbage collection.
func (p *Pool) advertiseLoop(ctx context.Context) {
	defer p.wg.Done()
	gc := time.NewTicker(p.gcEvery)
	defer gc.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.advertise:
			// UpdateNode queues an alive message with the new meta (it
			// calls NodeMeta, which reads the newest meta) and then waits
			// for it to finish gossiping; the wait is not needed, so it is
			// cut short and its timeout error ignored.
			_ = p.ml.UpdateNode(time.Millisecond)
			p.sendDirect()
		case <-gc.C:
			p.collect()
		}
	}
}

// directMax is the largest pool in which a change of holdings is also sent
// straight to every member. memberlist hands a broadcast to
// RetransmitMult*ceil(log10(n+1)) gossip targets, 3 random members a
// round: 4 targets in pools of up to 9 nodes. Every first receiver passes
// it on, yet in a pool of 5 a given member misses a given update with a
// probability of about (1/4*3/4)^4 = 0.1% (measured: a 5-node test rollout
// stalled about once in 40 runs) and then waits for the next push/pull
// (15-30s). memberlist's own queue can also drop a broadcast (see
// anchor); in a large pool many forwarders make up for both. Sending
// directly costs n-1 packets per change, cheap in a small pool.
const directMax = 16

// sendDirect sends this node's record to every live member when the pool
// is small (see directMax): by UDP when it fits a packet, else by TCP.
func (p *Pool) sendDirect() {
	p.mu.Lock()
	var rec []byte
	var to []memberlist.Node
	if p.mu.record != nil && p.numNodes.Load() <= directMax {
		rec = slices.Clone(p.mu.record)
		rec[0] = msgDirect
		for name, m := range p.mu.members {
			if m.alive && name != p.cfg.NodeName {
				to = append(to, m.node)
			}
		}
	}
	p.mu.Unlock()
	for i := range to {
		var err error
		if len(rec) <= p.maxBroadcast {
			err = p.ml.SendBestEffort(&to[i], rec)
		} else {
			err = p.ml.SendReliable(&to[i], rec)
		}
		if err != nil {
			p.log.Debug("gossip direct send failed", "to", to[i].Name, "err", err)
		}
	}
}

// collect forgets departed members after deadKeep and records of nodes that
// are not live members. A grace period keeps records that arrive before
// their node's alive message.
func (p *Pool) collect() {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for name, m := range p.mu.members {
		if !m.alive && now.Sub(m.downAt) > p.deadKeep {
			delete(p.mu.members, name)
		}
	}
	for name, r := range p.mu.records {
		if m, ok := p.mu.members[name]; (!ok || !m.alive) && now.Sub(r.received) > p.recordGrace {
			delete(p.mu.records, name)
		}
	}
}

// seeds returns cfg.Join without the addresses that are literally this
// node (a seed list shared by all nodes of a run contains them).
func (p *Pool) seeds() []string {
	selfHost, selfPort, _ := net.SplitHostPort(p.addr)
	selfIP := net.ParseIP(selfHost)
	bindHost, _, _ := splitHostPort(p.cfg.Bind)
	bindIP := net.ParseIP(bindHost)
	var out []string
	for _, s := range p.cfg.Join {
		host, port, err := net.SplitHostPort(s)
		if err == nil && port == selfPort {
			ip := net.ParseIP(host)
			if ip != nil && (ip.Equal(selfIP) || ip.Equal(bindIP) ||
				(ip.IsLoopback() && (bindIP == nil || bindIP.IsUnspecified()))) {
				continue
			}
		}
		out = append(out, s)
	}
	return out
}

// joinLoop joins the seeds until this node has a peer. Seeds are tried one
// at a time so that Close waits for at most one TCP timeout. Stopping once
// another node knows this one (even if it joined us) is enough: gossip
// spreads membership from there.
func (p *Pool) joinLoop(ctx context.Context, seeds []string) {
	defer p.wg.Done()
	wait := p.backoffMin
	for attempt := 1; ; attempt++ {
		contacted := 0
		var lastErr error
		for _, s := range seeds {
			if ctx.Err() != nil {
				return
			}
			n, err := p.ml.Join([]string{s})
			contacted += n
			if err != nil {
				lastErr = err
			}
		}
		if ctx.Err() != nil {
			return
		}
		if p.ml.NumMembers() > 1 {
			p.log.Info("gossip pool joined", "attempts", attempt, "seeds_contacted", contacted, "members", p.ml.NumMembers())
			return
		}
		p.log.Debug("gossip join failed, retrying", "attempt", attempt, "retry_in", wait, "err", lastErr)
		// ±20% jitter so nodes started together do not retry in step.
		t := time.NewTimer(time.Duration(float64(wait) * (0.8 + 0.4*rand.Float64())))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if p.ml.NumMembers() > 1 {
			p.log.Info("gossip pool joined", "attempts", attempt, "by_peer", true, "members", p.ml.NumMembers())
			return
		}
		wait = min(2*wait, p.backoffMax)
	}
}
