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

	"golang.org/x/sync/semaphore"

	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/broker/cluster"
	"github.com/simtel/simtel/broker/group"
	"github.com/simtel/simtel/broker/kapi"
	"github.com/simtel/simtel/broker/txn"
	"github.com/simtel/simtel/internal/tick"
	"github.com/simtel/simtel/internal/tlsfiles"
)

// Broker is one Kafka-compatible broker node. New opens its state from
// DataDir; Run serves until its context ends; Close releases everything.
type Broker struct {
	cfg       Config
	log       *slog.Logger
	clusterID string
	metrics   *metrics
	groups    *group.Coordinator
	pids      *pidAllocator
	reqBytes  *semaphore.Weighted // request bytes in flight, all connections
	apis      *kapi.Registry      // the APIs served, from their NN_ files
	// cluster is the controller membership in cluster mode, nil on a
	// single node. Topics then come from its metadata (see cluster.go).
	cluster *cluster.Node
	// txn is the transaction coordinators: one on a single node, in
	// cluster mode one per __transaction_state partition this broker
	// leads (package txn; the broker's side in transactions.go).
	txn *txn.Coordinators
	// sec is the SCRAM credentials and ACLs (secstate.go).
	sec *secState
	// sasl is the SASL listeners' mechanisms (sasl.go).
	sasl *saslState
	// coords holds, in cluster mode, the coordinators of the offsets
	// partitions this broker leads (see coordinators.go); b.groups is
	// then nil.
	coords struct {
		sync.RWMutex
		slots map[int32]*coordSlot
	}

	mu struct {
		sync.RWMutex
		topics map[string]*topic
	}
	// adminMu serializes topic creation, deletion and config changes so
	// the topics file and the in-memory map change together.
	adminMu sync.Mutex

	connsMu sync.Mutex
	conns   map[net.Conn]struct{}

	// listeners are the Kafka listeners (listeners.go); tls serves the
	// certificate of the TLS ones, principals names their clients.
	listeners  []*listener
	tls        *tlsfiles.Server
	principals *auth.PrincipalMapping
	httpLn     net.Listener
	ready      atomic.Bool
	closeMu    sync.Once
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
	b := &Broker{cfg: cfg, log: cfg.Logger, conns: make(map[net.Conn]struct{}), reqBytes: semaphore.NewWeighted(cfg.MaxInflightRequestBytes)}
	b.mu.topics = make(map[string]*topic)
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "data"), 0o755); err != nil {
		return nil, fmt.Errorf("cannot create data directory %q: %w", cfg.DataDir, err)
	}
	meta, err := b.loadNodeMeta()
	if err != nil {
		return nil, err
	}
	b.clusterID = meta.ClusterID
	b.metrics = newMetrics(b)
	b.txn = b.newTxnCoordinators()
	b.apis = b.newRegistry()
	if b.sec, err = openSecState(b); err != nil {
		return nil, err
	}
	if b.sasl, err = newSASL(b); err != nil {
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
	if err := b.openListeners(); err != nil {
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

// Addr is the first Kafka listener's address (useful with port 0);
// ListenerAddr names another.
func (b *Broker) Addr() net.Addr { return b.listeners[0].ln.Addr() }

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
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Serve(b.httpLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				b.log.Error("http server stopped", "err", err)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		b.maintenanceLoop(ctx)
	}()
	for _, l := range b.listeners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.serve(ctx, l)
		}()
	}
	if b.tls != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.tls.Watch(ctx, b.cfg.TLSReloadInterval)
		}()
	}
	if b.cluster == nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.txn.Run(ctx)
		}()
	}
	// The cluster node (raft mux, gossip, controller) stops only after
	// this broker has handed off its partition leaderships.
	clusterCtx, stopCluster := context.WithCancel(context.WithoutCancel(ctx))
	defer stopCluster()
	if b.cluster != nil {
		wg.Add(5)
		go func() {
			defer wg.Done()
			b.reportLeaders(ctx)
		}()
		go func() {
			defer wg.Done()
			b.placementLoop(ctx)
		}()
		go func() {
			defer wg.Done()
			b.runCoordinators(ctx)
		}()
		go func() {
			defer wg.Done()
			if err := b.cluster.Run(clusterCtx); err != nil {
				b.log.Warn("cluster node stopped with an error", "err", err)
			}
		}()
		go func() {
			defer wg.Done()
			b.followClusterMetadata(ctx)
		}()
	}
	b.ready.Store(true)
	for _, l := range b.listeners {
		b.log.Info("broker serving", "node_id", b.cfg.NodeID, "listener", l.Name, "protocol", l.Proto, "listen", l.ln.Addr().String(), "advertise", l.advertise, "cluster_id", b.clusterID)
	}
	<-ctx.Done()
	// Refuse new client connections at once: one accepted now would be
	// closed before its first answer (its context is cancelled), which a
	// client may take as a failed request rather than a broker to skip;
	// a refused dial is retried on another broker.
	b.closeListeners()
	if b.cluster != nil {
		b.handOffLeadership()
	}
	stopCluster()
	b.ready.Store(false)
	b.closeConns()
	if srv != nil {
		sctx, c := context.WithTimeout(context.Background(), 2*time.Second)
		_ = srv.Shutdown(sctx)
		c()
	}
	wg.Wait()
	return b.Close()
}

func (b *Broker) trackConn(nc net.Conn, add bool) {
	b.connsMu.Lock()
	defer b.connsMu.Unlock()
	if add {
		b.conns[nc] = struct{}{}
	} else {
		delete(b.conns, nc)
	}
}

func (b *Broker) closeConns() {
	b.connsMu.Lock()
	defer b.connsMu.Unlock()
	for nc := range b.conns {
		nc.Close()
	}
}

// Close stops the group coordinator and closes every partition log.
// Safe to call more than once.
func (b *Broker) Close() error {
	var err error
	b.closeMu.Do(func() {
		b.closeListeners()
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
			if st, err := p.Log().Compact(); err != nil {
				b.log.Warn("compaction failed", "topic", p.Topic(), "partition", p.Index(), "err", err)
			} else {
				b.log.Debug("compaction done", "topic", p.Topic(), "partition", p.Index(), "stats", fmt.Sprintf("%+v", st))
			}
		}
	}
}
