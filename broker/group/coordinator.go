package group

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

const (
	defaultMinSessionTimeout     = 6 * time.Second
	defaultMaxSessionTimeout     = 30 * time.Minute
	defaultInitialRebalanceDelay = 3 * time.Second
	// maxOffsetMetadataBytes is Kafka's offset.metadata.max.bytes default.
	maxOffsetMetadataBytes = 4096
	// defaultTick is how often the janitor looks for expired sessions and
	// rebalance deadlines. Timeouts fire up to one tick late, which is
	// noise next to the 6s minimum session timeout.
	defaultTick = 100 * time.Millisecond
)

var errCoordinatorClosed = errors.New("group coordinator closed")

// Config configures a Coordinator.
type Config struct {
	Logger *slog.Logger
	// Store persists offsets and group metadata; required. New takes
	// ownership: Coordinator.Close closes it (if New fails, the caller
	// still owns it).
	Store Store
	// MinSessionTimeout and MaxSessionTimeout bound the session timeout a
	// member may ask for (group.min/max.session.timeout.ms); zero means
	// 6s and 30m.
	MinSessionTimeout, MaxSessionTimeout time.Duration
	// InitialRebalanceDelay delays the first rebalance of an empty group
	// so that members starting together land in one generation
	// (group.initial.rebalance.delay.ms). Zero means the Kafka default
	// of 3s; a negative value disables the delay (Kafka's 0).
	InitialRebalanceDelay time.Duration
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// TopicPartitions returns the partition count of a topic, false if
	// it does not exist. Commits to unknown topics or out of range
	// partitions get UNKNOWN_TOPIC_OR_PARTITION. Nil accepts every
	// partition. Never called with the coordinator's lock held.
	TopicPartitions func(topic string) (int32, bool)
	// EndOffset returns a partition's high watermark for Lags; nil or
	// false leaves the lag unknown. Never called with the coordinator's
	// lock held.
	EndOffset func(topic string, partition int32) (int64, bool)
	// PendingTxnOffset reports whether an open transaction holds an
	// offset for the group partition that is not committed yet
	// (TxnOffsetCommit); OffsetFetch with RequireStable then answers
	// UNSTABLE_OFFSET_COMMIT for it. Nil means none ever is. Never
	// called with the coordinator's lock held.
	PendingTxnOffset func(group, topic string, partition int32) bool
	// DurableSync makes a successful SyncGroup wait until the store has
	// confirmed the metadata of the generation it answers for (as Kafka
	// stores the group before answering SyncGroup). Without it the
	// metadata is saved in the background. A coordinator that takes over
	// the store (cluster mode: a new raft leader) then knows every
	// generation a member was told about, and members do not get
	// ILLEGAL_GENERATION after a failover. Costs SyncGroup one store
	// write (shared with concurrent ones).
	DurableSync bool

	// tick overrides defaultTick (tests).
	tick time.Duration
}

// Coordinator is the group coordinator of a single node. See doc.go.
type Coordinator struct {
	logger          *slog.Logger
	store           Store
	minSession      time.Duration
	maxSession      time.Duration
	initialDelay    time.Duration
	now             func() time.Time
	topicPartitions func(string) (int32, bool)
	endOffset       func(string, int32) (int64, bool)
	pendingTxn      func(string, string, int32) bool
	durableSync     bool

	// closing is closed by Close: it stops the background goroutines and
	// releases every blocked JoinGroup/SyncGroup and persistence wait.
	closing chan struct{}
	// persistKick wakes the persister; buffered so that marking a group
	// dirty never blocks.
	persistKick chan struct{}
	// janitorKick restarts the janitor once it stopped ticking (no
	// deadlines); buffered like persistKick.
	janitorKick chan struct{}
	// bg tracks the janitor and persister goroutines.
	bg sync.WaitGroup
	// ops tracks store calls made by request goroutines, so that Close
	// closes the store only after the last one returned. Add is only
	// called under mu while !mu.closed, and Close sets mu.closed before
	// Wait: no Add can race with the Wait.
	ops       sync.WaitGroup
	closeOnce sync.Once
	closeErr  error

	// storeMu orders the store calls that act on a whole group's
	// metadata (SaveGroup, DeleteGroup): it is held across the call and
	// the mu section that snapshots or checks the group before it, so
	// the store receives them in the order the coordinator decided them.
	// Lock order: storeMu, then mu.
	storeMu sync.Mutex

	mu struct {
		sync.Mutex
		closed bool
		// paused (since pausedAt) stops the janitor: see Pause.
		paused   bool
		pausedAt time.Time
		groups   map[string]*group
		// unsaved holds, per group, the metadata snapshot the
		// persister has yet to save. Snapshots are taken when a group
		// reaches a consistent point (Stable with its assignment,
		// Empty, a static member replaced while Stable), never in the
		// middle of a rebalance, so that a restart restores a
		// generation that really existed. A newer snapshot replaces an
		// older unsaved one.
		unsaved map[string]GroupMeta
		// saved is closed (and replaced) after every persister pass,
		// waking SyncGroup calls waiting for their generation to be
		// stored (DurableSync).
		saved chan struct{}
	}
}

// New creates a coordinator, loading persisted state from cfg.Store, and
// starts its background goroutines.
func New(cfg Config) (*Coordinator, error) {
	if cfg.Store == nil {
		return nil, errors.New("group coordinator: store is required")
	}
	c := &Coordinator{
		logger:          cfg.Logger,
		store:           cfg.Store,
		minSession:      cfg.MinSessionTimeout,
		maxSession:      cfg.MaxSessionTimeout,
		initialDelay:    cfg.InitialRebalanceDelay,
		now:             cfg.Now,
		topicPartitions: cfg.TopicPartitions,
		endOffset:       cfg.EndOffset,
		pendingTxn:      cfg.PendingTxnOffset,
		durableSync:     cfg.DurableSync,
		closing:         make(chan struct{}),
		persistKick:     make(chan struct{}, 1),
		janitorKick:     make(chan struct{}, 1),
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	if c.minSession == 0 {
		c.minSession = defaultMinSessionTimeout
	}
	if c.maxSession == 0 {
		c.maxSession = defaultMaxSessionTimeout
	}
	if c.minSession > c.maxSession {
		return nil, fmt.Errorf("group coordinator: min session timeout %v above max %v", c.minSession, c.maxSession)
	}
	switch {
	case c.initialDelay == 0:
		c.initialDelay = defaultInitialRebalanceDelay
	case c.initialDelay < 0:
		c.initialDelay = 0
	}
	if c.now == nil {
		c.now = time.Now
	}
	tick := cfg.tick
	if tick <= 0 {
		tick = defaultTick
	}

	st, err := c.store.Load()
	if err != nil {
		return nil, fmt.Errorf("group coordinator: load state: %w", err)
	}
	c.mu.groups = make(map[string]*group, len(st.Groups))
	c.mu.unsaved = make(map[string]GroupMeta)
	c.mu.saved = make(chan struct{})
	now := c.now()
	nOffsets := 0
	for _, gs := range st.Groups {
		c.mu.groups[gs.Meta.Group] = c.restoreGroup(gs, now)
		nOffsets += len(gs.Offsets)
	}
	c.logger.Info("group coordinator started", "groups", len(st.Groups), "offsets", nOffsets)

	c.bg.Add(2)
	go c.janitor(tick)
	go c.persister()
	return c, nil
}

// restoreGroup rebuilds a group from its persisted state. A group saved
// with members comes back Stable with that generation and assignment, each
// member's session starting now: members that are still alive carry on
// (static ones rejoining with a new member id get the no-rebalance path),
// the others expire and trigger a rebalance. Blocked calls and in-progress
// rebalances are not persisted; their clients retry.
func (c *Coordinator) restoreGroup(gs GroupState, now time.Time) *group {
	g := newGroup(gs.Meta.Group)
	g.protocolType = gs.Meta.ProtocolType
	g.generation = gs.Meta.Generation
	g.savedGeneration = gs.Meta.Generation
	for _, o := range gs.Offsets {
		g.offsets[TopicPartition{o.Topic, o.Partition}] = o
	}
	if len(gs.Meta.Members) == 0 || gs.Meta.Protocol == "" {
		return g
	}
	for _, mm := range gs.Meta.Members {
		if mm.MemberID == "" || g.members[mm.MemberID] != nil {
			continue
		}
		m := &member{
			id: mm.MemberID,
			joinSpec: joinSpec{
				instanceID:       mm.InstanceID,
				clientID:         mm.ClientID,
				clientHost:       mm.ClientHost,
				sessionTimeout:   time.Duration(mm.SessionTimeoutMillis) * time.Millisecond,
				rebalanceTimeout: time.Duration(mm.RebalanceTimeoutMillis) * time.Millisecond,
				protocolType:     gs.Meta.ProtocolType,
			},
			assignment: mm.Assignment,
			seq:        g.nextSeq,
			lastSeen:   now,
		}
		for _, p := range mm.Protocols {
			m.protocols = append(m.protocols, protocol{name: p.Name, metadata: p.Metadata})
		}
		g.nextSeq++
		g.members[m.id] = m
		if m.static() {
			g.static[m.instanceID] = m.id
		}
	}
	if len(g.members) == 0 {
		return g
	}
	g.state = stateStable
	g.protocol = gs.Meta.Protocol
	g.leader = gs.Meta.Leader
	if g.members[g.leader] == nil {
		g.leader = g.sortedMembersLocked()[0].id
	}
	return g
}

// Close stops the coordinator: blocked JoinGroup/SyncGroup calls return
// COORDINATOR_NOT_AVAILABLE, the background goroutines exit (the persister
// after a last save of changed group metadata), in-flight store calls
// finish, and the store is closed. Every call after Close returns
// COORDINATOR_NOT_AVAILABLE.
func (c *Coordinator) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.mu.closed = true
		c.mu.Unlock()
		close(c.closing)
		c.bg.Wait()
		c.ops.Wait()
		if err := c.store.Close(); err != nil {
			c.closeErr = fmt.Errorf("group coordinator: close store: %w", err)
		}
		c.logger.Info("group coordinator closed")
	})
	return c.closeErr
}

// lockGroup locks c.mu for a request on the group named and returns that
// group (nil if there is none). An empty name is answered
// INVALID_GROUP_ID and a closed coordinator COORDINATOR_NOT_AVAILABLE;
// with a code c.mu is not held.
func (c *Coordinator) lockGroup(name string) (*group, int16) {
	if name == "" {
		return nil, kerr.InvalidGroupID.Code
	}
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return nil, kerr.CoordinatorNotAvailable.Code
	}
	return c.mu.groups[name], 0
}

// janitor enforces every deadline: session timeouts, pending member
// expiry, rebalance and initial delay deadlines, and pending-sync
// deadlines. One coordinator-wide ticker rather than a timer per member
// keeps the goroutine count constant and every deadline decision under mu
// with the state it depends on. While no group has a member, a pending
// member or a rebalance, there is no deadline: the ticker stops until a
// JoinGroup or Resume kicks it (an idle broker coordinating empty groups
// does not wake every tick).
func (c *Coordinator) janitor(tick time.Duration) {
	defer c.bg.Done()
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-c.closing:
			return
		case <-t.C:
		}
		c.mu.Lock()
		deadlines := c.mu.paused
		if !c.mu.paused {
			now := c.now()
			for _, g := range c.mu.groups {
				c.expireLocked(g, now)
				deadlines = deadlines || g.hasDeadlines()
			}
		}
		c.mu.Unlock()
		if deadlines {
			continue
		}
		t.Stop()
		select {
		case <-c.closing:
			return
		case <-c.janitorKick:
		}
		t.Reset(tick)
	}
}

// Quiet reports whether everything the coordinator holds is in its
// store: no group has a member, a pending member or a rebalance, and no
// group metadata waits to be saved. A coordinator that is quiet loses
// nothing by closing and loading its groups from the log again later,
// which is what lets its offsets partition sleep (see the broker's
// dormant.go).
func (c *Coordinator) Quiet() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed || c.mu.paused || len(c.mu.unsaved) > 0 {
		return false
	}
	for _, g := range c.mu.groups {
		if g.hasDeadlines() {
			return false
		}
	}
	return true
}

// kickJanitor restarts the janitor's ticker if it stopped; call it after
// a change that may have given a group a deadline, outside mu or in it.
func (c *Coordinator) kickJanitor() {
	select {
	case c.janitorKick <- struct{}{}:
	default:
	}
}

// Pause stops enforcing deadlines: no session expires, no join or sync
// phase completes, until Resume. The broker pauses the coordinator of an
// offsets partition whose raft leadership this broker lost for a moment
// (a leader that could not reach its followers for the lease timeout
// steps down; on a loaded machine it is usually elected again a second
// later, nobody else having led in between). Members cannot reach a
// paused coordinator, so it must not hold that against them, and what it
// would decide could not be stored. JoinGroup and SyncGroup calls
// blocked in it stay blocked: they complete after Resume, instead of
// failing and sending every member back to a rebalance that starts over
// from the last stored generation.
func (c *Coordinator) Pause() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.mu.paused {
		c.mu.paused, c.mu.pausedAt = true, c.now()
	}
}

// Resume ends a Pause. st is the store's state as committed now (the
// broker has made sure that the log holds every write this coordinator
// proposed that may have been committed): offsets come from it, since a
// commit that failed when the leadership was lost may have been committed
// all the same. Every deadline moves by the length of the pause and every
// member's session starts again, as when a coordinator loads its groups.
// Group metadata that could not be saved is saved again.
func (c *Coordinator) Resume(st State) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.mu.paused {
		return
	}
	now := c.now()
	d := max(0, now.Sub(c.mu.pausedAt))
	c.mu.paused = false
	stored := make(map[string]*GroupState, len(st.Groups))
	for i := range st.Groups {
		stored[st.Groups[i].Meta.Group] = &st.Groups[i]
	}
	for name, g := range c.mu.groups {
		for id, deadline := range g.pending {
			g.pending[id] = deadline.Add(d)
		}
		g.delayDeadline = g.delayDeadline.Add(d)
		g.rebalanceDeadline = g.rebalanceDeadline.Add(d)
		g.syncDeadline = g.syncDeadline.Add(d)
		for _, m := range g.members {
			m.lastSeen = now
		}
		if g.inflightAll {
			continue
		}
		gs := stored[name]
		if gs != nil {
			g.savedGeneration = max(g.savedGeneration, gs.Meta.Generation)
		}
		for tp := range g.offsets {
			if _, busy := g.inflight[tp]; !busy {
				delete(g.offsets, tp)
			}
		}
		if gs == nil {
			continue
		}
		for _, o := range gs.Offsets {
			tp := TopicPartition{o.Topic, o.Partition}
			if _, busy := g.inflight[tp]; !busy {
				g.offsets[tp] = o
			}
		}
	}
	c.logger.Info("group coordinator resumed", "paused", d.Round(time.Millisecond), "groups", len(c.mu.groups))
	c.kickJanitor()
	select {
	case c.persistKick <- struct{}{}:
	default:
	}
}

// persister saves the unsaved metadata snapshots through Store.SaveGroup,
// outside mu so that a slow store never blocks the state machine. It takes
// the snapshots under storeMu, so a snapshot can never be written after a
// DeleteGroup of the same group (which also holds storeMu, and drops the
// group's unsaved snapshot) and resurrect it. Saves of one group are
// ordered: there is only one persister, and it always takes the latest
// snapshot.
func (c *Coordinator) persister() {
	defer c.bg.Done()
	for {
		select {
		case <-c.persistKick:
			c.saveDirty()
		case <-c.closing:
			// Request goroutines stop changing groups once closed
			// is set (before closing is closed), so this last pass
			// sees every change.
			c.saveDirty()
			return
		}
	}
}

func (c *Coordinator) saveDirty() {
	c.storeMu.Lock()
	defer c.storeMu.Unlock()
	c.mu.Lock()
	var metas []GroupMeta
	for name, meta := range c.mu.unsaved {
		if g := c.mu.groups[name]; g != nil && g.state != stateDead {
			metas = append(metas, meta)
		}
	}
	clear(c.mu.unsaved)
	c.mu.Unlock()
	var stored, failed []GroupMeta
	for _, meta := range metas {
		if err := c.store.SaveGroup(meta); err != nil {
			c.logger.Warn("save group metadata failed", "group", meta.Group, "err", err)
			failed = append(failed, meta)
			continue
		}
		stored = append(stored, meta)
	}
	c.mu.Lock()
	for _, meta := range stored {
		if g := c.mu.groups[meta.Group]; g != nil {
			g.savedGeneration = max(g.savedGeneration, meta.Generation)
		}
	}
	// A snapshot that could not be saved is tried again with the next
	// pass (after Resume, or the next change), unless a newer one took
	// its place: a SyncGroup waiting for its generation to be stored
	// (DurableSync) must not wait for a save nobody makes.
	for _, meta := range failed {
		if _, newer := c.mu.unsaved[meta.Group]; !newer {
			c.mu.unsaved[meta.Group] = meta
		}
	}
	close(c.mu.saved)
	c.mu.saved = make(chan struct{})
	c.mu.Unlock()
}

// durableSyncTimeout bounds how long a SyncGroup waits for its
// generation's metadata to be stored.
const durableSyncTimeout = 30 * time.Second

// waitSaved waits until the metadata of generation gen of group name is
// stored (DurableSync). It returns the error to answer with, or nil.
func (c *Coordinator) waitSaved(ctx context.Context, name string, gen int32) *kerr.Error {
	timeout := time.NewTimer(durableSyncTimeout)
	defer timeout.Stop()
	for {
		c.mu.Lock()
		g := c.mu.groups[name]
		switch {
		case c.mu.closed:
			c.mu.Unlock()
			return kerr.CoordinatorNotAvailable
		case g == nil || g.generation != gen:
			// The group moved on (or was deleted) meanwhile: the
			// member finds out through its next request.
			c.mu.Unlock()
			return kerr.RebalanceInProgress
		case g.savedGeneration >= gen:
			c.mu.Unlock()
			return nil
		}
		ch := c.mu.saved
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return kerr.RebalanceInProgress
		case <-c.closing:
			return kerr.CoordinatorNotAvailable
		case <-timeout.C:
			c.logger.Warn("group metadata not stored in time; failing SyncGroup so the member rejoins", "group", name, "generation", gen)
			return kerr.CoordinatorNotAvailable
		}
	}
}

// saveLocked snapshots g's metadata for the persister. Call it only when
// g is at a consistent point (see Coordinator.mu.unsaved).
func (c *Coordinator) saveLocked(g *group) {
	c.mu.unsaved[g.name] = g.metaLocked()
	select {
	case c.persistKick <- struct{}{}:
	default:
	}
}

// metaLocked snapshots what SaveGroup persists. Slices are copied because
// the store runs outside the lock while the group keeps changing.
func (g *group) metaLocked() GroupMeta {
	meta := GroupMeta{
		Group:        g.name,
		ProtocolType: g.protocolType,
		Protocol:     g.protocol,
		Generation:   g.generation,
		Leader:       g.leader,
	}
	for _, m := range g.sortedMembersLocked() {
		mm := MemberMeta{
			MemberID:               m.id,
			InstanceID:             m.instanceID,
			ClientID:               m.clientID,
			ClientHost:             m.clientHost,
			SessionTimeoutMillis:   int32(m.sessionTimeout / time.Millisecond),
			RebalanceTimeoutMillis: int32(m.rebalanceTimeout / time.Millisecond),
			Assignment:             m.assignment,
		}
		for _, p := range m.protocols {
			mm.Protocols = append(mm.Protocols, ProtocolMeta{Name: p.name, Metadata: p.metadata})
		}
		meta.Members = append(meta.Members, mm)
	}
	// Member byte slices are never mutated in place (they are replaced
	// on change), but clone anyway: the store may keep them.
	return cloneMeta(meta)
}

// waitPersistLocked waits, with mu released, until some in-flight store
// write of g finishes. It returns false if the coordinator closed. The
// caller must look the group up again afterwards: anything may have
// happened while mu was released.
func (c *Coordinator) waitPersistLocked(g *group) bool {
	if g.persistDone == nil {
		g.persistDone = make(chan struct{})
	}
	ch := g.persistDone
	c.mu.Unlock()
	defer c.mu.Lock()
	select {
	case <-ch:
		return true
	case <-c.closing:
		return false
	}
}

// clientInfoKey is the context key of WithClient.
type clientInfoKey struct{}

type clientInfo struct{ id, host string }

// WithClient returns a context carrying the Kafka client id and host of
// the connection a request came from. The broker must attach it to the ctx
// passed to JoinGroup: member ids are derived from the client id, and
// DescribeGroups reports both.
func WithClient(ctx context.Context, clientID, clientHost string) context.Context {
	return context.WithValue(ctx, clientInfoKey{}, clientInfo{id: clientID, host: clientHost})
}

func clientFrom(ctx context.Context) clientInfo {
	ci, _ := ctx.Value(clientInfoKey{}).(clientInfo)
	return ci
}
