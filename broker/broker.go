package broker

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/simtel/simtel/broker/admin"
	"github.com/simtel/simtel/broker/cluster"
	"github.com/simtel/simtel/broker/group"
	"github.com/simtel/simtel/broker/kapi"
	"github.com/simtel/simtel/broker/secstate"
	"github.com/simtel/simtel/broker/server"
	"github.com/simtel/simtel/broker/txn"
	"github.com/simtel/simtel/internal/fdlimit"
	"github.com/simtel/simtel/internal/tick"
)

// minOpenFiles is the open-file limit below which the broker warns at
// start. Every client connection holds a descriptor, and every partition
// replica its segment files and its raft log: a cluster of a few thousand
// agents (each connected to every broker) and a few thousand partitions
// needs tens of thousands. deploy/ raises the limit to 1,048,576.
const minOpenFiles = 65536

// Broker is one Kafka-compatible broker node. New opens its state from
// DataDir; Run serves until its context ends; Close releases everything.
type Broker struct {
	cfg       Config
	log       *slog.Logger
	clusterID string
	metrics   *metrics
	groups    *group.Coordinator
	pids      *pidAllocator
	apis      *kapi.Registry // the APIs served, from their NN_ files
	// srv is the connection server: the listeners, the connections and
	// the SASL exchange (package server).
	srv *server.Server
	// cluster is the controller membership in cluster mode, nil on a
	// single node. Topics then come from its metadata (see cluster.go).
	cluster *cluster.Node
	// txn is the transaction coordinators: one on a single node, in
	// cluster mode one per __transaction_state partition this broker
	// leads (package txn; the broker's side in transactions.go).
	txn *txn.Coordinators
	// sec is the SCRAM credentials and ACLs.
	sec *secstate.State
	// coords holds, in cluster mode, the coordinators of the offsets
	// partitions this broker leads (see coordinators.go); b.groups is
	// then nil.
	coords struct {
		sync.RWMutex
		slots map[int32]*coordSlot
	}

	// synced holds the partition directories that were there when New
	// synced the data directory's file system: their first open needs no
	// fsync of each file (storage.Config.Durable).
	synced struct {
		sync.Mutex
		dirs map[string]bool
	}

	mu struct {
		sync.RWMutex
		topics map[string]*topic
	}
	// adminMu serializes topic creation, deletion and config changes so
	// the topics file and the in-memory map change together.
	adminMu sync.Mutex

	httpLn  net.Listener
	ready   atomic.Bool
	closeMu sync.Once
}

type nodeMeta struct {
	ClusterID string `json:"cluster_id"`
	NodeID    int32  `json:"node_id"`
}

// New opens (or initialises) the broker's data directory and binds its
// listeners, so a caller knows the addresses before Run.
func New(cfg Config) (*Broker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b := &Broker{cfg: cfg, log: cfg.Logger}
	b.mu.topics = make(map[string]*topic)
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "data"), 0o755); err != nil {
		return nil, fmt.Errorf("cannot create data directory %q: %w", cfg.DataDir, err)
	}
	b.syncDataDir()
	meta, err := b.loadNodeMeta()
	if err != nil {
		return nil, err
	}
	b.clusterID = meta.ClusterID
	b.metrics = newMetrics(b)
	b.txn = b.newTxnCoordinators()
	b.apis = b.newRegistry()
	if b.sec, err = secstate.Open(secstate.Config{
		Dir:                       cfg.DataDir,
		Clustered:                 cfg.clustered(),
		ACL:                       cfg.Authorizer == AuthorizerACL,
		SuperUsers:                cfg.SuperUsers,
		AllowEveryoneIfNoACLFound: cfg.AllowEveryoneIfNoACLFound,
		Logger:                    b.log,
	}); err != nil {
		return nil, err
	}
	if b.pids, err = openPIDAllocator(filepath.Join(cfg.DataDir, "producer-ids")); err != nil {
		return nil, err
	}
	if err := b.loadTopics(); err != nil {
		b.closePartitions()
		return nil, err
	}
	b.coords.slots = map[int32]*coordSlot{}
	if !cfg.clustered() {
		if err := b.openLocalCoordinator(); err != nil {
			b.closePartitions()
			return nil, err
		}
	}
	if !cfg.clustered() {
		if err = b.txn.Open(); err != nil {
			b.Close()
			return nil, err
		}
	}
	if err := b.startServer(); err != nil {
		b.Close()
		return nil, err
	}
	if cfg.clustered() {
		if err := b.startCluster(); err != nil {
			b.Close()
			return nil, err
		}
	}
	if cfg.HTTPListen != "" {
		if b.httpLn, err = net.Listen("tcp", cfg.HTTPListen); err != nil {
			b.Close()
			return nil, fmt.Errorf("cannot listen for http on %s: %w", cfg.HTTPListen, err)
		}
	}
	return b, nil
}

// openLocalCoordinator starts the single-node group coordinator on
// partition 0 of the local __consumer_offsets.
func (b *Broker) openLocalCoordinator() error {
	offsets, err := b.ensureOffsetsTopic()
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(b.cfg.DataDir, "groups")); err == nil {
		b.log.Warn("ignoring the group store of an older version: committed offsets now live in "+offsetsTopic, "dir", filepath.Join(b.cfg.DataDir, "groups"))
	}
	// The coordinator's store writes to the partition's log directly; a
	// batch it has synced is committed, so the high watermark moves.
	logger := b.log.With("part", "groups")
	store, err := group.OpenLogStore(offsets.Log(), logger, func(int64) { offsets.AdvanceHW() })
	if err != nil {
		return fmt.Errorf("cannot open group offsets: %w", err)
	}
	if b.groups, err = group.New(b.groupConfig(store, logger)); err != nil {
		store.Close()
		return fmt.Errorf("cannot start group coordinator: %w", err)
	}
	return nil
}

// apis are the APIs the broker itself answers, each declared in its NN_
// file. Only record batches (magic 2) are stored, so Produce and Fetch
// start at v3 and v4; every other range is at least Kafka 2.8's where the
// semantics are implemented.
var apis kapi.Table[*Broker]

// newRegistry is the table of every API this broker serves: its own and
// the coordinators'. The server adds the ones a connection answers itself
// (ApiVersions and the SASL exchange).
func (b *Broker) newRegistry() *kapi.Registry {
	reg := kapi.NewRegistry(b.cfg.clustered())
	reg.Add(apis.Bind(b)...)
	reg.Add(admin.APIs.Bind(adminBroker{b})...)
	reg.Add(group.APIs.Bind(groupRouter{b})...)
	reg.Add(txn.APIs.Bind(b.txn)...)
	return reg
}

// groupRouter finds this broker's group coordinators for the group APIs.
type groupRouter struct{ b *Broker }

func (g groupRouter) Single() *group.Coordinator {
	if g.b.cluster != nil {
		return nil
	}
	return g.b.groups
}

func (g groupRouter) CoordinatorFor(id string) (*group.Coordinator, int16) {
	return g.b.coordinatorFor(id)
}

func (g groupRouter) Served() []*group.Coordinator {
	g.b.wakeCoordinators()
	return g.b.servedCoordinators()
}

// startServer binds the listeners. SASL's PLAIN and SCRAM check the
// broker's own credentials unless the config names others.
func (b *Broker) startServer() error {
	sasl := b.cfg.SASL
	if sasl.Credentials == nil {
		sasl.Credentials = b.sec
	}
	var err error
	b.srv, err = server.New(server.Config{
		Listeners:               b.cfg.Listeners,
		AdvertisedListeners:     b.cfg.AdvertisedListeners,
		TLS:                     b.cfg.TLS,
		TLSPrincipalMapping:     b.cfg.TLSPrincipalMapping,
		TLSReloadInterval:       b.cfg.TLSReloadInterval,
		SASL:                    sasl,
		MaxRequestBytes:         b.cfg.MaxRequestBytes,
		MaxInflightRequestBytes: b.cfg.MaxInflightRequestBytes,
		MaxInflightPerConn:      b.cfg.MaxInflightPerConn,
		APIs:                    b.apis,
		Authorizer:              b.sec.Authorizer(),
		Metrics:                 b.metrics.reg,
		Logger:                  b.log,
	})
	if err != nil {
		return err
	}
	b.cfg.Advertise = b.srv.Bound()[0].Advertise
	return nil
}

// Addr is the first Kafka listener's address (useful with port 0);
// ListenerAddr names another.
func (b *Broker) Addr() net.Addr { return b.srv.Bound()[0].Listen }

// ListenerAddr is the bound address of the named listener, nil if there
// is none of that name.
func (b *Broker) ListenerAddr(name string) net.Addr {
	for _, l := range b.srv.Bound() {
		if l.Name == name {
			return l.Listen
		}
	}
	return nil
}

// ReloadTLS reads the TLS certificate, key and CA files again (SIGHUP),
// and the cluster's (cluster_tls.go).
// New connections get the new certificate; open ones keep theirs. On an
// error the previous files stay in use.
func (b *Broker) ReloadTLS() error {
	err := b.reloadClusterSecurity()
	if terr := b.srv.ReloadTLS(); terr != nil {
		return errors.Join(terr, err)
	}
	return err
}

// advertisedListeners maps each listener's name to its advertised
// address, as gossiped to the other brokers.
func (b *Broker) advertisedListeners() map[string]string {
	m := make(map[string]string, len(b.srv.Bound()))
	for _, l := range b.srv.Bound() {
		m[l.Name] = l.Advertise
	}
	return m
}

// interBrokerAddr is the advertised address of the listener the other
// brokers dial.
func (b *Broker) interBrokerAddr() string {
	for _, l := range b.srv.Bound() {
		if l.Name == b.cfg.InterBrokerListener {
			return l.Advertise
		}
	}
	return b.cfg.Advertise
}

// advertised is this broker's address on the named listener ("" or an
// unknown name: the inter-broker listener).
func (b *Broker) advertised(listenerName string) (string, int32) {
	for _, l := range b.srv.Bound() {
		if l.Name == listenerName {
			return splitHostPort(l.Advertise)
		}
	}
	return splitHostPort(b.interBrokerAddr())
}

// brokerAddr is where a client of the named listener reaches a broker of
// the cluster: its address on the listener of that name; a broker
// registered before named listeners existed has only KafkaAddr. A broker
// without that listener is not reachable from it (ok false), and Kafka
// leaves such a broker out.
func brokerAddr(listenerName string, br cluster.BrokerInfo) (host string, port int32, ok bool) {
	if len(br.Listeners) == 0 || listenerName == "" {
		host, port = splitHostPort(br.KafkaAddr)
		return host, port, true
	}
	addr, ok := br.Listeners[listenerName]
	if !ok {
		return "", 0, false
	}
	host, port = splitHostPort(addr)
	return host, port, true
}

// HTTPAddr is the HTTP listener's address, nil without one.
func (b *Broker) HTTPAddr() net.Addr {
	if b.httpLn == nil {
		return nil
	}
	return b.httpLn.Addr()
}

// Run serves Kafka and HTTP until ctx ends, then closes the broker.
func (b *Broker) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var srv *http.Server
	if b.httpLn != nil {
		srv = &http.Server{Handler: b.httpHandler(), ReadHeaderTimeout: 10 * time.Second}
		wg.Go(func() {
			if err := srv.Serve(b.httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				b.log.Error("http server stopped", "err", err)
			}
		})
	}
	wg.Go(func() { b.maintenanceLoop(ctx) })
	wg.Go(func() { b.srv.Run(ctx) })
	if b.cluster == nil {
		wg.Go(func() { b.txn.Run(ctx) })
	}
	// The cluster node (raft mux, gossip, controller) stops only after
	// this broker has handed off its partition leaderships.
	clusterCtx, stopCluster := context.WithCancel(context.WithoutCancel(ctx))
	defer stopCluster()
	if b.cluster != nil {
		wg.Go(func() { b.reportLeaders(ctx) })
		wg.Go(func() { b.placementLoop(ctx) })
		wg.Go(func() { b.runCoordinators(ctx) })
		if b.cfg.ReplicaDormantAfter > 0 {
			wg.Go(func() { b.sleepIdlePartitions(ctx) })
		}
		wg.Go(func() {
			if err := b.cluster.Run(clusterCtx); err != nil {
				b.log.Warn("cluster node stopped with an error", "err", err)
			}
		})
		wg.Go(func() { b.followClusterMetadata(ctx) })
	}
	b.ready.Store(true)
	fdlimit.Log(b.log, minOpenFiles, "each client connection and each partition's segment and raft files take one")
	for _, l := range b.srv.Bound() {
		b.log.Info("broker serving", "node_id", b.cfg.NodeID, "listener", l.Name, "protocol", l.Proto, "listen", l.Listen.String(), "advertise", l.Advertise, "cluster_id", b.clusterID)
	}
	<-ctx.Done()
	if b.cluster != nil {
		// The other brokers stop naming this one in their answers
		// before its listener refuses the clients they send here.
		b.cluster.Leaving()
	}
	// Refuse new client connections at once: one accepted now would be
	// closed before its first answer (its context is cancelled), which a
	// client may take as a failed request rather than a broker to skip;
	// a refused dial is retried on another broker.
	b.srv.CloseListeners()
	if b.cluster != nil {
		b.handOffLeadership()
	}
	stopCluster()
	b.ready.Store(false)
	b.srv.CloseConns()
	if srv != nil {
		sctx, c := context.WithTimeout(context.Background(), 2*time.Second)
		_ = srv.Shutdown(sctx)
		c()
	}
	wg.Wait()
	return b.Close()
}

// Close stops the group coordinator and closes every partition log.
// Safe to call more than once.
func (b *Broker) Close() error {
	var err error
	b.closeMu.Do(func() {
		if b.srv != nil {
			b.srv.CloseListeners()
		}
		if b.httpLn != nil {
			b.httpLn.Close()
		}
		if b.cluster != nil {
			err = errors.Join(err, b.cluster.Close())
		}
		if b.groups != nil {
			err = errors.Join(err, b.groups.Close())
		}
		err = errors.Join(err, b.closePartitions())
	})
	return err
}

func (b *Broker) loadNodeMeta() (nodeMeta, error) {
	path := filepath.Join(b.cfg.DataDir, "meta.json")
	var m nodeMeta
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := json.Unmarshal(data, &m); err != nil {
			return m, fmt.Errorf("cannot parse %s: %w", path, err)
		}
		if m.NodeID != b.cfg.NodeID {
			return m, fmt.Errorf("data directory %s belongs to node %d, not %d: pass --node-id %d or use another --data-dir", b.cfg.DataDir, m.NodeID, b.cfg.NodeID, m.NodeID)
		}
		return m, nil
	case errors.Is(err, os.ErrNotExist):
		var raw [16]byte
		_, _ = rand.Read(raw[:])
		m = nodeMeta{ClusterID: base64.RawURLEncoding.EncodeToString(raw[:]), NodeID: b.cfg.NodeID}
		out, _ := json.Marshal(m)
		return m, writeFileAtomic(path, out)
	default:
		return m, fmt.Errorf("cannot read %s: %w", path, err)
	}
}

// writeFileAtomic replaces path with data so a crash leaves either the old
// or the new content: write a temp file, fsync, rename, fsync the directory.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("cannot create %s: %w", tmp, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("cannot write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("cannot sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("cannot close %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("cannot replace %s: %w", path, err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// maintenanceLoop runs retention and compaction for every partition.
func (b *Broker) maintenanceLoop(ctx context.Context) {
	tick.Every(ctx, b.cfg.RetentionCheckInterval, b.runMaintenance)
}

func (b *Broker) runMaintenance() {
	for _, p := range b.allPartitions() {
		if n, err := p.Log().EnforceRetention(p.RetentionFloor(func(g string) (int64, bool) {
			return b.committedOffset(g, p.Topic(), p.Index())
		})); err != nil {
			b.log.Warn("retention failed", "topic", p.Topic(), "partition", p.Index(), "err", err)
		} else if n > 0 {
			b.log.Info("retention deleted segments", "topic", p.Topic(), "partition", p.Index(), "bytes", n)
		}
		if p.Compacted() {
			if st, err := p.Compact(); err != nil {
				b.log.Warn("compaction failed", "topic", p.Topic(), "partition", p.Index(), "err", err)
			} else {
				b.log.Debug("compaction done", "topic", p.Topic(), "partition", p.Index(), "stats", fmt.Sprintf("%+v", st))
			}
		}
	}
}
