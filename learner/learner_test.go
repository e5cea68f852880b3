package learner

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest/inproc"
)

func testClient(t *testing.T, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// startPublisher starts a broker and a publisher with a client of its own.
func startPublisher(t *testing.T) (addr string, cl *kgo.Client, p *Publisher) {
	t.Helper()
	addr = inproc.Start(t).Addr
	cl = testClient(t, addr)
	return addr, cl, NewPublisher(cl, testutil.Logger())
}

func blob(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func publish(t *testing.T, p *Publisher, policy string, data []byte) Manifest {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := p.Publish(ctx, policy, bytes.NewReader(data), map[string]string{"step": strconv.Itoa(len(data))}, nil)
	if err != nil {
		t.Fatalf("publish %d bytes to %s: %v", len(data), policy, err)
	}
	return m
}

type testSub struct {
	*Subscriber
	t      *testing.T
	cancel context.CancelFunc
	done   chan error
}

// startSub runs a subscriber until the test ends (or stop is called).
func startSub(t *testing.T, addr, policy, dir string, mod func(*SubscriberConfig, *subscriberHooks)) *testSub {
	t.Helper()
	return startSubCtx(t, context.Background(), addr, policy, dir, mod)
}

func startSubCtx(t *testing.T, parent context.Context, addr, policy, dir string, mod func(*SubscriberConfig, *subscriberHooks)) *testSub {
	t.Helper()
	cfg := SubscriberConfig{Brokers: []string{addr}, Policy: policy, Dir: dir, RetryInterval: 50 * time.Millisecond, Logger: testutil.Logger()}
	var hooks subscriberHooks
	if mod != nil {
		mod(&cfg, &hooks)
	}
	s, err := NewSubscriber(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.hooks = hooks
	ctx, cancel := context.WithCancel(parent)
	ts := &testSub{Subscriber: s, t: t, cancel: cancel, done: make(chan error, 1)}
	go func() { ts.done <- s.Run(ctx) }()
	t.Cleanup(ts.stop)
	return ts
}

func (ts *testSub) stop() {
	ts.cancel()
	if err := <-ts.done; err != nil {
		ts.t.Errorf("subscriber Run: %v", err)
	}
	ts.done <- nil // let a second stop return
}

// waitHeld waits until s holds version v.
func waitHeld(t *testing.T, s *Subscriber, v int64) (Manifest, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, path, err := s.Wait(ctx, v-1)
	if err != nil {
		t.Fatalf("waiting for version %d: %v (holding %d, stats %+v)", v, err, m.Version, s.Stats())
	}
	if m.Version != v {
		t.Fatalf("got version %d, want %d", m.Version, v)
	}
	return m, path
}

// checkHeld waits until s holds version v and checks its file holds want.
func checkHeld(t *testing.T, s *Subscriber, v int64, want []byte) {
	t.Helper()
	_, path := waitHeld(t, s, v)
	checkFile(t, path, want)
}

// checkHeldIntact is checkHeld, and s has met no corrupt version.
func checkHeldIntact(t *testing.T, s *testSub, v int64, want []byte) {
	t.Helper()
	checkHeld(t, s.Subscriber, v, want)
	if st := s.Stats(); st.Corrupt != 0 {
		t.Errorf("stats %+v, want nothing corrupt", st)
	}
}

func checkFile(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: got %d bytes (sha %x), want %d bytes (sha %x)", path, len(got), sha256.Sum256(got), len(want), sha256.Sum256(want))
	}
}

func checkLatest(t *testing.T, dir, policy string, v int64) {
	t.Helper()
	got, err := os.Readlink(filepath.Join(dir, policy, "latest"))
	if err != nil {
		t.Fatal(err)
	}
	if got != strconv.FormatInt(v, 10) {
		t.Fatalf("latest -> %s, want %d", got, v)
	}
}

func TestPublishLatestFetch(t *testing.T) {
	_, cl, p := startPublisher(t)
	ctx := context.Background()

	if _, ok, err := Latest(ctx, cl, "absent"); err != nil || ok {
		t.Fatalf("Latest of an absent topic: ok=%v err=%v, want false, nil", ok, err)
	}

	blobs := [][]byte{blob(0), blob(1), blob(3<<20 + 512<<10)}
	var ms []Manifest
	for i, b := range blobs {
		m := publish(t, p, "pi", b)
		if m.Version != int64(i+1) {
			t.Fatalf("version %d, want %d", m.Version, i+1)
		}
		ms = append(ms, m)
	}
	if got := []int{ms[0].Chunks, ms[1].Chunks, ms[2].Chunks}; !slices.Equal(got, []int{0, 1, 4}) {
		t.Errorf("chunk counts %v, want [0 1 4]", got)
	}

	l, ok, err := Latest(ctx, cl, "pi")
	if err != nil || !ok {
		t.Fatalf("Latest: ok=%v err=%v", ok, err)
	}
	if l.Version != 3 || l.Offset != ms[2].Offset || l.SHA256 != ms[2].SHA256 || l.Metadata["step"] != strconv.Itoa(len(blobs[2])) {
		t.Fatalf("Latest = %+v, want %+v", l, ms[2])
	}

	for i, m := range ms {
		var buf bytes.Buffer
		if err := Fetch(ctx, cl, m, &buf); err != nil {
			t.Fatalf("Fetch version %d: %v", m.Version, err)
		}
		if !bytes.Equal(buf.Bytes(), blobs[i]) {
			t.Fatalf("Fetch version %d: got %d bytes, want %d", m.Version, buf.Len(), len(blobs[i]))
		}
	}

	// The same chunks under a manifest that lies about them.
	for name, mod := range map[string]func(*Manifest){
		"sha256": func(m *Manifest) { m.SHA256 = hex.EncodeToString(make([]byte, 32)) },
		"size":   func(m *Manifest) { m.Size-- },
		"chunks": func(m *Manifest) { m.Chunks++; m.Size++ },
		"first":  func(m *Manifest) { m.FirstChunkOffset++ },
		"beyond": func(m *Manifest) { m.LastChunkOffset += 100 },
	} {
		m := ms[2]
		mod(&m)
		if err := Fetch(ctx, cl, m, io.Discard); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Fetch with a wrong %s: got %v, want ErrCorrupt", name, err)
		}
	}

	// The topic got the configs that keep a few versions.
	rcs, err := kadm.NewClient(cl).DescribeTopicConfigs(ctx, Topic("pi"))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(Topic("pi"), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, c := range rc.Configs {
		got[c.Key] = c.MaybeValue()
	}
	for k, want := range map[string]string{"cleanup.policy": "delete", "max.message.bytes": "2097152", "retention.ms": "-1", "segment.bytes": strconv.Itoa(SegmentBytes)} {
		if got[k] != want {
			t.Errorf("topic config %s = %q, want %q", k, got[k], want)
		}
	}
	if r, _ := strconv.ParseInt(got["retention.bytes"], 10, 64); r < 3*int64(len(blobs[2])) || r > 4*int64(len(blobs[2])) {
		t.Errorf("retention.bytes = %s, want about 3 versions of %d bytes", got["retention.bytes"], len(blobs[2]))
	}
}

func TestPublishFromStreamRaisesRetention(t *testing.T) {
	addr := inproc.Start(t).Addr
	cl := testClient(t, addr)
	p := NewPublisher(cl, testutil.Logger(), KeepVersions(2))
	ctx := context.Background()
	publish(t, p, "s", blob(10))
	data := blob(5<<20 + 3)
	var calls []int64
	// A pipe hides the size from the publisher.
	pr, pw := io.Pipe()
	go func() { pw.Write(data); pw.Close() }()
	m, err := p.Publish(ctx, "s", pr, nil, func(sent int64) { calls = append(calls, sent) })
	if err != nil {
		t.Fatal(err)
	}
	if m.Version != 2 || m.Size != int64(len(data)) || m.Chunks != 6 {
		t.Fatalf("manifest %+v, want version 2 of %d bytes in 6 chunks", m, len(data))
	}
	if len(calls) == 0 || calls[len(calls)-1] != int64(len(data)) || !slices.IsSorted(calls) {
		t.Errorf("progress calls %v, want increasing up to %d", calls, len(data))
	}
	rcs, err := kadm.NewClient(cl).DescribeTopicConfigs(ctx, Topic("s"))
	if err != nil {
		t.Fatal(err)
	}
	rc, _ := rcs.On(Topic("s"), nil)
	for _, c := range rc.Configs {
		if c.Key == "retention.bytes" {
			if r, _ := strconv.ParseInt(c.MaybeValue(), 10, 64); r < 2*int64(len(data)) || r > 3*int64(len(data)) {
				t.Errorf("retention.bytes = %d after a %d-byte version with keep 2", r, len(data))
			}
		}
	}
	var buf bytes.Buffer
	if err := Fetch(ctx, cl, m, &buf); err != nil || !bytes.Equal(buf.Bytes(), data) {
		t.Fatalf("Fetch: %v (equal %v)", err, bytes.Equal(buf.Bytes(), data))
	}
}

func TestSubscriberStartsAtNewest(t *testing.T) {
	addr, _, p := startPublisher(t)
	var data []byte
	for i := range 3 {
		data = blob(100_000 * (i + 1))
		publish(t, p, "a", data)
	}
	dir := t.TempDir()
	s := startSub(t, addr, "a", dir, nil)
	checkHeld(t, s.Subscriber, 3, data)
	checkLatest(t, dir, "a", 3)
	checkFile(t, filepath.Join(dir, "a", "latest"), data)
	var onDisk Manifest
	if b, err := os.ReadFile(filepath.Join(dir, "a", "3.json")); err != nil || json.Unmarshal(b, &onDisk) != nil || onDisk.Version != 3 {
		t.Fatalf("3.json: %v, %+v", err, onDisk)
	}
	st := s.Stats()
	if st.Fetched != 1 || st.Skipped != 2 || st.Held != 3 || st.LatestSeen != 3 || st.Corrupt != 0 {
		t.Errorf("stats %+v, want 1 fetched, 2 skipped, holding and seen 3", st)
	}
	if _, err := os.Stat(filepath.Join(dir, "a", "1")); !os.IsNotExist(err) {
		t.Errorf("version 1 was written: %v", err)
	}
}

func TestSlowSubscriberJumpsToNewest(t *testing.T) {
	for name, sizes := range map[string][]int{
		"same sizes":    {300_000, 300_000, 300_000},
		"growing sizes": {10, 900_000, 900_000},
		// Version 4 looks like less than a version's worth of records:
		// the check happens at its manifest instead.
		"shrinking sizes": {900_000, 10, 10},
	} {
		t.Run(name, func(t *testing.T) {
			addr := inproc.Start(t).Addr
			cl := testClient(t, addr)
			p := NewPublisher(cl, testutil.Logger(), ChunkSize(100_000))
			publish(t, p, "slow", blob(1))
			publish(t, p, "slow", blob(1))
			publish(t, p, "slow", blob(sizes[0]))

			blocked := make(chan struct{})
			release := make(chan struct{})
			var mu sync.Mutex
			var obtained []int64
			s := startSub(t, addr, "slow", t.TempDir(), func(_ *SubscriberConfig, h *subscriberHooks) {
				h.beforeObtain = func(_ context.Context, m Manifest) {
					mu.Lock()
					obtained = append(obtained, m.Version)
					first := len(obtained) == 1
					mu.Unlock()
					if first {
						close(blocked)
						<-release
					}
				}
			})
			<-blocked
			publish(t, p, "slow", blob(sizes[1]))
			v5 := blob(sizes[2])
			publish(t, p, "slow", v5)
			close(release)
			checkHeld(t, s.Subscriber, 5, v5)
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(obtained, []int64{3, 5}) {
				t.Errorf("obtained versions %v, want [3 5]", obtained)
			}
			if st := s.Stats(); st.Fetched != 2 || st.Skipped != 3 {
				t.Errorf("stats %+v, want 2 fetched, 3 skipped", st)
			}
		})
	}
}

func TestRestartMidTransfer(t *testing.T) {
	addr := inproc.Start(t).Addr
	cl := testClient(t, addr)
	p := NewPublisher(cl, testutil.Logger(), ChunkSize(64<<10))
	v1 := blob(1000)
	publish(t, p, "r", v1)
	dir := t.TempDir()

	var once sync.Once
	interrupted := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := startSubCtx(t, ctx, addr, "r", dir, func(_ *SubscriberConfig, h *subscriberHooks) {
		h.onWrite = func(v, written int64) {
			if v == 2 && written >= 3*64<<10 {
				once.Do(func() { cancel(); close(interrupted) })
			}
		}
	})
	waitHeld(t, a.Subscriber, 1)
	v2 := blob(4 << 20)
	publish(t, p, "r", v2)
	<-interrupted
	a.stop()
	if m, _, _ := a.Current(); m.Version != 1 {
		t.Fatalf("interrupted subscriber holds version %d, want 1", m.Version)
	}
	checkLatest(t, dir, "r", 1)
	// A crash would have left a temporary file behind; a live
	// neighbour's (another agent's) is recent and must stay.
	stale := filepath.Join(dir, "r", ".tmp-2-crashed")
	fresh := filepath.Join(dir, "r", ".tmp-2-neighbour")
	for _, f := range []string{stale, fresh} {
		if err := os.WriteFile(f, []byte("partial"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	os.Chtimes(stale, old, old)

	b := startSub(t, addr, "r", dir, func(_ *SubscriberConfig, h *subscriberHooks) {
		h.beforeObtain = func(_ context.Context, m Manifest) {
			if m.Version == 1 {
				t.Errorf("restarted subscriber refetched version 1")
			}
		}
	})
	m, path, ok := b.Current()
	if !ok || m.Version != 1 {
		t.Fatalf("restarted subscriber serves %d (ok %v) at once, want 1", m.Version, ok)
	}
	checkFile(t, path, v1)
	checkHeld(t, b.Subscriber, 2, v2)
	checkLatest(t, dir, "r", 2)
	if st := b.Stats(); st.Fetched != 1 || st.Corrupt != 0 {
		t.Errorf("stats %+v, want 1 fetched", st)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale temporary file left behind: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("a recent temporary file was removed: %v", err)
	}
	os.Remove(fresh)
}

// produceVersion writes a version by hand: chunks of data, with chunk bad
// (if >= 0) flipped, and a manifest for data whose sha256 is replaced by
// sha (if not empty). It returns the manifest.
func produceVersion(t *testing.T, cl *kgo.Client, policy string, v int64, data []byte, chunk, bad int, sha string, manifest bool) Manifest {
	t.Helper()
	ctx := context.Background()
	sum := sha256.Sum256(data)
	m := Manifest{Policy: policy, Version: v, Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:]), FirstChunkOffset: -1, LastChunkOffset: -1, Published: time.Now().UTC()}
	if sha != "" {
		m.SHA256 = sha
	}
	for i := 0; i*chunk < len(data); i++ {
		c := slices.Clone(data[i*chunk : min((i+1)*chunk, len(data))])
		if i == bad {
			c[0] ^= 1
		}
		r := &kgo.Record{Topic: Topic(policy), Value: c, Headers: chunkHeaders(v, i, "")}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if m.FirstChunkOffset < 0 {
			m.FirstChunkOffset = r.Offset
		}
		m.LastChunkOffset = r.Offset
		m.Chunks++
	}
	if !manifest {
		return m
	}
	b, _ := json.Marshal(m)
	r := &kgo.Record{Topic: Topic(policy), Value: b, Headers: manifestHeaders(v, "")}
	if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		t.Fatal(err)
	}
	m.Offset = r.Offset
	return m
}

func TestCorruptVersionRejected(t *testing.T) {
	addr, cl, p := startPublisher(t)
	v1 := blob(5000)
	publish(t, p, "c", v1)
	dir := t.TempDir()
	s := startSub(t, addr, "c", dir, nil)
	waitHeld(t, s.Subscriber, 1)

	wrongSHA := produceVersion(t, cl, "c", 2, blob(3000), 1000, -1, hex.EncodeToString(make([]byte, 32)), true)
	badChunk := produceVersion(t, cl, "c", 3, blob(3000), 1000, 1, "", true)
	// Garbage that claims to be a manifest.
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: Topic("c"), Value: []byte("{not json"), Headers: manifestHeaders(4, "")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for _, m := range []Manifest{wrongSHA, badChunk} {
		if err := Fetch(context.Background(), cl, m, io.Discard); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Fetch of corrupt version %d: %v, want ErrCorrupt", m.Version, err)
		}
	}

	deadline := time.Now().Add(10 * time.Second)
	for s.Stats().Corrupt < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if st := s.Stats(); st.Corrupt != 3 || st.Held != 1 || st.Fetched != 1 {
		t.Fatalf("stats %+v, want 3 corrupt, holding version 1", st)
	}
	checkLatest(t, dir, "c", 1)
	if m, path, _ := s.Current(); m.Version != 1 {
		t.Fatalf("holding %d, want 1", m.Version)
	} else {
		checkFile(t, path, v1)
	}
	if _, err := os.Stat(filepath.Join(dir, "c", "3")); !os.IsNotExist(err) {
		t.Errorf("corrupt version 3 on disk: %v", err)
	}

	// A node that joins now falls back to the newest good version.
	fresh := startSub(t, addr, "c", t.TempDir(), nil)
	checkHeld(t, fresh.Subscriber, 1, v1)
	if st := fresh.Stats(); st.Corrupt != 2 {
		t.Errorf("fresh subscriber stats %+v, want 2 corrupt", st)
	}

	// The next good version goes through.
	v4 := blob(7000)
	if m := publish(t, p, "c", v4); m.Version != 4 {
		t.Fatalf("published version %d, want 4 (after the corrupt 3)", m.Version)
	}
	checkHeld(t, s.Subscriber, 4, v4)
	waitHeld(t, fresh.Subscriber, 4)
}

func TestWaitIsPrompt(t *testing.T) {
	addr, _, p := startPublisher(t)
	// The subscriber starts before the topic exists.
	s := startSub(t, addr, "w", t.TempDir(), nil)

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	start := time.Now()
	m, _, err := s.Wait(ctx, 0)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || m.Version != 0 {
		t.Fatalf("Wait with nothing published: %v, version %d; want deadline exceeded", err, m.Version)
	}
	if d := time.Since(start); d < 150*time.Millisecond || d > time.Second {
		t.Errorf("Wait honoured a 200ms deadline after %v", d)
	}

	for v := int64(1); v <= 3; v++ {
		got := make(chan time.Time, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if m, _, err := s.Wait(ctx, v-1); err != nil || m.Version != v {
				t.Errorf("Wait(%d): version %d, %v", v-1, m.Version, err)
			}
			got <- time.Now()
		}()
		time.Sleep(50 * time.Millisecond) // let Wait block
		publish(t, p, "w", blob(20_000))
		published := time.Now()
		if d := (<-got).Sub(published); d > time.Second {
			t.Errorf("version %d: Wait returned %v after the publish", v, d)
		}
	}
	// Already held: at once.
	ctx, cancel = context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if m, _, err := s.Wait(ctx, 2); err != nil || m.Version != 3 {
		t.Errorf("Wait(2) holding 3: version %d, %v", m.Version, err)
	}
}

func TestKeepDeletesOldVersions(t *testing.T) {
	addr, _, p := startPublisher(t)
	dir := t.TempDir()
	s := startSub(t, addr, "k", dir, func(c *SubscriberConfig, _ *subscriberHooks) { c.Keep = 2 })
	for v := int64(1); v <= 4; v++ {
		publish(t, p, "k", blob(int(v)*1000))
		waitHeld(t, s.Subscriber, v)
	}
	ents, err := os.ReadDir(filepath.Join(dir, "k"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if want := []string{"3", "3.json", "4", "4.json", "latest"}; !slices.Equal(names, want) {
		t.Fatalf("cache holds %v, want %v", names, want)
	}
	if st := s.Stats(); st.Fetched != 4 || st.Skipped != 0 {
		t.Errorf("stats %+v, want 4 fetched, none skipped", st)
	}
}

func TestUnfinishedVersionIgnored(t *testing.T) {
	addr, cl, p := startPublisher(t)
	v1 := blob(2000)
	publish(t, p, "u", v1)
	dir := t.TempDir()
	s := startSub(t, addr, "u", dir, nil)
	waitHeld(t, s.Subscriber, 1)

	// A publisher killed after five chunks of version 2.
	produceVersion(t, cl, "u", 2, blob(5000), 1000, -1, "", false)
	l, ok, err := Latest(context.Background(), cl, "u")
	if err != nil || !ok || l.Version != 1 {
		t.Fatalf("Latest with an unfinished version 2: %d, %v, %v; want 1", l.Version, ok, err)
	}
	fresh := startSub(t, addr, "u", t.TempDir(), nil)
	waitHeld(t, fresh.Subscriber, 1)

	// The next publish reuses version 2; its chunks are told apart.
	v2 := blob(3500)
	if m := publish(t, p, "u", v2); m.Version != 2 {
		t.Fatalf("published version %d, want 2", m.Version)
	}
	for _, sub := range []*testSub{s, fresh} {
		checkHeldIntact(t, sub, 2, v2)
	}
}

func TestConcurrentPublishers(t *testing.T) {
	addr := inproc.Start(t).Addr
	cl := testClient(t, addr)
	p := NewPublisher(cl, testutil.Logger(), ChunkSize(10_000))
	publish(t, p, "cc", blob(10))
	s := startSub(t, addr, "cc", t.TempDir(), nil)

	// One Publisher: calls take turns, every one gets its own version.
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := map[int64][]byte{}
	for range 4 {
		wg.Go(func() {
			data := blob(200_000)
			m, err := p.Publish(context.Background(), "cc", bytes.NewReader(data), nil, nil)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if _, dup := won[m.Version]; dup {
				t.Errorf("version %d published twice", m.Version)
			}
			won[m.Version] = data
		})
	}
	wg.Wait()
	if len(won) != 4 || won[5] == nil {
		t.Fatalf("published versions %v, want 2 to 5", slices.Sorted(maps.Keys(won)))
	}

	// Two processes: the one that finishes second loses.
	other := NewPublisher(testClient(t, addr), testutil.Logger())
	var v6 []byte
	p.beforeManifest = func(m Manifest) {
		if m.Version == 6 && v6 == nil {
			v6 = blob(30_000)
			publish(t, other, "cc", v6)
		}
	}
	if _, err := p.Publish(context.Background(), "cc", bytes.NewReader(blob(1000)), nil, nil); !errors.Is(err, ErrConflict) {
		t.Fatalf("Publish racing another publisher: %v, want ErrConflict", err)
	}
	p.beforeManifest = nil
	// Its orphaned chunks lie between version 6's chunks and manifest
	// or after it; neither readers nor the next publish mind.
	v7 := blob(20_000)
	quiet := p.quietChecks.Load()
	if m := publish(t, p, "cc", v7); m.Version != 7 {
		t.Fatalf("published version %d after the conflict, want 7", m.Version)
	}
	// Nobody else wrote meanwhile: the check needed no read of the log.
	if got := p.quietChecks.Load(); got != quiet+1 {
		t.Errorf("quiet conflict checks went from %d to %d over an uncontended publish, want one more", quiet, got)
	}
	l, ok, err := Latest(context.Background(), cl, "cc")
	if err != nil || !ok || l.Version != 7 {
		t.Fatalf("Latest: %d, %v, %v; want 7", l.Version, ok, err)
	}
	var buf bytes.Buffer
	if err := Fetch(context.Background(), cl, l, &buf); err != nil || !bytes.Equal(buf.Bytes(), v7) {
		t.Fatalf("Fetch of the newest: %v", err)
	}
	checkHeldIntact(t, s, 7, v7)
}

// Two publishers that picked the same version number interleave their
// chunks; the manifest of one names a range holding both. Readers must
// take only its chunks, by publish id, whether they fetch by range or
// assemble from the stream.
func TestInterleavedSameVersion(t *testing.T) {
	addr, cl, p := startPublisher(t)
	publish(t, p, "il", blob(100))
	following := startSub(t, addr, "il", t.TempDir(), nil)
	waitHeld(t, following.Subscriber, 1)

	ctx := context.Background()
	a, b := blob(3000), blob(2500)
	produce := func(r *kgo.Record) int64 {
		r.Topic = Topic("il")
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		return r.Offset
	}
	sum := sha256.Sum256(b)
	m := Manifest{Policy: "il", Version: 2, Size: int64(len(b)), Chunks: 3, SHA256: hex.EncodeToString(sum[:]), PublishID: "bbbb", Published: time.Now().UTC()}
	for i := range 3 {
		produce(&kgo.Record{Value: a[i*1000 : (i+1)*1000], Headers: chunkHeaders(2, i, "aaaa")})
		off := produce(&kgo.Record{Value: b[i*1000 : min((i+1)*1000, len(b))], Headers: chunkHeaders(2, i, "bbbb")})
		if i == 0 {
			m.FirstChunkOffset = off
		}
		m.LastChunkOffset = off
	}
	v, _ := json.Marshal(m)
	m.Offset = produce(&kgo.Record{Value: v, Headers: manifestHeaders(2, "bbbb")})

	var buf bytes.Buffer
	if err := Fetch(ctx, cl, m, &buf); err != nil || !bytes.Equal(buf.Bytes(), b) {
		t.Fatalf("Fetch: %v (equal %v)", err, bytes.Equal(buf.Bytes(), b))
	}
	fresh := startSub(t, addr, "il", t.TempDir(), nil)
	for _, s := range []*testSub{following, fresh} {
		checkHeld(t, s.Subscriber, 2, b)
	}
}

// Two agents of different jobs on one node share the policy directory.
func TestSharedCacheDir(t *testing.T) {
	addr := inproc.Start(t).Addr
	cl := testClient(t, addr)
	p := NewPublisher(cl, testutil.Logger(), ChunkSize(50_000))
	dir := t.TempDir()
	a := startSub(t, addr, "sh", dir, nil)
	b := startSub(t, addr, "sh", dir, nil)
	for v := int64(1); v <= 4; v++ {
		data := blob(400_000 + int(v))
		publish(t, p, "sh", data)
		for _, s := range []*testSub{a, b} {
			checkHeld(t, s.Subscriber, v, data)
		}
		checkFile(t, filepath.Join(dir, "sh", "latest"), data)
	}
	if st := a.Stats(); st.Corrupt != 0 {
		t.Errorf("stats %+v", st)
	}
}
