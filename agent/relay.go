package agent

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/simtel/simtel/agent/gossip"
	"github.com/simtel/simtel/learner"
)

// Peer relay. The agents of a gossip pool serve the chunks of the policy
// versions they hold to each other on a port of their own
// (--policy-relay-listen), and a node fetches each chunk of a new version
// it lacks from a peer that holds the version before it asks the brokers:
//
//	GET /v1/relay/<policy>/<version>/<xxh3-128 of the chunk>
//	Authorization: Simtel-Relay <hex HMAC-SHA256(pool key, "GET " + path)>
//
// The key is the pool's shared secret (--policy-relay-key, the same file on
// every node); a request without the right HMAC gets 401. The HMAC covers
// the path only, so a request seen on the wire can be replayed for the
// same chunk, whose bytes were on the wire too: the key keeps nodes
// outside the pool from reading policies, it does not hide them from
// whoever watches the network. What a peer serves is not trusted: each
// chunk is checked against the xxh3-128 of the signed manifest, which the
// node always reads from the brokers, and the whole version against its
// SHA-256 and signature as before.
//
// Broker egress. When a version appears every node notices it within a
// poll or two. The nodes rank themselves by a hash of their name and the
// version (every node computes the same order from the pool's view, and
// it changes with each version, so the broker fetches move around the
// pool): the first --policy-relay-seeds of them fetch from the brokers at
// once; the others wait for a peer to hold the version and fetch from
// peers, which become holders in turn. A node that sees no holder within
// --policy-relay-wait × (1 + rank/nodes) fetches from the brokers: if the
// seeds fail, nodes fall back one after another over up to twice the
// wait, and those that fall back late find the early ones' copies. Past
// that deadline a node also stops asking peers once none has delivered a
// chunk for relayStall, so peers that answer late or "not yet" every time
// cannot hold a version back from it. Broker egress per version is then
// about seeds + 1 copies plus the chunks peers failed to serve, whatever
// the number of nodes.
//
// Pipelining: a node serves the chunks of the version it is still
// assembling as soon as each is written (learner's OnChunk), and
// advertises that version under "<policy>/fetching" in the pool. A node
// asks such partial holders only if they come before it in the version's
// order, so chunks flow from the seeds down that order and no two nodes
// wait for each other; a partial holder asked for a chunk it does not have
// yet holds the request up to relayPartialWait for it to arrive.
//
// Spreading the uploads. Asked by every node after them, the first nodes
// of the order (the seeds above all, which also finish first) would serve
// most copies: their links, not the pool's, would bound a version's time.
// So a node of rank k asks the holders of ranks (k-seeds)/2 to k-1, its
// sources, and the others (holders outside that window, full holders
// after it) only once its sources have failed it for a chunk: a node of
// rank j is a source of the about j+seeds nodes after it, each spreading
// its chunks over about (k+seeds)/2 sources, which comes to about 2 ln 2
// ≈ 1.4 copies served per node whatever the pool's size, when sources
// answer alike (TestRelaySourceWindows). Within the
// sources a node asks for each chunk the first in an order drawn from a
// hash of the chunk, the node and the source (unless it has relayPerPeer
// requests under way there), so that the nodes fetching a chunk go to
// different sources and each source gets its share of a node's chunks.

const (
	// relayPerNode bounds one node's concurrent requests in all: enough
	// to keep a link busy with chunks of 64 KiB to 1 MiB. relayPerPeer
	// bounds those to one peer: half of them, since a node has two
	// sources or more (all but the first after a single seed), so that
	// its requests go where the spread score sends them even while a
	// source that is behind in the version holds some waiting; with a
	// quarter, the requests past them went to whichever source answered
	// first, the seeds above all, which then served most copies again. A
	// stalled peer holds half of a node's requests until
	// relayChunkTimeout.
	relayPerNode = 16
	relayPerPeer = relayPerNode / 2
	// relayServeMax bounds the chunks a node serves at once; further
	// requests wait for a slot.
	relayServeMax = 32
	// relayChunkTimeout bounds one chunk request, waiting for a slot on
	// the peer included: a stalled peer costs this much, then another
	// peer or the broker serves the chunk.
	relayChunkTimeout = 10 * time.Second
	// relayTries is how many peers are asked for one chunk before the
	// broker is.
	relayTries = 3
	// relayBadFor is how long a peer that served bytes not matching the
	// manifest is not asked again; relayErrFor the same after a failed
	// request (refused, gone, timed out).
	relayBadFor = time.Minute
	relayErrFor = 5 * time.Second
	// relayHoldersEvery is how often the holders of a version are looked
	// up again in the pool's view while chunks are fetched.
	relayHoldersEvery = 200 * time.Millisecond
	// relaySourceWait is how long a node that sees none of its sources
	// (see the top of this file) in the pool's view waits for one before
	// it asks the other holders.
	relaySourceWait = time.Second
	// relayPartialWait is how long a node fetching a version holds a
	// request for a chunk it does not have yet before answering 404.
	relayPartialWait = 3 * time.Second
	// relayStall: once past its deadline, a node stops asking peers for
	// the chunks of a version when none has arrived for this long, and
	// takes the rest from the brokers. Without it a round of requests
	// was bounded only by chunks × relayTries × relayChunkTimeout, minutes
	// for a node whose peers answer late or "not yet" every time.
	relayStall      = relayChunkTimeout
	relayAuthScheme = "Simtel-Relay "
	minRelayKey     = 16
)

// relayStats are the relay's counters of one policy.
type relayStats struct {
	peerBytes, peerChunks, peerCorrupt, peerErrors atomic.Int64
	servedChunks, servedBytes                      atomic.Int64
}

// relay is an agent's side of the peer relay: the server and the fetcher.
type relay struct {
	key      []byte
	self     string // this node's gossip name
	pool     *gossip.Pool
	dir      string // PolicyDir
	seeds    int
	wait     time.Duration
	stall    time.Duration // relayStall; shorter in tests
	client   *http.Client
	log      *slog.Logger
	policies []string

	stats   map[string]*relayStats // by policy, fixed at start
	refused atomic.Int64           // requests without the pool's key

	serveSem chan struct{}
	srv      *http.Server
	served   chan struct{} // closed when the server's goroutine has returned

	mu struct {
		sync.Mutex
		avoid   map[string]time.Time       // peer node -> not asked before
		index   map[string]*chunkIndex     // by policy
		partial map[string]*partialVersion // by policy
	}
}

// readRelayKey reads the pool's key from path: its bytes, surrounding
// white space removed.
func readRelayKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read the policy relay key: %w", err)
	}
	b = bytes.TrimSpace(b)
	if len(b) < minRelayKey {
		return nil, fmt.Errorf("the policy relay key in %s is %d bytes, want at least %d (e.g. head -c 32 /dev/urandom | base64 > %s)", path, len(b), minRelayKey, path)
	}
	return b, nil
}

func newRelay(cfg *Config, key []byte, log *slog.Logger) *relay {
	r := &relay{
		key:      key,
		self:     cfg.Tags.Host,
		dir:      cfg.PolicyDir,
		seeds:    cfg.PolicyRelaySeeds,
		wait:     cfg.PolicyRelayWait,
		stall:    relayStall,
		log:      log,
		policies: cfg.Policies,
		stats:    map[string]*relayStats{},
		serveSem: make(chan struct{}, relayServeMax),
		client: &http.Client{Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 3 * time.Second}).DialContext,
			MaxIdleConnsPerHost: relayPerPeer,
			IdleConnTimeout:     time.Minute,
		}},
	}
	for _, p := range cfg.Policies {
		r.stats[p] = &relayStats{}
	}
	r.mu.avoid = map[string]time.Time{}
	r.mu.index = map[string]*chunkIndex{}
	r.mu.partial = map[string]*partialVersion{}
	return r
}

// sign returns the Authorization header value of a request for path.
func (r *relay) sign(path string) string {
	m := hmac.New(sha256.New, r.key)
	io.WriteString(m, "GET "+path)
	return relayAuthScheme + hex.EncodeToString(m.Sum(nil))
}

// authorized checks the request's HMAC in constant time.
func (r *relay) authorized(req *http.Request) bool {
	got, ok := strings.CutPrefix(req.Header.Get("Authorization"), relayAuthScheme)
	if !ok {
		return false
	}
	mac, err := hex.DecodeString(got)
	if err != nil {
		return false
	}
	m := hmac.New(sha256.New, r.key)
	io.WriteString(m, req.Method+" "+req.URL.Path)
	return hmac.Equal(mac, m.Sum(nil))
}

// serve runs the relay's HTTP server on l until close.
func (r *relay) serve(l net.Listener) {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/relay/", r.handle)
	r.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(r.log.Handler(), slog.LevelDebug)}
	r.served = make(chan struct{})
	go func() {
		defer close(r.served)
		if err := r.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			r.log.Error("policy relay stopped", "err", err)
		}
	}()
}

// close stops the server, waiting up to a second for the chunks being
// served, and returns once its goroutine has.
func (r *relay) close() {
	if r.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if r.srv.Shutdown(ctx) != nil {
			r.srv.Close()
		}
		<-r.served
	}
	r.client.CloseIdleConnections()
}

// handle serves GET /v1/relay/<policy>/<version>/<hash>: the chunk with
// that hash from version <version>, or from another version the node
// holds (chunks are named by their bytes; a delta shares most of them with
// its base).
func (r *relay) handle(w http.ResponseWriter, req *http.Request) {
	if !r.authorized(req) {
		r.refused.Add(1)
		http.Error(w, "the request is not signed with the pool's relay key", http.StatusUnauthorized)
		return
	}
	if req.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		http.Error(w, "use GET", http.StatusMethodNotAllowed)
		return
	}
	parts := strings.Split(strings.TrimPrefix(req.URL.Path, "/v1/relay/"), "/")
	if len(parts) != 3 {
		http.Error(w, "want /v1/relay/<policy>/<version>/<chunk hash>", http.StatusNotFound)
		return
	}
	policy, hash := parts[0], parts[2]
	version, err := strconv.ParseInt(parts[1], 10, 64)
	st := r.stats[policy]
	if err != nil || st == nil || len(hash) != 32 {
		http.Error(w, "no such policy, version or chunk", http.StatusNotFound)
		return
	}
	at, ok := r.lookup(policy, version, hash)
	if !ok {
		at, ok = r.awaitPartial(req.Context(), policy, version, hash)
	}
	if !ok && req.Context().Err() == nil {
		// The version was installed while the request waited for
		// the chunk (its partial record was dropped): it is in the
		// cache now. Answering "not yet" sent the peer to others.
		at, ok = r.lookup(policy, version, hash)
	}
	if !ok {
		http.Error(w, "chunk not held", http.StatusNotFound)
		return
	}
	select {
	case r.serveSem <- struct{}{}:
		defer func() { <-r.serveSem }()
	case <-req.Context().Done():
		return
	}
	f, err := openChunk(at)
	if err != nil {
		// A version being assembled was installed (its file renamed)
		// or dropped since: look in the cache.
		r.dropPartial(policy, version)
		if at, ok = r.lookup(policy, version, hash); ok {
			f, err = openChunk(at)
		}
	}
	if err != nil || !ok {
		r.log.Debug("relay chunk not served", "policy", policy, "version", version, "chunk", hash, "err", err)
		http.Error(w, "chunk not held", http.StatusNotFound)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(at.Size))
	// From the file to the socket without a copy in this process
	// (sendfile: net/http's ReadFrom takes a LimitedReader of a file).
	if n, err := io.Copy(w, io.LimitReader(f, int64(at.Size))); err == nil && n == int64(at.Size) {
		st.servedChunks.Add(1)
		st.servedBytes.Add(n)
	}
}

// partialVersion is the chunks of the version a node is assembling, as
// they are written (learner.SubscriberConfig.OnChunk).
type partialVersion struct {
	version int64
	chunks  map[string]learner.CachedChunk
	more    chan struct{} // closed and replaced when a chunk is added
}

// onChunk records chunk i of m, written at pos in path.
func (r *relay) onChunk(m learner.Manifest, i int, path string, pos int64) {
	c := m.ChunkList[i]
	r.mu.Lock()
	defer r.mu.Unlock()
	pv := r.partialLocked(m.Policy, m.Version)
	pv.chunks[c.Hash] = learner.CachedChunk{Path: path, Pos: pos, Size: c.Size}
	close(pv.more)
	pv.more = make(chan struct{})
}

// beginPartial records that the node begins to assemble version of
// policy, before it has any chunk of it: it advertises the version as
// fetching from then on, and peers asking for chunks of it must wait for
// them as for the next chunks, not be told at once that it has none (they
// would leave it for the holders ahead of it, the seeds first).
func (r *relay) beginPartial(policy string, version int64) {
	r.mu.Lock()
	r.partialLocked(policy, version)
	r.mu.Unlock()
}

// partialLocked returns the partial version of policy, making it anew
// when it is not version.
func (r *relay) partialLocked(policy string, version int64) *partialVersion {
	pv := r.mu.partial[policy]
	if pv == nil || pv.version != version {
		if pv != nil {
			close(pv.more)
		}
		pv = &partialVersion{version: version, chunks: map[string]learner.CachedChunk{}, more: make(chan struct{})}
		r.mu.partial[policy] = pv
	}
	return pv
}

func (r *relay) dropPartial(policy string, version int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if pv := r.mu.partial[policy]; pv != nil && pv.version == version {
		close(pv.more)
		delete(r.mu.partial, policy)
	}
}

// awaitPartial waits up to relayPartialWait for the chunk named hash of
// the version being assembled, when that is version: peers ask a node
// that is still fetching a version for its chunks in about the order it
// receives them, and are answered as soon as it has them.
func (r *relay) awaitPartial(ctx context.Context, policy string, version int64, hash string) (learner.CachedChunk, bool) {
	t := time.NewTimer(relayPartialWait)
	defer t.Stop()
	for {
		r.mu.Lock()
		pv := r.mu.partial[policy]
		if pv == nil || pv.version != version {
			r.mu.Unlock()
			return learner.CachedChunk{}, false
		}
		at, ok := pv.chunks[hash]
		more := pv.more
		r.mu.Unlock()
		if ok {
			return at, true
		}
		select {
		case <-more:
		case <-t.C:
			return learner.CachedChunk{}, false
		case <-ctx.Done():
			return learner.CachedChunk{}, false
		}
	}
}

// chunkIndex is the chunks of one policy's cached versions by hash.
type chunkIndex struct {
	chunks map[string]learner.CachedChunk
	mod    time.Time // the cache directory's modification time when read
}

// lookup finds the chunk named hash of policy: in the version being
// assembled, else in the cached versions. The cache's index is rebuilt
// when a chunk is not in it and the cache's directory changed since it
// was built (a version was installed or pruned): peers ask for chunks not
// here yet many times a second while a version moves, and reading every
// cached manifest for each of those requests cost more than serving.
func (r *relay) lookup(policy string, version int64, hash string) (learner.CachedChunk, bool) {
	r.mu.Lock()
	idx := r.mu.index[policy]
	var at learner.CachedChunk
	ok := false
	if pv := r.mu.partial[policy]; pv != nil {
		at, ok = pv.chunks[hash]
	}
	r.mu.Unlock()
	if !ok && idx != nil {
		at, ok = idx.chunks[hash]
	}
	if !ok && (idx == nil || !idx.mod.Equal(dirMod(filepath.Join(r.dir, policy)))) {
		idx = indexChunks(r.dir, policy)
		r.mu.Lock()
		r.mu.index[policy] = idx
		r.mu.Unlock()
		at, ok = idx.chunks[hash]
	}
	return at, ok
}

// dirMod is the modification time of directory dir (zero if unknown).
func dirMod(dir string) time.Time {
	fi, err := os.Stat(dir)
	if err != nil {
		return time.Time{}
	}
	return fi.ModTime()
}

// openChunk opens the file holding chunk at, positioned at its first
// byte.
func openChunk(at learner.CachedChunk) (*os.File, error) {
	f, err := os.Open(at.Path)
	if err != nil {
		return nil, err // pruned, renamed or dropped since it was found
	}
	fi, err := f.Stat()
	if err == nil && fi.Size() < at.Pos+int64(at.Size) {
		err = fmt.Errorf("%s holds %d bytes, the chunk ends at %d", at.Path, fi.Size(), at.Pos+int64(at.Size))
	}
	if err == nil {
		_, err = f.Seek(at.Pos, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func indexChunks(dir, policy string) *chunkIndex {
	// The time is taken before the directory is read, so a change while
	// it is shows as a different time at the next lookup.
	mod := dirMod(filepath.Join(dir, policy))
	chunks, _ := learner.CachedChunks(dir, policy)
	return &chunkIndex{chunks: chunks, mod: mod}
}

// peer is a node of the pool that holds a version, or is fetching it
// (partial).
type peer struct {
	node, addr string
	partial    bool
	// source: the peer's rank is in this node's window of sources;
	// others are asked once the sources have failed for a chunk.
	source bool
}

// fetchingName is the name under which a node advertises in the gossip
// pool the version of policy it is fetching. It cannot be a policy name
// ('/' is not allowed in those).
func fetchingName(policy string) string { return policy + "/fetching" }

// errNotYet is a peer still fetching a version that does not have a
// chunk yet.
var errNotYet = errors.New("the peer does not have the chunk yet")

// order returns the pool's live relaying nodes in the order of version v,
// this node included.
func (r *relay) order(view gossip.View, v int64) []string {
	type ranked struct {
		key  uint64
		node string
	}
	var nodes []ranked
	self := false
	for _, nh := range view.Nodes {
		if !nh.Alive || nh.Relay == "" {
			continue
		}
		self = self || nh.Node == r.self
		nodes = append(nodes, ranked{orderKey(nh.Node, v), nh.Node})
	}
	if !self {
		nodes = append(nodes, ranked{orderKey(r.self, v), r.self})
	}
	slices.SortFunc(nodes, func(a, b ranked) int {
		if a.key != b.key {
			if a.key < b.key {
				return -1
			}
			return 1
		}
		return strings.Compare(a.node, b.node)
	})
	out := make([]string, len(nodes))
	for i, x := range nodes {
		out[i] = x.node
	}
	return out
}

// rank returns this node's place among the pool's live relaying nodes in
// the order of version v, and their number (this node included).
func (r *relay) rank(view gossip.View, v int64) (rank, n int) {
	o := r.order(view, v)
	return slices.Index(o, r.self), len(o)
}

// sourcesFrom is the first rank of the sources of the node of rank k (see
// the top of this file): they are ranks sourcesFrom(k, seeds) to k-1.
func sourcesFrom(k, seeds int) int {
	return max(0, (k-seeds)/2)
}

// orderKey places node in version v's order. The hash must mix the
// version into every bit: with FNV-1a, whose last bytes barely move the
// high bits, the same two nodes came first for every version.
func orderKey(node string, v int64) uint64 {
	return xxh3.HashString(node + "\x00" + strconv.FormatInt(v, 10))
}

// holders returns the live peers that hold version v or a newer one (they
// keep the versions before, and a newer version shares most chunks), and
// those that are fetching v and come before this node in v's order (so
// chunks flow down that order and no two nodes wait for each other),
// leaving out the peers being avoided. Those whose rank is in this node's
// window of sources are marked source.
func (r *relay) holders(policy string, v int64) []peer {
	full, fetching := r.pool.View(policy), r.pool.View(fetchingName(policy))
	ranks := map[string]int{}
	for i, node := range r.order(full, v) {
		ranks[node] = i
	}
	k := ranks[r.self]
	lo := sourcesFrom(k, r.seeds)
	source := func(node string) bool {
		rk, ok := ranks[node]
		return ok && rk >= lo && rk < k
	}
	self := orderKey(r.self, v)
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []peer
	seen := map[string]bool{}
	for _, nh := range full.Nodes {
		if nh.Alive && nh.Relay != "" && nh.Node != r.self && nh.Version >= v && !now.Before(r.mu.avoid[nh.Node]) {
			out = append(out, peer{node: nh.Node, addr: nh.Relay, source: source(nh.Node)})
			seen[nh.Node] = true
		}
	}
	for _, nh := range fetching.Nodes {
		if nh.Alive && nh.Relay != "" && !seen[nh.Node] && nh.Version == v && orderKey(nh.Node, v) < self && !now.Before(r.mu.avoid[nh.Node]) {
			out = append(out, peer{node: nh.Node, addr: nh.Relay, partial: true, source: source(nh.Node)})
		}
	}
	return out
}

func (r *relay) avoidPeer(node string, d time.Duration) {
	r.mu.Lock()
	r.mu.avoid[node] = time.Now().Add(d)
	r.mu.Unlock()
}

// FetchChunks implements learner.ChunkSource: see the top of this file for
// who asks whom. Chunks that no peer delivered (all holders failed or
// served bad bytes) are asked for again when other holders appear, until
// the node's deadline; what is left then comes from the brokers.
func (r *relay) FetchChunks(ctx context.Context, m learner.Manifest, want []int, put func(i int, b []byte) error) error {
	st := r.stats[m.Policy]
	if st == nil {
		return nil
	}
	r.beginPartial(m.Policy, m.Version)
	r.pool.SetHolding(fetchingName(m.Policy), gossip.Holding{Version: m.Version})
	rank, n := r.rank(r.pool.View(m.Policy), m.Version)
	if rank < r.seeds {
		r.log.Debug("relay: fetching from the brokers first", "version", m.Version, "rank", rank, "nodes", n)
		return nil
	}
	start := time.Now()
	deadline := start.Add(r.wait + r.wait*time.Duration(rank)/time.Duration(n))
	for round := 0; len(want) > 0; round++ {
		if round > 0 && !time.Now().Before(deadline) {
			r.log.Info("relay: peers failed chunks, fetching them from the brokers", "version", m.Version, "chunks", len(want))
			return nil
		}
		for len(r.holders(m.Policy, m.Version)) == 0 {
			if !time.Now().Before(deadline) {
				r.log.Info("relay: no peer can serve the version, fetching the rest from the brokers", "version", m.Version, "chunks", len(want), "rank", rank, "nodes", n)
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
		before := len(want)
		var ok bool
		if want, ok = r.round(ctx, st, m, want, put, start, deadline); !ok {
			break
		}
		if len(want) == before {
			// Holders are there but served nothing: they are
			// fetching too, or failing. Do not spin.
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return ctx.Err()
}

// round fetches the chunks want of m from the current holders and returns
// those that none delivered; ok is false when a chunk could not be written
// (the brokers' copy will fail the same way and tell).
func (r *relay) round(ctx context.Context, st *relayStats, m learner.Manifest, want []int, put func(int, []byte) error, start, deadline time.Time) (failed []int, ok bool) {
	f := &fetch{r: r, st: st, m: m, put: put, inflight: map[string]int{}, start: start, deadline: deadline}
	f.cond = sync.NewCond(&f.mu)
	f.lastGot.Store(time.Now().UnixNano())
	queue := make(chan int, len(want))
	for _, i := range want {
		queue <- i
	}
	close(queue)
	var mu sync.Mutex
	ok = true
	var wg sync.WaitGroup
	for range min(relayPerNode, len(want)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range queue {
				if ctx.Err() != nil {
					return
				}
				if f.stalled() {
					mu.Lock()
					failed = append(failed, i)
					mu.Unlock()
					continue
				}
				switch got, fatal := f.chunk(ctx, i); {
				case fatal:
					mu.Lock()
					ok = false
					mu.Unlock()
					return
				case !got:
					mu.Lock()
					failed = append(failed, i)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return failed, ok && ctx.Err() == nil
}

// fetch is one round of a version's chunks being fetched from peers.
type fetch struct {
	r        *relay
	st       *relayStats
	m        learner.Manifest
	put      func(int, []byte) error
	start    time.Time // when the node began to fetch the version
	deadline time.Time
	lastGot  atomic.Int64 // when a chunk last arrived (or the round began), Unix ns

	mu       sync.Mutex
	cond     *sync.Cond
	inflight map[string]int // peer node -> requests under way
	peers    []peer
	at       time.Time // when peers was looked up
}

// chunk fetches chunk i from up to relayTries peers. fatal is set when
// the chunk could not be written.
func (f *fetch) chunk(ctx context.Context, i int) (got, fatal bool) {
	tried := map[string]bool{}
	for range relayTries {
		if f.stalled() {
			return false, false
		}
		p, ok := f.pick(i, tried)
		if !ok {
			return false, false
		}
		tried[p.node] = true
		var n int
		putErr, err := f.r.get(ctx, p, f.m, i, func(i int, b []byte) error {
			n = len(b)
			return f.put(i, b)
		})
		f.done(p)
		if err == nil {
			if putErr == nil {
				f.lastGot.Store(time.Now().UnixNano())
				f.st.peerChunks.Add(1)
				f.st.peerBytes.Add(int64(n))
				return true, false
			}
			if !errors.Is(putErr, learner.ErrBadChunk) {
				f.r.log.Error("relay: cannot write a chunk", "version", f.m.Version, "chunk", i, "err", putErr)
				return false, true
			}
			f.st.peerCorrupt.Add(1)
			f.avoid(p, relayBadFor)
			f.r.log.Warn("relay peer served a corrupt chunk, avoiding it", "peer", p.node, "addr", p.addr, "version", f.m.Version, "chunk", i, "err", putErr)
			continue
		}
		if ctx.Err() != nil {
			return false, false
		}
		if errors.Is(err, errNotYet) {
			continue
		}
		f.st.peerErrors.Add(1)
		f.avoid(p, relayErrFor)
		f.r.log.Debug("relay chunk request failed", "peer", p.node, "version", f.m.Version, "chunk", i, "err", err)
	}
	return false, false
}

// stalled reports whether the node is past its deadline and no chunk
// arrived from peers for relayStall: chunks not asked for yet are then
// left to the brokers.
func (f *fetch) stalled() bool {
	now := time.Now()
	return now.After(f.deadline) && now.Sub(time.Unix(0, f.lastGot.Load())) > f.r.stall
}

// pick returns the holder to ask for chunk i: among this node's sources
// not tried for the chunk yet (or, when all were, the other holders not
// tried), the one with the highest spread score that has fewer than
// relayPerPeer of this node's requests under way. It waits while all of
// them have; ok is false when there is none. The score, not the requests
// under way, comes first: a source that answers sooner than the others
// (it is ahead in the version, or it got the CPU) would otherwise be
// asked again as soon as it answered and serve most chunks; with the
// score it serves its share, and more only when this node's requests
// wait on the others.
func (f *fetch) pick(i int, tried map[string]bool) (peer, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	hash := f.m.ChunkList[i].Hash
	for {
		if time.Since(f.at) > relayHoldersEvery {
			f.peers, f.at = f.r.holders(f.m.Policy, f.m.Version), time.Now()
		}
		sources := slices.ContainsFunc(f.peers, func(p peer) bool { return p.source && !tried[p.node] })
		if !sources && time.Since(f.start) < relaySourceWait && !slices.ContainsFunc(f.peers, func(p peer) bool { return p.source }) {
			// The sources' "fetching" has not reached this node's
			// view yet (they began at the same time): the holders
			// in view are the first of the order, which every node
			// would ask.
			f.mu.Unlock()
			time.Sleep(relayHoldersEvery / 4)
			f.mu.Lock()
			f.at = time.Time{}
			continue
		}
		best, busy := -1, false
		var bestScore uint64
		for j, p := range f.peers {
			if tried[p.node] || (sources && !p.source) {
				continue
			}
			if f.inflight[p.node] >= relayPerPeer {
				busy = true
				continue
			}
			if score := spreadScore(hash, f.r.self, p.node); best < 0 || score > bestScore {
				best, bestScore = j, score
			}
		}
		if best >= 0 {
			p := f.peers[best]
			f.inflight[p.node]++
			return p, true
		}
		if !busy {
			return peer{}, false
		}
		f.cond.Wait()
	}
}

// spreadScore orders the sources of one chunk for one node: each (chunk,
// node) pair draws its own order, so the nodes fetching a chunk at the
// same time prefer different sources, and a node's chunks spread evenly
// over its sources.
func spreadScore(chunk, self, node string) uint64 {
	return xxh3.HashString(chunk + "\x00" + self + "\x00" + node)
}

// avoid keeps p out of the holders for d, from the next pick on.
func (f *fetch) avoid(p peer, d time.Duration) {
	f.r.avoidPeer(p.node, d)
	f.mu.Lock()
	f.at = time.Time{}
	f.mu.Unlock()
}

func (f *fetch) done(p peer) {
	f.mu.Lock()
	f.inflight[p.node]--
	f.mu.Unlock()
	f.cond.Broadcast()
}

// chunkBufs holds buffers of learner.MaxChunkSize for chunks received
// from peers: put has written a chunk's bytes when it returns, so each
// buffer is used again instead of allocating (and collecting) one per
// chunk.
var chunkBufs = sync.Pool{New: func() any { b := make([]byte, learner.MaxChunkSize); return &b }}

// get requests chunk i of m from p and hands its bytes to put; the bytes
// are not kept after put returns. err is put's error, or the request's.
func (r *relay) get(ctx context.Context, p peer, m learner.Manifest, i int, put func(int, []byte) error) (putErr, err error) {
	c := m.ChunkList[i]
	path := fmt.Sprintf("/v1/relay/%s/%d/%s", m.Policy, m.Version, c.Hash)
	ctx, cancel := context.WithTimeout(ctx, relayChunkTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", r.sign(path))
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		if p.partial && resp.StatusCode == http.StatusNotFound {
			return nil, errNotYet
		}
		return nil, fmt.Errorf("%s answered %s", p.addr, resp.Status)
	}
	bp := chunkBufs.Get().(*[]byte)
	defer chunkBufs.Put(bp)
	// One byte more than the chunk shows a peer sending too much, one
	// less a short body: put refuses both as bytes that do not match.
	b := (*bp)[:min(int64(c.Size)+1, int64(len(*bp)))]
	n, err := io.ReadFull(resp.Body, b)
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
	case err != nil:
		return nil, err
	}
	return put(i, b[:n]), nil
}
