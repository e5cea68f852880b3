package learner

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// SubscriberConfig configures a Subscriber.
type SubscriberConfig struct {
	// Brokers are seed brokers, host:port. Required.
	Brokers []string
	// Policy is the policy name (see CheckPolicyName). Required.
	Policy string
	// Dir is the cache root. The policy's files live in Dir/<policy>/:
	// <version> (the blob), <version>.json (its manifest) and latest, a
	// symlink to <version> swapped atomically. Created if missing.
	// Required.
	Dir string
	// Keep is how many versions stay on disk. Default 3.
	Keep int
	// RetryInterval is how long Run waits after an error, and between
	// looks for a topic that does not exist yet. Default 1s.
	RetryInterval time.Duration
	// Logger receives the subscriber's logs. Default slog.Default().
	Logger *slog.Logger
	// TrustedKeys, if not empty, are the keys a version must be signed
	// by: unsigned versions (format 1 included), versions signed by
	// another key and versions whose signature does not verify are
	// refused, counted in Stats.Untrusted and never installed. Cached
	// versions are checked against them too.
	TrustedKeys []ed25519.PublicKey
	// ClientOpts are extra kgo options for the subscriber's clients
	// (after SeedBrokers): connection options such as TLS, SASL, a
	// dialer or a logger. Producer and consumer options are ignored; the
	// subscriber sets its own.
	ClientOpts []kgo.Opt
	// Peers, if set, supplies the chunks of format 2 versions before the
	// topic does, and the subscriber then watches the topic's manifests
	// instead of streaming every record (see ChunkSource). Format 1
	// versions still come whole from the topic.
	Peers ChunkSource
	// PollInterval is how often a subscriber with Peers looks for a new
	// manifest. Default 250ms.
	PollInterval time.Duration
	// OnChunk, if set, is called once each checked chunk i of a format 2
	// version m being assembled is written at pos in the temporary file
	// path, so the node can serve it to peers before the version is
	// complete. The file is renamed away when the version is installed,
	// or removed when it fails; readers must expect it gone. It may be
	// called from several goroutines at once.
	OnChunk func(m Manifest, i int, path string, pos int64)
}

// Validate fills defaults and reports the first invalid field.
func (c *SubscriberConfig) Validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("no brokers: pass at least one host:port")
	}
	if err := CheckPolicyName(c.Policy); err != nil {
		return err
	}
	if c.Dir == "" {
		return errors.New("no policy cache directory")
	}
	if c.Keep <= 0 {
		c.Keep = DefaultKeep
	}
	if c.RetryInterval <= 0 {
		c.RetryInterval = time.Second
	}
	if c.PollInterval <= 0 {
		c.PollInterval = defaultPollInterval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// SubscriberStats are a Subscriber's counters.
type SubscriberStats struct {
	Held         int64     // version held (0: none)
	HeldAt       time.Time // when the held version was installed (for a cached version: its file's time)
	Fetched      int64     // versions obtained from the topic and installed
	Corrupt      int64     // versions rejected: hash, size or chunk mismatch, an invalid manifest, or chunks gone from the topic
	Untrusted    int64     // versions refused: not signed by a trusted key (see SubscriberConfig.TrustedKeys)
	Received     int64     // record bytes received from the brokers: the followed stream, range and chunk reads
	Reused       int64     // chunk bytes of format 2 versions taken from versions already on this node
	Skipped      int64     // versions jumped over: never held although a newer one was installed
	LatestSeen   int64     // newest version seen on the topic (or held)
	LatestSeenAt time.Time // when LatestSeen was first seen
}

// subscriberHooks let tests stop or observe a subscriber at chosen points.
type subscriberHooks struct {
	// beforeObtain runs before a version is verified and installed
	// (streamed or fetched).
	beforeObtain func(ctx context.Context, m Manifest)
	// onWrite runs after each write into a version's temporary file
	// (a chunk is written in pieces of writePiece), with the bytes
	// written so far.
	onWrite func(version, written int64)
}

// errBehind makes Run look up the newest version again and jump to it.
var errBehind = errors.New("newer versions are on the topic")

// Subscriber keeps the newest version of one policy in a local cache; one
// per node per policy. See the package documentation for its obligations.
type Subscriber struct {
	cfg     SubscriberConfig
	topic   string
	cache   *cache
	log     *slog.Logger
	hooks   subscriberHooks
	running atomic.Bool

	// Run's own state, touched only by the goroutine in Run.
	asm         *streamAsm     // the version being assembled from the followed stream
	spool       *spoolAsm      // the format 2 records kept from the followed stream
	bad         map[int64]bool // versions found corrupt: never tried again
	lastRecords int64          // records (chunks + manifest) of the newest manifest seen

	mu struct {
		sync.Mutex
		held    Manifest
		path    string
		ok      bool
		changed chan struct{} // closed and replaced whenever held changes
		stats   SubscriberStats
	}
}

// streamAsm is a version being assembled from the followed stream into
// its temporary file.
type streamAsm struct {
	a *assembler
	f *os.File
}

// NewSubscriber opens the cache. The newest cached version whose blob
// still matches its manifest (re-hashed now; on a mismatch the next older
// one) is served at once by Current, without refetching.
func NewSubscriber(cfg SubscriberConfig) (*Subscriber, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger.With("policy", cfg.Policy)
	c, err := openCache(cfg.Dir, cfg.Policy, cfg.Keep, log)
	if err != nil {
		return nil, err
	}
	c.trust = func(m Manifest) error { return Trust(m, cfg.TrustedKeys) }
	s := &Subscriber{cfg: cfg, topic: Topic(cfg.Policy), cache: c, log: log, bad: map[int64]bool{}, lastRecords: 1}
	s.mu.changed = make(chan struct{})
	m, path, ok, err := c.load(cfg.Policy)
	if err != nil {
		return nil, err
	}
	if ok {
		at := c.modTime(m.Version)
		s.mu.held, s.mu.path, s.mu.ok = m, path, true
		s.mu.stats.Held, s.mu.stats.HeldAt = m.Version, at
		s.mu.stats.LatestSeen, s.mu.stats.LatestSeenAt = m.Version, at
		s.lastRecords = int64(m.records()) + 1
		log.Info("serving cached policy version", "version", m.Version, "path", path)
	}
	return s, nil
}

// Current returns the held manifest and the absolute path of its blob;
// ok is false until a version is held. The manifest's Metadata map is
// shared: do not modify it.
func (s *Subscriber) Current() (m Manifest, path string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.held, s.mu.path, s.mu.ok
}

// Wait returns as soon as a version newer than after is held (at once if
// one already is). If ctx ends first it returns what is held with
// ctx.Err(), for a long poll to answer "no change".
func (s *Subscriber) Wait(ctx context.Context, after int64) (Manifest, string, error) {
	for {
		s.mu.Lock()
		m, path, ok, ch := s.mu.held, s.mu.path, s.mu.ok, s.mu.changed
		s.mu.Unlock()
		if ok && m.Version > after {
			return m, path, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return m, path, ctx.Err()
		}
	}
}

// Stats returns a snapshot of the counters.
func (s *Subscriber) Stats() SubscriberStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.stats
}

func (s *Subscriber) heldVersion() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.held.Version
}

// Run follows the policy topic until ctx ends, then returns nil; it
// returns an error only if it cannot start. It runs in the caller's
// goroutine and starts none that outlive it. Only one Run at a time.
//
// Run first jumps to the newest version (Latest) and then consumes the
// topic from that manifest's offset + 1. Chunks of a new version are
// written to Dir/<policy>/.tmp-<version> and hashed as they stream by; on
// its manifest the version is verified, synced, renamed into place and
// made latest. A manifest whose chunks were not all seen (Run started in
// the middle of them, or they were interleaved with another publisher's)
// is fetched by offset range instead. Before a version is read, Run checks
// whether more than a version's worth of records follows it; if a newer
// complete version exists, it jumps straight there. A corrupt version is
// logged, counted and never exposed; the previous one stays.
func (s *Subscriber) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("subscriber is already running")
	}
	defer s.running.Store(false)
	// cl lists offsets and is the template of every consume session.
	cl, err := newClient(connOpts(append([]kgo.Opt{kgo.SeedBrokers(s.cfg.Brokers...)}, s.cfg.ClientOpts...)))
	if err != nil {
		return err
	}
	defer cl.Close()
	defer s.dropAsm()
	defer s.dropSpool()
	for ctx.Err() == nil {
		pos, ok, err := s.catchUp(ctx, cl)
		switch {
		case err != nil || !ok:
		case s.cfg.Peers != nil:
			err = s.watch(ctx, cl, pos)
		default:
			err = s.follow(ctx, cl, pos)
		}
		if ctx.Err() != nil {
			break
		}
		wait := true
		switch {
		case errors.Is(err, errBehind):
			s.log.Info("node fell behind, jumping to the newest version")
			wait = false
		case err != nil:
			s.log.Warn("policy subscription failed, retrying", "err", err, "retry_in", s.cfg.RetryInterval)
		case !ok:
			s.log.Debug("policy topic does not exist yet", "topic", s.topic)
		}
		if wait {
			select {
			case <-ctx.Done():
			case <-time.After(s.cfg.RetryInterval):
			}
		}
	}
	return nil
}

// catchUp installs the newest complete version if it is newer than the
// held one (or, if that one is corrupt, the newest good one before it),
// and returns the offset to follow from. ok is false if the topic does not
// exist.
func (s *Subscriber) catchUp(ctx context.Context, cl *kgo.Client) (pos int64, ok bool, err error) {
	start, end, exists, err := logRange(ctx, cl, s.topic)
	if err != nil || !exists {
		return 0, false, err
	}
	newest, found, err := latestBefore(ctx, cl, s.cfg.Policy, start, end)
	if err != nil {
		return 0, false, err
	}
	if !found {
		// No version yet: the first one will stream by from here.
		return start, true, nil
	}
	s.seen(newest)
	s.lastRecords = int64(newest.records()) + 1
	s.dropAsm()
	s.dropSpool()
	m := newest
	for range 3 {
		if m.Version <= s.heldVersion() {
			break
		}
		if !s.bad[m.Version] {
			err := s.obtain(ctx, cl, m, nil)
			if err == nil {
				break
			}
			if !rejected(err) {
				return 0, false, err
			}
		}
		// m is corrupt; a node that holds nothing older is better
		// off with the version before it.
		prev, found, err := previous(ctx, cl, m)
		if err != nil {
			return 0, false, err
		}
		if !found {
			break
		}
		m = prev
	}
	return newest.Offset + 1, true, nil
}

// follow consumes the topic from pos until ctx ends (nil), a jump is due
// (errBehind) or consuming fails.
func (s *Subscriber) follow(ctx context.Context, cl *kgo.Client, pos int64) error {
	fc, err := derive(cl, consumeOpts(s.topic, pos, sessionFetchBytes)...)
	if err != nil {
		return err
	}
	defer fc.Close()
	s.log.Debug("following policy topic", "topic", s.topic, "offset", pos)
	for {
		fs := fc.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err := fetchErr(fs); err != nil {
			return fmt.Errorf("cannot follow %s: %w", s.topic, err)
		}
		var herr error
		var got int64
		fs.EachRecord(func(r *kgo.Record) { got += int64(len(r.Value)) })
		s.addStats(got, 0)
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			for _, r := range p.Records {
				if herr != nil {
					return
				}
				herr = s.handle(ctx, cl, r, p.HighWatermark)
			}
		})
		if herr != nil {
			return herr
		}
	}
}

// handle acts on one record of the followed stream. hwm is the partition's
// high watermark when the record was fetched.
func (s *Subscriber) handle(ctx context.Context, cl *kgo.Client, r *kgo.Record, hwm int64) error {
	h, err := parseHeaders(r.Headers)
	if err != nil {
		s.log.Debug("skipping record that is not a policy record", "offset", r.Offset, "err", err)
		return nil
	}
	held := s.heldVersion()
	if h.kind == KindChunk {
		if h.version <= held || s.bad[h.version] {
			return nil
		}
		if h.index == 0 {
			// A version starts here. If at least two versions' worth of
			// records follow it, a newer complete one may be there:
			// ask before reading this one.
			if hwm-r.Offset >= 2*s.lastRecords {
				if err := s.jumpIfNewer(ctx, cl, h.version-1); err != nil {
					return err
				}
			}
			if h.format >= Format2 {
				s.dropAsm()
			} else {
				s.dropSpool()
				s.startAsm(h)
			}
		}
		if h.format >= Format2 {
			s.spoolChunk(r, h)
			return nil
		}
		if a := s.asm; a != nil && a.a.version == h.version && a.a.publish == h.publish {
			if err := a.a.add(r.Offset, h.index, r.Value, -1); err != nil {
				// A gap or a bad chunk: stop streaming this version;
				// its manifest will fetch it by range and judge.
				s.log.Warn("cannot assemble policy version from the stream", "version", h.version, "err", err)
				s.dropAsm()
			}
		}
		return nil
	}

	m, err := decodeManifest(r.Value, h)
	if err == nil && m.Policy != s.cfg.Policy {
		err = fmt.Errorf("manifest is for policy %q", m.Policy)
	}
	if err != nil {
		// Not marked bad: Latest skips such a record, so a publisher
		// may reuse its version number for a good version.
		if h.version > held {
			s.countCorrupt(h.version, fmt.Errorf("%w: invalid manifest at offset %d: %v", ErrCorrupt, r.Offset, err))
		}
		return nil
	}
	m.Offset = r.Offset
	s.seen(m)
	s.lastRecords = int64(m.records()) + 1
	if m.Version <= held || s.bad[m.Version] {
		if s.asm != nil && s.asm.a.version <= m.Version {
			s.dropAsm()
		}
		if s.spool != nil && s.spool.version <= m.Version {
			s.dropSpool()
		}
		return nil
	}
	if hwm-(r.Offset+1) >= s.lastRecords {
		if err := s.jumpIfNewer(ctx, cl, m.Version); err != nil {
			return err
		}
	}
	if m.Format >= Format2 {
		err = s.obtain2(ctx, cl, m, s.takeSpool(m))
	} else {
		err = s.obtain(ctx, cl, m, s.takeAsm(m))
	}
	if rejected(err) {
		return nil // counted; keep following
	}
	return err
}

// jumpIfNewer returns errBehind if a complete version newer than v (and
// than the held one) is on the topic.
func (s *Subscriber) jumpIfNewer(ctx context.Context, cl *kgo.Client, v int64) error {
	l, ok, err := Latest(ctx, cl, s.cfg.Policy)
	if err != nil {
		return err
	}
	if !ok {
		return nil
	}
	s.seen(l)
	if l.Version > v && l.Version > s.heldVersion() && !s.bad[l.Version] {
		return errBehind
	}
	return nil
}

// startAsm begins assembling the version whose chunk 0 is h, dropping any
// other assembly (a concurrent publisher's chunks then come by range).
func (s *Subscriber) startAsm(h recordHeader) {
	s.dropAsm()
	f, err := s.cache.create(h.version)
	if err != nil {
		s.log.Warn("cannot assemble policy version", "version", h.version, "err", err)
		return
	}
	s.asm = &streamAsm{a: newAssembler(h.version, h.publish, s.writer(f, h.version)), f: f}
}

// takeAsm returns the assembly of exactly m's chunks, if there is one,
// and forgets it; an assembly of an older or mismatching version is
// dropped.
func (s *Subscriber) takeAsm(m Manifest) *streamAsm {
	a := s.asm
	if a == nil {
		return nil
	}
	if a.a.version > m.Version {
		return nil // a newer version is streaming in; keep it
	}
	s.asm = nil
	if a.a.version == m.Version && a.a.publish == m.PublishID && a.a.next == m.Chunks &&
		a.a.first >= m.FirstChunkOffset && a.a.last <= m.LastChunkOffset {
		return a
	}
	s.cache.discard(a.f)
	return nil
}

func (s *Subscriber) dropAsm() {
	if s.asm != nil {
		s.cache.discard(s.asm.f)
		s.asm = nil
	}
}

// obtain verifies m's blob (assembled from the stream by asm, or fetched
// by range if asm is nil) and installs it. A corrupt version is counted
// and its error (wrapping ErrCorrupt) returned.
func (s *Subscriber) obtain(ctx context.Context, cl *kgo.Client, m Manifest, asm *streamAsm) error {
	if m.Format >= Format2 {
		return s.obtain2(ctx, cl, m, nil)
	}
	if s.hooks.beforeObtain != nil {
		s.hooks.beforeObtain(ctx, m)
	}
	var f *os.File
	var err error
	if err = s.trusted(m); err != nil {
		if asm != nil {
			s.cache.discard(asm.f)
		}
		return err
	}
	if err = ctx.Err(); err == nil {
		if asm != nil {
			f = asm.f
			err = asm.a.verify(m)
		} else if f, err = s.cache.create(m.Version); err == nil {
			if err = fetch(ctx, cl, m, s.writer(f, m.Version), sessionFetchBytes); err == nil {
				s.addStats(m.Size, 0)
			}
		}
	} else if asm != nil {
		f = asm.f
	}
	if err != nil {
		if f != nil {
			s.cache.discard(f)
		}
		if errors.Is(err, ErrCorrupt) {
			s.corrupt(m.Version, err)
		}
		return err
	}
	return s.install(m, f, "streamed", asm != nil)
}

// install installs the verified temporary file f as version m and holds
// it; logArgs go to the log line.
func (s *Subscriber) install(m Manifest, f *os.File, logArgs ...any) error {
	path, err := s.cache.install(m, f)
	if err != nil {
		return fmt.Errorf("cannot install %s version %d: %w", s.topic, m.Version, err)
	}
	s.hold(m, path)
	s.log.Info("installed policy version", append([]any{"version", m.Version, "bytes", m.Size, "format", max(m.Format, Format1), "path", path}, logArgs...)...)
	return nil
}

// obtain2 is obtain for format 2: it assembles m (see assemble2), using
// sp, its spooled records, if not nil.
func (s *Subscriber) obtain2(ctx context.Context, cl *kgo.Client, m Manifest, sp *spoolAsm) error {
	if s.hooks.beforeObtain != nil {
		s.hooks.beforeObtain(ctx, m)
	}
	if err := s.trusted(m); err != nil {
		if sp != nil {
			s.cache.discard(sp.f)
		}
		return err
	}
	before := s.Stats()
	f, err := s.assemble2(ctx, cl, m, sp)
	if err != nil {
		if errors.Is(err, ErrCorrupt) || errors.Is(err, ErrMissing) {
			s.corrupt(m.Version, err)
		}
		return err
	}
	after := s.Stats()
	return s.install(m, f, "base", m.Base, "reused_bytes", after.Reused-before.Reused)
}

// trusted checks m against the trusted keys; a refusal is logged, counted
// and returned (wrapping ErrUntrusted), and m is never tried again.
func (s *Subscriber) trusted(m Manifest) error {
	err := Trust(m, s.cfg.TrustedKeys)
	if err == nil {
		return nil
	}
	s.bad[m.Version] = true
	s.mu.Lock()
	s.mu.stats.Untrusted++
	s.mu.Unlock()
	s.log.Error("refused untrusted policy version", "version", m.Version, "key_id", m.KeyID, "err", err)
	return err
}

// rejected reports whether err refuses a version for good (corrupt,
// untrusted or gone), rather than failing to reach the brokers.
func rejected(err error) bool {
	return errors.Is(err, ErrCorrupt) || errors.Is(err, ErrUntrusted) || errors.Is(err, ErrMissing)
}

func (s *Subscriber) addStats(received, reused int64) {
	s.mu.Lock()
	s.mu.stats.Received += received
	s.mu.stats.Reused += reused
	s.mu.Unlock()
}

// writer wraps f with the onWrite hook, if any.
func (s *Subscriber) writer(f *os.File, version int64) io.Writer {
	if s.hooks.onWrite == nil {
		return f
	}
	return &hookWriter{w: f, fn: func(n int64) { s.hooks.onWrite(version, n) }}
}

type hookWriter struct {
	w  io.Writer
	n  int64
	fn func(int64)
}

func (h *hookWriter) Write(b []byte) (int, error) {
	n, err := h.w.Write(b)
	h.n += int64(n)
	h.fn(h.n)
	return n, err
}

func (s *Subscriber) hold(m Manifest, path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &s.mu.stats
	st.Fetched++
	st.Skipped += max(0, m.Version-s.mu.held.Version-1)
	st.Held, st.HeldAt = m.Version, time.Now()
	if m.Version > st.LatestSeen {
		st.LatestSeen, st.LatestSeenAt = m.Version, st.HeldAt
	}
	s.mu.held, s.mu.path, s.mu.ok = m, path, true
	close(s.mu.changed)
	s.mu.changed = make(chan struct{})
}

func (s *Subscriber) seen(m Manifest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.Version > s.mu.stats.LatestSeen {
		s.mu.stats.LatestSeen, s.mu.stats.LatestSeenAt = m.Version, time.Now()
	}
}

// corrupt marks version v bad and counts it.
func (s *Subscriber) corrupt(v int64, err error) {
	s.bad[v] = true
	s.countCorrupt(v, err)
}

func (s *Subscriber) countCorrupt(v int64, err error) {
	s.mu.Lock()
	s.mu.stats.Corrupt++
	s.mu.Unlock()
	s.log.Error("rejected corrupt policy version", "version", v, "err", err)
}
