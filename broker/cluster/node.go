package cluster

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// ControllerGroup is the raft group id of the controller on the mux.
const ControllerGroup = 0

// Errors of Apply.
var (
	// ErrNotLeader: the command reached a node that is not (or no longer)
	// the controller leader. Apply retries on it; it escapes only when
	// the context ends first.
	ErrNotLeader = errors.New("not the controller leader")
	// ErrNoLeader: no controller leader is known (election running, or
	// the quorum is lost). Apply retries until its context ends.
	ErrNoLeader = errors.New("no controller leader is known")
)

func init() { resultErrors["not_leader"] = ErrNotLeader }

// Config configures a cluster Node. Zero values take the documented
// defaults.
type Config struct {
	// NodeID is the broker's node id (also its raft server id). >= 0.
	NodeID int32
	// DataDir is where the controller keeps its raft log, stable store
	// and snapshots (a "controller" directory is made inside).
	DataDir string
	// KafkaAddr is the broker's advertised Kafka address (host:port),
	// gossiped to the others and registered in the metadata.
	KafkaAddr string
	// Listeners are the broker's advertised Kafka listeners (name to
	// host:port), gossiped and registered with KafkaAddr.
	Listeners map[string]string
	// RaftListen is the raft mux listener (host:port). Required.
	RaftListen string
	// RaftAdvertise is the address peers dial for raft. Default: the
	// listener's address, with 0.0.0.0/:: replaced by 127.0.0.1.
	RaftAdvertise string
	// GossipListen is memberlist's TCP+UDP address (host:port). Required.
	GossipListen string
	// Join lists gossip addresses of brokers to join; empty for the first.
	// Only a broker's first start needs it: a broker rejoins the brokers
	// it has known (saved in DataDir, see rejoin.go) whatever Join says.
	Join []string
	// BootstrapExpect is how many brokers form a new cluster: once this
	// many are seen through gossip and none is part of a cluster yet, the
	// one with the lowest node id bootstraps the controller with all of
	// them as voters. 0: never bootstrap (join an existing cluster).
	BootstrapExpect int
	// MaxVoters bounds the controller's voters; later brokers join as
	// non-voters. Default 5.
	MaxVoters int
	// Tick is how often membership is reconciled. Default 500ms.
	Tick time.Duration
	// DeadAfter is how long a registered broker must be missing from
	// gossip before the leader marks it not alive. Default 3s.
	DeadAfter time.Duration
	// RejoinInterval is how soon a known broker missing from gossip is
	// tried again after a gossip join of it failed; the wait doubles
	// after each try, up to 8 times this (see rejoin.go). Default 1s.
	RejoinInterval time.Duration
	// HeartbeatWindow is how long raft heartbeats to one broker gather
	// before they go out together in one frame (see transport.go).
	// Longer: fewer frames, each heartbeat later. Default 20ms; negative:
	// no coalescing (one NetworkTransport RPC per heartbeat).
	HeartbeatWindow time.Duration
	// ElectionStagger is how long the next surviving voter of a raft
	// group waits before it starts an election of its own when the group's
	// leader died and the previous voter's election has not produced a
	// leader (see watch.go). Default 300ms.
	ElectionStagger time.Duration
	// NoFastElection turns off starting elections when a broker is seen
	// to die; groups then wait for their heartbeat timeout.
	NoFastElection bool
	// TLS, when set, puts the raft mux on mutual TLS (tls.go): a process
	// without a certificate of the cluster CA cannot open a raft stream,
	// and the leader adds a gossip member to the controller only once it
	// reached the member's raft mux over TLS. nil: plain TCP.
	TLS *TLS
	// GossipKeys, when set, encrypt and authenticate gossip (memberlist's
	// keyring, AES-GCM): the first encrypts, all are accepted; a process
	// without one of them cannot join. See ReadGossipKeys.
	GossipKeys [][]byte

	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

func (c *Config) validate() error {
	if c.NodeID < 0 {
		return fmt.Errorf("node id %d is negative", c.NodeID)
	}
	if c.DataDir == "" {
		return errors.New("no data directory for the controller")
	}
	if _, _, err := net.SplitHostPort(c.RaftListen); err != nil {
		return fmt.Errorf("raft listen address %q is not host:port: %w", c.RaftListen, err)
	}
	if _, _, err := net.SplitHostPort(c.GossipListen); err != nil {
		return fmt.Errorf("gossip listen address %q is not host:port (pass --gossip-listen with --raft-listen): %w", c.GossipListen, err)
	}
	if c.MaxVoters <= 0 {
		c.MaxVoters = 5
	}
	if c.BootstrapExpect < 0 || c.BootstrapExpect > c.MaxVoters {
		return fmt.Errorf("--bootstrap-expect %d must be between 0 and %d (the voters of the controller)", c.BootstrapExpect, c.MaxVoters)
	}
	if c.Tick <= 0 {
		c.Tick = 500 * time.Millisecond
	}
	if c.DeadAfter <= 0 {
		c.DeadAfter = 3 * time.Second
	}
	if c.RejoinInterval <= 0 {
		c.RejoinInterval = time.Second
	}
	if c.HeartbeatWindow == 0 {
		c.HeartbeatWindow = 20 * time.Millisecond
	}
	if c.ElectionStagger <= 0 {
		c.ElectionStagger = 300 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// nodeMeta is what a broker gossips about itself.
type nodeMeta struct {
	ID        int32  `json:"id"`
	KafkaAddr string `json:"kafka"`
	RaftAddr  string `json:"raft"`
	// Listeners: Config.Listeners (absent from older brokers' meta).
	Listeners map[string]string `json:"listeners,omitempty"`
	// InCluster: this broker is part of a controller configuration, so
	// nobody seeing it may bootstrap a new cluster.
	InCluster bool `json:"in_cluster,omitempty"`
	// Cluster is the id of the cluster whose controller this broker
	// follows, once it knows it: gossip refuses a member of another
	// cluster (gossipDelegate.NotifyAlive).
	Cluster string `json:"cluster,omitempty"`
	// Gossip is the member's gossip address as memberlist knows it (not
	// gossiped in the meta: memberlist carries it).
	Gossip string `json:"-"`
}

// Node is one broker's membership in the cluster: its raft mux, its
// gossip member and its controller raft instance.
type Node struct {
	cfg   Config
	log   *slog.Logger
	mux   *Mux
	fsm   *FSM
	store *boltStore
	trans *groupTransport
	raft  *raft.Raft
	ml    *memberlist.Memberlist
	hub   *heartbeatHub // nil without heartbeat coalescing
	stats *transportStats
	// logRepeats thins out the repeated warnings and errors of the
	// node's raft instances (logging.go).
	logRepeats *repeats
	// changes is the broker's subscription to fsm's changes (Changes).
	changes <-chan struct{}

	// incarnation identifies this process to watchers (watch.go).
	incarnation uint64
	// down: brokers seen to go away and not reached since (watch.go).
	down struct {
		sync.Mutex
		ids map[int32]bool
		up  chan struct{} // closed and replaced when one comes back
	}
	// peerChanges counts brokers seen to go away or come back (watch.go):
	// what a group's transport knows of a follower's state (appendMark)
	// holds only while it has not changed.
	peerChanges atomic.Uint64
	// heardFrom is when each broker's heartbeat link (by its raft
	// address) last sent a frame (quiet.go).
	heardFrom struct {
		sync.Mutex
		m map[string]time.Time
	}
	// quietHB is the shortest heartbeat timeout of the groups that go
	// quiet (quiet.go), in nanoseconds.
	quietHB atomic.Int64
	// leaving is closed by Leaving (watch.go).
	leaving     chan struct{}
	leavingOnce sync.Once
	// leaderChanges are the channels of LeaderChanges.
	leaderChanges tokens
	// commitNudge wakes commitNudgeLoop (buffered: nudgeCommit never
	// blocks).
	commitNudge chan struct{}
	// groups are the transports of the running raft groups, by group id.
	groups struct {
		sync.Mutex
		m map[uint64]*groupTransport
	}

	hasState  bool
	inCluster atomic.Bool
	// clusterID is the cluster id this node gossips in its meta: the
	// controller metadata's, copied by the loop (refreshClusterID).
	clusterID atomic.Pointer[string]
	events    chan struct{} // gossip changes, coalescing

	// gossip is this node's copy of the members' meta, by member name,
	// written by memberlist's event callbacks.
	gossip struct {
		sync.Mutex
		members map[string]nodeMeta
	}
	// gossipAddr is this node's own gossip address as memberlist
	// advertises it (set once in New).
	gossipAddr string
	// peers are the gossip addresses of the other brokers known, by node
	// id, saved in path (rejoin.go). The loop goroutine writes m (under
	// the lock) and dirty; rejoinLoop reads copies of m.
	peers struct {
		sync.Mutex
		m     map[int32]string
		path  string
		dirty bool // the last save failed
	}

	commands *prometheus.CounterVec
	forwards prometheus.Counter
	// tlsFailures and gossipFailures are nil without cluster TLS and
	// without gossip keys.
	tlsFailures    *prometheus.CounterVec
	gossipFailures prometheus.Counter
	keyring        *memberlist.Keyring // nil without GossipKeys
	// unverified are the gossip members whose raft mux the leader could
	// not reach over TLS (logged once each); only the loop touches it.
	unverified map[int32]bool
	rejoins    *prometheus.CounterVec // gossip joins of known brokers, by result
	// foreignMembers counts gossip refused from brokers of other clusters.
	foreignMembers prometheus.Counter

	// missing counts consecutive leader ticks a registered broker was
	// absent from gossip; only the loop goroutine touches it.
	missing map[int32]time.Time

	runCtx    context.Context
	runCancel context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once

	// wal is the raft log of the partition groups (wal.go).
	wal sharedWAL
}

// New opens the controller's state and binds the raft and gossip
// listeners. Run starts serving.
func New(cfg Config) (*Node, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, log: cfg.Logger, fsm: NewFSM(), events: make(chan struct{}, 1), missing: map[int32]time.Time{}, logRepeats: newRepeats()}
	n.changes = n.fsm.Changes()
	n.commitNudge = make(chan struct{}, 1)
	n.gossip.members = map[string]nodeMeta{}
	n.down.ids = map[int32]bool{}
	n.down.up = make(chan struct{})
	n.leaving = make(chan struct{})
	n.groups.m = map[uint64]*groupTransport{}
	var inc [8]byte
	_, _ = rand.Read(inc[:])
	n.incarnation = binary.BigEndian.Uint64(inc[:]) | 1 // never 0
	n.stats = newTransportStats()
	n.runCtx, n.runCancel = context.WithCancel(context.Background())
	ok := false
	defer func() {
		if !ok {
			n.Close()
		}
	}()
	adv := cfg.RaftAdvertise
	var err error
	if n.mux, err = NewMux(cfg.RaftListen, adv, n.log.With("part", "raft-mux")); err != nil {
		return nil, err
	}
	if adv == "" {
		n.mux.advertise = raft.ServerAddress(loopbackIfUnspecified(n.mux.ln.Addr().String()))
		if n.mux.advertise != raft.ServerAddress(n.mux.ln.Addr().String()) {
			n.log.Warn("raft listens on all interfaces and advertises loopback; pass --raft-advertise HOST:PORT for brokers on other machines", "raft_advertise", n.mux.advertise)
		}
	}
	if cfg.TLS != nil {
		n.mux.serverTLS, n.mux.clientTLS = cfg.TLS.ServerConfig(), cfg.TLS.ClientConfig()
		n.tlsFailures = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "simtel_broker_cluster_tls_failures_total", Help: "TLS handshakes on the raft mux that failed, by side (accept, dial) and reason (bad_cert, no_cert, peer_name, not_tls, timeout, handshake)."}, []string{"side", "reason"})
		n.mux.tlsFailures = n.tlsFailures
	}
	n.mux.SetForwardHandler(n.serveForward)
	n.mux.handlers[kindHeartbeat] = n.serveHeartbeats
	n.mux.handlers[kindWatch] = n.serveWatch
	n.mux.handlers[kindVote] = n.serveVote
	n.mux.handlers[kindSleep] = n.serveSleep
	if cfg.HeartbeatWindow > 0 {
		n.hub = newHeartbeatHub(n.mux, cfg.HeartbeatWindow, n.stats)
	}

	dir := filepath.Join(cfg.DataDir, "controller")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cannot create controller directory %s: %w", dir, err)
	}
	if n.store, err = openBoltStore(filepath.Join(dir, "raft.db")); err != nil {
		return nil, err
	}
	hl := hclogFor(n.log.With("part", "controller"), "raft", n.logRepeats)
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hl)
	if err != nil {
		return nil, fmt.Errorf("cannot open controller snapshots in %s: %w", dir, err)
	}
	if n.hasState, err = raft.HasExistingState(n.store, n.store, snaps); err != nil {
		return nil, fmt.Errorf("cannot read controller state in %s: %w", dir, err)
	}
	n.peers.path = filepath.Join(dir, peersFileName)
	if n.peers.m, err = readPeers(n.peers.path); err != nil {
		// Not fatal: the brokers we knew keep trying us, and --join works.
		n.log.Warn("ignoring the saved gossip addresses of known brokers", "err", err)
		n.peers.m = map[int32]string{}
	}
	delete(n.peers.m, cfg.NodeID)
	n.inCluster.Store(n.hasState)
	rc := raft.DefaultConfig()
	rc.HeartbeatTimeout, rc.ElectionTimeout = controllerHeartbeatTimeout, controllerHeartbeatTimeout
	// Paced heartbeats and empty AppendEntries answered while they repeat
	// (transport.go), as for the partitions' groups: the controller's
	// leader sends each follower a heartbeat every 200-400 ms and an
	// AppendEntries every commit timeout, which is most of what an idle
	// cluster does once its partitions sleep.
	n.trans = n.newTransport(ControllerGroup, 3, hl, func(t *groupTransport) { t.hbEvery = rc.HeartbeatTimeout / 4 })
	// The commit timeout bounds how late a follower learns that the last
	// entries are committed and applies them; commitNudgeLoop tells the
	// followers at once after every command instead (a barrier after a
	// burst carries the new commit index), so raft's own periodic
	// AppendEntries can be rare.
	rc.CommitTimeout = controllerCommitTimeout
	rc.LocalID = raft.ServerID(strconv.Itoa(int(cfg.NodeID)))
	rc.Logger = hl
	fullLease(rc)
	// The leader reads each follower's previous entry for every
	// AppendEntries, the empty ones it sends every commit timeout
	// included: from memory, not a bbolt transaction and a decode each.
	logs, err := raft.NewLogCache(64, n.store)
	if err != nil {
		return nil, err
	}
	if n.raft, err = raft.NewRaft(rc, n.fsm, logs, n.store, snaps, n.trans); err != nil {
		return nil, fmt.Errorf("cannot start the controller raft: %w", err)
	}
	n.started(n.trans, n.raft)

	n.foreignMembers = prometheus.NewCounter(prometheus.CounterOpts{Name: "simtel_broker_cluster_gossip_foreign_members_total", Help: "Gossip messages and joins refused because they came from or named a broker of another cluster (another cluster id)."})
	mc := memberlist.DefaultLANConfig()
	mc.Name = "broker-" + strconv.Itoa(int(cfg.NodeID))
	host, port, _ := net.SplitHostPort(cfg.GossipListen)
	mc.BindAddr = host
	mc.BindPort, _ = strconv.Atoi(port)
	// On a wildcard address memberlist advertises the host's private
	// address itself; a specific address is advertised as it is.
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		mc.AdvertiseAddr = host
	}
	mc.AdvertisePort = mc.BindPort
	// A broker that died and comes back at another address (a pod's new
	// IP) takes its name back once it has been dead this long, instead
	// of being refused as a conflicting member.
	mc.DeadNodeReclaimTime = cfg.DeadAfter
	mc.Delegate = &gossipDelegate{n: n}
	mc.Alive = &gossipDelegate{n: n}
	mc.Merge = &gossipDelegate{n: n}
	mc.Events = &gossipEvents{n: n}
	mc.Logger = stdLoggerFor(n.log.With("part", "gossip"))
	if len(cfg.GossipKeys) > 0 {
		if mc.Keyring, err = memberlist.NewKeyring(cfg.GossipKeys, cfg.GossipKeys[0]); err != nil {
			return nil, fmt.Errorf("cannot use the gossip keys: %w", err)
		}
		n.keyring = mc.Keyring
		n.gossipFailures = prometheus.NewCounter(prometheus.CounterOpts{Name: "simtel_broker_cluster_gossip_auth_failures_total", Help: "Gossip messages and state exchanges refused because they were not encrypted with a key of this broker's keyring."})
		mc.Logger = log.New(&gossipFailureCounter{w: &stdWriter{l: n.log.With("part", "gossip")}, c: n.gossipFailures}, "", 0)
	}
	if n.ml, err = memberlist.Create(mc); err != nil {
		return nil, fmt.Errorf("cannot start gossip on %s: %w", cfg.GossipListen, err)
	}
	n.gossipAddr = n.ml.LocalNode().Address()

	n.commands = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "simtel_broker_cluster_commands_total", Help: "Controller commands applied by this node as leader, by op and result."}, []string{"op", "result"})
	n.forwards = prometheus.NewCounter(prometheus.CounterOpts{Name: "simtel_broker_cluster_forwarded_commands_total", Help: "Controller commands this node forwarded to the leader."})
	n.rejoins = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "simtel_broker_cluster_gossip_rejoins_total", Help: "Gossip joins this broker tried of known brokers missing from its gossip view, by result (ok, error)."}, []string{"result"})
	if r := cfg.Registerer; r != nil {
		n.stats.register(r)
		r.MustRegister(n.mux.Collector())
		if n.tlsFailures != nil {
			r.MustRegister(n.tlsFailures)
		}
		if n.gossipFailures != nil {
			r.MustRegister(n.gossipFailures)
		}
		r.MustRegister(n.commands, n.forwards, n.rejoins, n.foreignMembers,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "simtel_broker_cluster_controller_leader", Help: "1 if this broker is the controller leader."}, func() float64 {
				if n.IsLeader() {
					return 1
				}
				return 0
			}),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "simtel_broker_cluster_alive_brokers", Help: "Brokers the controller metadata marks alive."}, func() float64 {
				return float64(len(n.Metadata().AliveBrokers()))
			}),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "simtel_broker_cluster_gossip_members", Help: "Live members seen through gossip."}, func() float64 {
				return float64(n.ml.NumMembers())
			}),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "simtel_broker_cluster_metadata_applied_index", Help: "Raft index of the last controller command applied here."}, func() float64 {
				return float64(n.Metadata().Index)
			}),
		)
	}
	ok = true
	return n, nil
}

func loopbackIfUnspecified(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return net.JoinHostPort("127.0.0.1", port)
	}
	return addr
}

// SetGossipKeys replaces the gossip keyring's keys (a rotation step, see
// ReadGossipKeys): keys[0] encrypts from now on, the others are accepted,
// any other key is dropped. Only for a node started with GossipKeys.
func (n *Node) SetGossipKeys(keys [][]byte) error {
	kr := n.keyring
	if kr == nil {
		return errors.New("gossip is not encrypted: a key file is taken at start only")
	}
	if len(keys) == 0 {
		return errors.New("no gossip key")
	}
	for _, k := range keys {
		if err := kr.AddKey(k); err != nil {
			return fmt.Errorf("cannot add a gossip key: %w", err)
		}
	}
	if err := kr.UseKey(keys[0]); err != nil {
		return fmt.Errorf("cannot use the new primary gossip key: %w", err)
	}
	for _, k := range kr.GetKeys() {
		if !slices.ContainsFunc(keys, func(w []byte) bool { return bytes.Equal(w, k) }) {
			if err := kr.RemoveKey(k); err != nil {
				return fmt.Errorf("cannot remove an old gossip key: %w", err)
			}
		}
	}
	return nil
}

// TLS is the cluster's mutual TLS, nil when off.
func (n *Node) TLS() *TLS { return n.cfg.TLS }

// RaftAddr is the mux's advertised address.
func (n *Node) RaftAddr() string { return string(n.mux.Addr()) }

// Mux is the raft listener shared with future partition groups.
func (n *Node) Mux() *Mux { return n.mux }

// Metadata is the latest applied cluster metadata (immutable).
func (n *Node) Metadata() *Metadata { return n.fsm.Metadata() }

// Changes receives a token whenever the metadata changed. It has one
// reader, the broker's metadata follower; others take their own with
// MetadataChanges.
func (n *Node) Changes() <-chan struct{} { return n.changes }

// MetadataChanges returns a new channel that receives a token after each
// later change of the metadata (tokens coalesce).
func (n *Node) MetadataChanges() <-chan struct{} { return n.fsm.Changes() }

// IsLeader reports whether this node is the controller leader.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// LeaderID is the controller leader's node id, if one is known.
func (n *Node) LeaderID() (int32, bool) {
	_, id := n.raft.LeaderWithID()
	if id == "" {
		return -1, false
	}
	v, err := strconv.Atoi(string(id))
	if err != nil {
		return -1, false
	}
	return int32(v), true
}

// Run serves until ctx ends, then leaves the gossip cluster and shuts the
// controller down. Its goroutines: the mux's accept loop and the
// membership loop (both waited for before Run returns).
func (n *Node) Run(ctx context.Context) error {
	n.wg.Add(7)
	go func() {
		defer n.wg.Done()
		n.mux.Serve()
	}()
	go func() {
		defer n.wg.Done()
		n.commitNudgeLoop(n.runCtx.Done())
	}()
	go func() {
		defer n.wg.Done()
		n.closeIdleStreamsLoop(n.runCtx.Done())
	}()
	go func() {
		defer n.wg.Done()
		n.quietLoop(n.runCtx.Done())
	}()
	go func() {
		defer n.wg.Done()
		n.loop(ctx)
	}()
	go func() {
		defer n.wg.Done()
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(n.runCtx, cancel)
		defer stop()
		n.rejoinLoop(rctx)
	}()
	go func() {
		defer n.wg.Done()
		if n.cfg.NoFastElection {
			return
		}
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(n.runCtx, cancel)
		defer stop()
		n.watchPeers(wctx)
	}()
	<-ctx.Done()
	return n.Close()
}

// Close stops everything New started. Safe to call more than once.
func (n *Node) Close() error {
	var err error
	n.closeOnce.Do(func() {
		n.runCancel()
		if n.ml != nil {
			_ = n.ml.Leave(time.Second)
			err = errors.Join(err, n.ml.Shutdown())
		}
		if n.raft != nil {
			err = errors.Join(err, n.raft.Shutdown().Error())
		}
		if n.trans != nil {
			n.unregister(ControllerGroup, n.trans)
			err = errors.Join(err, n.trans.Close())
		}
		if n.hub != nil {
			n.hub.close()
		}
		if n.mux != nil {
			err = errors.Join(err, n.mux.Close())
		}
		n.wg.Wait()
		if n.store != nil {
			err = errors.Join(err, n.store.Close())
		}
	})
	return err
}

// loop joins the gossip cluster, bootstraps when it is this node's turn,
// keeps the gossiped InCluster flag current and, while leader, reconciles
// gossip membership into the controller.
func (n *Node) loop(ctx context.Context) {
	t := time.NewTicker(n.cfg.Tick)
	defer t.Stop()
	joined := len(n.cfg.Join) == 0
	for {
		if !joined {
			if _, err := n.ml.Join(n.cfg.Join); err != nil {
				n.log.Warn("cannot join gossip yet; retrying", "join", n.cfg.Join, "err", err)
			} else {
				joined = true
			}
		}
		n.maybeBootstrap()
		n.refreshInCluster()
		n.refreshClusterID()
		n.savePeers(n.Metadata(), n.members())
		if n.IsLeader() {
			n.reconcile(ctx)
		} else {
			clear(n.missing)
		}
		select {
		case <-ctx.Done():
			return
		case <-n.runCtx.Done():
			return
		case <-t.C:
		case <-n.events:
		case leader := <-n.raft.LeaderCh():
			if leader {
				// The followers learn that the new term's first
				// entry committed (and with it every earlier one).
				n.nudgeCommit()
			}
		}
	}
}

// controllerHeartbeatTimeout is the controller raft's heartbeat and
// election timeout: twice raft's default, the time a controller voter
// waits without a fetch before standing for election in Kafka's KRaft
// (controller.quorum.fetch.timeout.ms). Clients wait for the controller
// only to create, delete and reconfigure topics (brokers answer Metadata
// from their copy, corrected by the leaders their own replicas know, and
// partitions elect their leaders without it), so a slower failover costs
// little, while its heartbeats share the links with every data group's:
// on a loaded broker with thousands of partitions a one-second timeout
// made the controller stand for election again and again. Its heartbeat
// goroutines, paced frames and follower timers wake half as often.
const controllerHeartbeatTimeout = 2 * time.Second

// controllerCommitTimeout is the controller raft's CommitTimeout (see
// New): an idle leader's AppendEntries to each follower every one to two
// of it.
const controllerCommitTimeout = controllerHeartbeatTimeout

// nudgeCommit asks commitNudgeLoop to tell the followers the leader's
// commit index soon.
func (n *Node) nudgeCommit() {
	select {
	case n.commitNudge <- struct{}{}:
	default:
	}
}

// commitNudgeLoop runs a barrier on the controller raft after each burst
// of commands this node applied as leader, until done is closed. The
// barrier's AppendEntries carry the leader's commit index, so followers
// apply the commands about one round trip after the leader did, not up
// to two commit timeouts later. Commands that come while a barrier runs
// ride on it or on the next.
func (n *Node) commitNudgeLoop(done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		case <-n.commitNudge:
		}
		if !n.IsLeader() {
			continue
		}
		if errors.Is(AwaitBarrier(n.raft, commitNudgeWait, done), raft.ErrRaftShutdown) {
			return
		}
	}
}

// commitNudgeWait bounds one barrier of commitNudgeLoop.
const commitNudgeWait = 5 * time.Second

// members is the live gossip membership (this node included), keyed by
// node id, from the copy the event callbacks keep (memberlist's own Node
// values change under its lock and must not be read outside callbacks).
func (n *Node) members() map[int32]nodeMeta {
	n.gossip.Lock()
	out := make(map[int32]nodeMeta, len(n.gossip.members)+1)
	for _, m := range n.gossip.members {
		out[m.ID] = m
	}
	n.gossip.Unlock()
	self := n.selfMeta()
	self.Gossip = n.gossipAddr
	out[n.cfg.NodeID] = self
	return out
}

func (n *Node) selfMeta() nodeMeta {
	return nodeMeta{ID: n.cfg.NodeID, KafkaAddr: n.cfg.KafkaAddr, Listeners: n.cfg.Listeners, RaftAddr: n.RaftAddr(), InCluster: n.inCluster.Load(), Cluster: n.gossipClusterID()}
}

// gossipClusterID is the cluster id of this node's gossip meta, "" while
// it does not know it.
func (n *Node) gossipClusterID() string {
	if id := n.clusterID.Load(); id != nil {
		return *id
	}
	return ""
}

// refreshClusterID gossips the controller's cluster id once this node
// knows it.
func (n *Node) refreshClusterID() {
	id := n.Metadata().ClusterID
	if id == "" || id == n.gossipClusterID() {
		return
	}
	n.clusterID.Store(&id)
	if err := n.ml.UpdateNode(2 * time.Second); err != nil {
		n.log.Warn("cannot gossip the updated node meta", "err", err)
	}
}

func (n *Node) maybeBootstrap() {
	if n.inCluster.Load() || n.cfg.BootstrapExpect == 0 {
		return
	}
	members := n.members()
	ids := make([]int32, 0, len(members))
	for id, m := range members {
		if m.InCluster {
			return // a cluster exists; its leader will add us
		}
		ids = append(ids, id)
	}
	// With cluster TLS only members whose raft mux answers over it
	// count: one with the gossip key but no cluster certificate must not
	// become a voter of the new controller.
	if n.cfg.TLS != nil && len(ids) >= n.cfg.BootstrapExpect {
		ids = slices.DeleteFunc(ids, func(id int32) bool { return !n.verifyMember(id, members[id]) })
	}
	if len(ids) < n.cfg.BootstrapExpect {
		return
	}
	slices.Sort(ids)
	if ids[0] != n.cfg.NodeID {
		return
	}
	var servers []raft.Server
	for _, id := range ids[:n.cfg.BootstrapExpect] {
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(strconv.Itoa(int(id))), Address: raft.ServerAddress(members[id].RaftAddr)})
	}
	err := n.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error()
	if err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		n.log.Error("cannot bootstrap the controller", "err", err)
		return
	}
	n.log.Info("controller bootstrapped", "voters", ids[:n.cfg.BootstrapExpect])
	n.setInCluster()
}

func (n *Node) refreshInCluster() {
	if n.inCluster.Load() {
		return
	}
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	for _, s := range f.Configuration().Servers {
		if s.ID == raft.ServerID(strconv.Itoa(int(n.cfg.NodeID))) {
			n.setInCluster()
			return
		}
	}
}

func (n *Node) setInCluster() {
	if !n.inCluster.Swap(true) {
		if err := n.ml.UpdateNode(2 * time.Second); err != nil {
			n.log.Warn("cannot gossip the updated node meta", "err", err)
		}
	}
}

// reconcile runs on the leader: every gossip member is registered alive
// and in the raft configuration; a registered broker missing from gossip
// for DeadAfter is marked not alive. Raft membership only grows here: a
// dead broker stays a voter so that its restart rejoins the quorum.
func (n *Node) reconcile(ctx context.Context) {
	md := n.Metadata()
	if md.ClusterID == "" {
		var raw [16]byte
		_, _ = rand.Read(raw[:])
		n.applyLogged(ctx, Command{Op: OpSetClusterID, ClusterID: base64.RawURLEncoding.EncodeToString(raw[:])})
	}
	members := n.members()
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		n.log.Warn("cannot read the controller configuration", "err", err)
		return
	}
	inConfig := map[raft.ServerID]raft.Server{}
	voters := 0
	for _, s := range f.Configuration().Servers {
		inConfig[s.ID] = s
		if s.Suffrage == raft.Voter {
			voters++
		}
	}
	for id, m := range members {
		if m.Cluster != "" && m.Cluster != md.ClusterID {
			continue // let in before this node knew its cluster id: never a voter
		}
		if s, ok := inConfig[raft.ServerID(strconv.Itoa(int(id)))]; (!ok || s.Address != raft.ServerAddress(m.RaftAddr)) && !n.verifyMember(id, m) {
			continue
		}
		b, ok := md.Brokers[id]
		if !ok || !b.Alive || b.KafkaAddr != m.KafkaAddr || !maps.Equal(b.Listeners, m.Listeners) || b.RaftAddr != m.RaftAddr || b.GossipAddr != m.Gossip {
			n.applyLogged(ctx, Command{Op: OpRegisterBroker, Broker: &BrokerInfo{ID: id, KafkaAddr: m.KafkaAddr, Listeners: m.Listeners, RaftAddr: m.RaftAddr, GossipAddr: m.Gossip, Alive: true}})
		}
		sid := raft.ServerID(strconv.Itoa(int(id)))
		s, ok := inConfig[sid]
		if ok && s.Address == raft.ServerAddress(m.RaftAddr) {
			continue
		}
		var err error
		if voters < n.cfg.MaxVoters || (ok && s.Suffrage == raft.Voter) {
			err = n.raft.AddVoter(sid, raft.ServerAddress(m.RaftAddr), 0, 5*time.Second).Error()
			if err == nil && !ok {
				voters++
			}
			n.log.Info("broker added to the controller as voter", "node_id", id, "raft", m.RaftAddr, "err", err)
		} else {
			err = n.raft.AddNonvoter(sid, raft.ServerAddress(m.RaftAddr), 0, 5*time.Second).Error()
			n.log.Info("broker added to the controller as non-voter", "node_id", id, "raft", m.RaftAddr, "err", err)
		}
	}
	now := time.Now()
	for id, b := range md.Brokers {
		if _, ok := members[id]; ok || !b.Alive {
			delete(n.missing, id)
			continue
		}
		since, ok := n.missing[id]
		if !ok {
			n.missing[id] = now
			continue
		}
		if now.Sub(since) >= n.cfg.DeadAfter {
			n.log.Info("broker left gossip; marking it not alive", "node_id", id)
			n.applyLogged(ctx, Command{Op: OpSetBrokerAlive, BrokerID: id, Alive: false})
			delete(n.missing, id)
		}
	}
}

// verifyMember reports whether a gossip member that is not (at this
// address) in the controller may be added or bootstrap it: without cluster TLS always;
// with it, once its raft mux answered over mutual TLS, so a process that
// holds the gossip key but no certificate of the cluster is neither
// registered nor made a voter. Runs on the loop goroutine.
func (n *Node) verifyMember(id int32, m nodeMeta) bool {
	if n.cfg.TLS == nil || id == n.cfg.NodeID {
		return true
	}
	c, _, err := n.dialWatch(n.runCtx, raft.ServerAddress(m.RaftAddr))
	if err == nil {
		c.Close()
		delete(n.unverified, id)
		return true
	}
	if n.unverified == nil {
		n.unverified = map[int32]bool{}
	}
	if !n.unverified[id] {
		n.unverified[id] = true
		n.log.Warn("a gossip member's raft mux does not answer over the cluster's TLS; it is not added to the controller", "node_id", id, "raft", m.RaftAddr, "err", err)
	}
	return false
}

func (n *Node) applyLogged(ctx context.Context, c Command) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := n.applyLocal(ctx, c); err != nil {
		n.log.Warn("controller command failed", "op", c.Op, "err", err)
	}
}

// Apply runs c through the controller: on the leader directly, elsewhere
// forwarded to the leader over the raft mux. It retries while there is no
// leader or the leader moves, until ctx ends; then it returns ErrNoLeader
// or ErrNotLeader (wrapped). A command that was applied but failed (topic
// exists, …) returns its Result and the error wrapping the FSM's sentinel.
func (n *Node) Apply(ctx context.Context, c Command) (Result, error) {
	for {
		var res Result
		var err error
		if n.IsLeader() && c.Op == opReadIndex {
			return Result{Index: n.Metadata().Index}, nil
		} else if n.IsLeader() {
			res, err = n.applyLocal(ctx, c)
		} else {
			res, err = n.forward(ctx, c)
		}
		if err == nil || !(errors.Is(err, ErrNotLeader) || errors.Is(err, ErrNoLeader)) {
			return res, err
		}
		select {
		case <-ctx.Done():
			return res, fmt.Errorf("cannot apply %s: %w (%v)", c.Op, err, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// CatchUp waits until this node's metadata includes everything the leader
// had applied when CatchUp was called (a read barrier for followers: a
// topic just created on the leader is then visible here). On the leader
// it returns at once.
func (n *Node) CatchUp(ctx context.Context) error {
	if n.IsLeader() {
		// A new leader may not have applied its predecessor's last
		// entries yet; a barrier waits for that.
		timeout := 10 * time.Second
		if d, ok := ctx.Deadline(); ok {
			timeout = time.Until(d)
		}
		if err := n.raft.Barrier(timeout).Error(); err != nil {
			return fmt.Errorf("cannot catch up as leader: %w", err)
		}
		return nil
	}
	res, err := n.Apply(ctx, Command{Op: opReadIndex})
	if err != nil {
		return err
	}
	for n.Metadata().Index < res.Index {
		select {
		case <-ctx.Done():
			return fmt.Errorf("metadata at index %d, leader at %d: %w", n.Metadata().Index, res.Index, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

func (n *Node) applyLocal(ctx context.Context, c Command) (Result, error) {
	data, err := json.Marshal(c)
	if err != nil {
		return Result{}, err
	}
	timeout := 10 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	f := n.raft.Apply(data, timeout)
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrLeadershipTransferInProgress) {
			return Result{}, fmt.Errorf("%w: %v", ErrNotLeader, err)
		}
		n.commands.WithLabelValues(string(c.Op), "raft_error").Inc()
		return Result{}, fmt.Errorf("cannot apply %s through raft: %w", c.Op, err)
	}
	n.nudgeCommit()
	res, _ := f.Response().(Result)
	if res.Code != "" {
		n.commands.WithLabelValues(string(c.Op), res.Code).Inc()
	} else {
		n.commands.WithLabelValues(string(c.Op), "ok").Inc()
	}
	return res, res.Err()
}

// forward sends c to the leader and waits for its Result.
func (n *Node) forward(ctx context.Context, c Command) (Result, error) {
	addr, _ := n.raft.LeaderWithID()
	if addr == "" {
		return Result{}, ErrNoLeader
	}
	n.forwards.Inc()
	conn, err := n.mux.dialForward(ctx, addr)
	if err != nil {
		return Result{}, fmt.Errorf("%w: cannot reach the leader at %s: %v", ErrNoLeader, addr, err)
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	} else {
		_ = conn.SetDeadline(time.Now().Add(15 * time.Second))
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	data, _ := json.Marshal(c)
	if err := writeFrame(conn, data); err != nil {
		return Result{}, fmt.Errorf("%w: cannot send command to the leader at %s: %v", ErrNoLeader, addr, err)
	}
	resp, err := readFrame(bufio.NewReader(conn))
	if err != nil {
		return Result{}, fmt.Errorf("%w: no answer from the leader at %s: %v", ErrNoLeader, addr, err)
	}
	var res Result
	if err := json.Unmarshal(resp, &res); err != nil {
		return Result{}, fmt.Errorf("cannot decode the leader's answer: %w", err)
	}
	return res, res.Err()
}

// serveForward answers one forwarded command (runs on a mux goroutine).
func (n *Node) serveForward(conn net.Conn) {
	defer conn.Close()
	stop := context.AfterFunc(n.runCtx, func() { conn.Close() })
	defer stop()
	_ = conn.SetReadDeadline(time.Now().Add(headerTimeout))
	data, err := readFrame(bufio.NewReader(conn))
	if err != nil {
		return
	}
	var c Command
	var res Result
	if err := json.Unmarshal(data, &c); err != nil {
		res = failure(ErrBadCommand, "cannot decode forwarded command: %v", err)
	} else if c.Op == opReadIndex {
		if n.IsLeader() {
			res = Result{Index: n.Metadata().Index}
		} else {
			res = Result{Code: "not_leader", Message: "not the controller leader"}
		}
	} else {
		ctx, cancel := context.WithTimeout(n.runCtx, 10*time.Second)
		var err error
		res, err = n.applyLocal(ctx, c)
		cancel()
		if errors.Is(err, ErrNotLeader) {
			res = Result{Code: "not_leader", Message: err.Error()}
		} else if err != nil && res.Code == "" {
			res = Result{Code: "other", Message: err.Error()}
		}
	}
	out, _ := json.Marshal(res)
	_ = conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_ = writeFrame(conn, out)
}

type gossipDelegate struct{ n *Node }

func (d *gossipDelegate) NodeMeta(limit int) []byte {
	n := d.n
	b, _ := json.Marshal(n.selfMeta())
	if len(b) > limit {
		n.log.Error("gossip node meta over the limit", "bytes", len(b), "limit", limit)
		return nil
	}
	return b
}

// NotifyAlive refuses a member of another cluster. Both clusters would
// otherwise merge their gossip, and the controller leader would make the
// stranger a voter: a broker of one cluster that rejoins a remembered
// address now taken by a broker of another (a reused host or port) would
// leave the second's controller without a quorum once it went away.
// Members that do not know their cluster id yet (new brokers) are let in.
func (d *gossipDelegate) NotifyAlive(peer *memberlist.Node) error {
	return d.n.sameCluster(peer)
}

// NotifyMerge refuses a join (a push-pull exchange) with a member of
// another cluster, from either side.
func (d *gossipDelegate) NotifyMerge(peers []*memberlist.Node) error {
	for _, p := range peers {
		if err := d.n.sameCluster(p); err != nil {
			return err
		}
	}
	return nil
}

func (n *Node) sameCluster(peer *memberlist.Node) error {
	ours := n.gossipClusterID()
	if ours == "" || len(peer.Meta) == 0 {
		return nil
	}
	var meta nodeMeta
	if err := json.Unmarshal(peer.Meta, &meta); err != nil || meta.Cluster == "" || meta.Cluster == ours {
		return nil
	}
	n.foreignMembers.Inc()
	return fmt.Errorf("member %s (%s) belongs to cluster %s, this broker to cluster %s: not let in; a broker of another cluster reached this one's gossip (check --join and the addresses brokers remember in controller/peers.json)", peer.Name, peer.Address(), meta.Cluster, ours)
}

func (d *gossipDelegate) NotifyMsg([]byte)                           {}
func (d *gossipDelegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *gossipDelegate) LocalState(join bool) []byte                { return nil }
func (d *gossipDelegate) MergeRemoteState(buf []byte, join bool)     {}

type gossipEvents struct{ n *Node }

func (e *gossipEvents) signal() {
	select {
	case e.n.events <- struct{}{}:
	default:
	}
}

// The callbacks run under memberlist's lock: copy what is needed.
func (e *gossipEvents) NotifyJoin(m *memberlist.Node)   { e.put(m) }
func (e *gossipEvents) NotifyUpdate(m *memberlist.Node) { e.put(m) }
func (e *gossipEvents) NotifyLeave(m *memberlist.Node) {
	e.n.gossip.Lock()
	delete(e.n.gossip.members, m.Name)
	e.n.gossip.Unlock()
	e.signal()
}

func (e *gossipEvents) put(m *memberlist.Node) {
	var meta nodeMeta
	if err := json.Unmarshal(m.Meta, &meta); err != nil {
		e.n.log.Warn("gossip member without valid meta", "member", m.Name, "err", err)
		return
	}
	meta.Gossip = m.Address()
	e.n.gossip.Lock()
	e.n.gossip.members[m.Name] = meta
	e.n.gossip.Unlock()
	e.signal()
}
