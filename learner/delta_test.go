package learner

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest/inproc"
	"github.com/simtel/simtel/learner/learnertest"
)

func publishWith(t *testing.T, p *Publisher, policy string, data []byte, o PublishOptions) Manifest {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m, err := p.PublishWith(ctx, policy, bytes.NewReader(data), o)
	if err != nil {
		t.Fatalf("publish %d bytes to %s: %v", len(data), policy, err)
	}
	return m
}

// TestDeltaAssembles publishes a full format 2 version and a delta with
// 3% of its bytes changed: a node holding the base receives a small part
// of the version, a node without it fetches the chunks it lacks from the
// base's records; both hold exactly the full version's bytes.
func TestDeltaAssembles(t *testing.T) {
	addr := inproc.Start(t).Addr
	cl := testClient(t, addr)
	p := NewPublisher(cl, testutil.Logger(), ChunkSize(256<<10))
	const size = 16 << 20
	v1 := blob(size)
	withBase := startSub(t, addr, "pi", t.TempDir(), nil)

	m1 := publishWith(t, p, "pi", v1, PublishOptions{Format: Format2})
	if m1.Format != Format2 || m1.Base != 0 || m1.Sent != m1.Chunks || m1.Chunks < 40 {
		t.Fatalf("full format 2 version: %+v", m1)
	}
	checkHeldIntact(t, withBase, 1, v1)
	before := withBase.Stats()

	v2 := learnertest.ChangeRegions(v1, 0.03, 4)
	m2 := publishWith(t, p, "pi", v2, PublishOptions{DeltaFrom: DeltaAuto})
	if m2.Base != 1 || m2.Sent >= m2.Chunks/4 || m2.DeltaBytes == 0 {
		t.Fatalf("delta: base %d, %d of %d chunks sent, delta bytes %d", m2.Base, m2.Sent, m2.Chunks, m2.DeltaBytes)
	}
	checkHeldIntact(t, withBase, 2, v2)
	checkLatest(t, withBase.cfg.Dir, "pi", 2)
	after := withBase.Stats()
	recv, reused := after.Received-before.Received, after.Reused-before.Reused
	t.Logf("node with the base: received %d bytes (%.1f%% of the version), reused %d", recv, 100*float64(recv)/size, reused)
	if recv > size/10 {
		t.Errorf("node with the base received %d bytes of a %d-byte version with 3%% changed, want at most 10%%", recv, size)
	}
	if reused < size*8/10 {
		t.Errorf("node with the base reused only %d bytes", reused)
	}

	// A node without the base gets the chunks from the base's records.
	fresh := startSub(t, addr, "pi", t.TempDir(), nil)
	checkHeldIntact(t, fresh, 2, v2)
	if st := fresh.Stats(); st.Received < size || st.Received > size*12/10 || st.Reused != 0 {
		t.Errorf("node without the base: received %d bytes, reused %d, of a %d-byte version", st.Received, st.Reused, size)
	}

	// A delta from an older version named explicitly; the nodes hold
	// both versions' chunks.
	v3 := learnertest.ChangeRegions(v1, 0.01, 1)
	m3 := publishWith(t, p, "pi", v3, PublishOptions{DeltaFrom: 1})
	if m3.Base != 1 {
		t.Fatalf("delta from 1: base %d", m3.Base)
	}
	checkHeldIntact(t, withBase, 3, v3)
	checkHeldIntact(t, fresh, 3, v3)

	// Bases that cannot be: a missing version, a format 1 one.
	ctx := context.Background()
	if _, err := p.PublishWith(ctx, "pi", bytes.NewReader(v3), PublishOptions{DeltaFrom: 9}); err == nil {
		t.Error("delta from a version that does not exist published")
	}
	publish(t, p, "pi", v1) // version 4, format 1
	checkHeldIntact(t, withBase, 4, v1)
	if _, err := p.PublishWith(ctx, "pi", bytes.NewReader(v3), PublishOptions{DeltaFrom: 4}); err == nil {
		t.Error("delta from a format 1 version published")
	}
	m5 := publishWith(t, p, "pi", v3, PublishOptions{DeltaFrom: DeltaAuto})
	if m5.Base != 0 || m5.Sent != m5.Chunks {
		t.Errorf("auto delta after a format 1 version: base %d, sent %d of %d, want a full version", m5.Base, m5.Sent, m5.Chunks)
	}
	checkHeldIntact(t, fresh, 5, v3)
}

// TestUntrustedNeverInstalled: with trusted keys, unsigned versions,
// versions signed by another key and format 1 versions are refused and
// counted; the last good version stays held and linked.
func TestUntrustedNeverInstalled(t *testing.T) {
	addr := inproc.Start(t).Addr
	cl := testClient(t, addr)
	p := NewPublisher(cl, testutil.Logger(), ChunkSize(64<<10))
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	_, otherPriv, _ := ed25519.GenerateKey(rand.Reader)
	dir := t.TempDir()
	trusting := func(c *SubscriberConfig, _ *subscriberHooks) { c.TrustedKeys = []ed25519.PublicKey{pub} }
	s := startSub(t, addr, "pi", dir, trusting)

	good := blob(1 << 20)
	publishWith(t, p, "pi", good, PublishOptions{SignKey: priv})
	checkHeldIntact(t, s, 1, good)

	publishWith(t, p, "pi", blob(1<<20), PublishOptions{Format: Format2})                           // 2: unsigned
	publishWith(t, p, "pi", blob(1<<20), PublishOptions{SignKey: otherPriv})                        // 3: unknown key
	publish(t, p, "pi", blob(1<<20))                                                                // 4: format 1
	publishWith(t, p, "pi", learnertest.ChangeRegions(good, 0.05, 1), PublishOptions{DeltaFrom: 1}) // 5: unsigned delta
	deadline := time.Now().Add(20 * time.Second)
	for s.Stats().Untrusted < 4 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	st := s.Stats()
	if st.Untrusted != 4 || st.Held != 1 {
		t.Fatalf("after 4 untrusted versions: %+v", st)
	}
	checkLatest(t, dir, "pi", 1)
	if m, _, _ := s.Current(); m.Version != 1 {
		t.Fatalf("serves version %d", m.Version)
	}

	// A signed delta against the trusted version installs.
	v6 := learnertest.ChangeRegions(good, 0.05, 1)
	m6 := publishWith(t, p, "pi", v6, PublishOptions{DeltaFrom: 1, SignKey: priv})
	if m6.Base != 1 || m6.KeyID != KeyID(pub) {
		t.Fatalf("signed delta: %+v", m6)
	}
	checkHeld(t, s.Subscriber, 6, v6)
	s.stop()

	// Restarted with another key, the cached version is not served.
	otherPub := otherPriv.Public().(ed25519.PublicKey)
	s2, err := NewSubscriber(SubscriberConfig{Brokers: []string{addr}, Policy: "pi", Dir: dir, Logger: testutil.Logger(), TrustedKeys: []ed25519.PublicKey{otherPub}})
	if err != nil {
		t.Fatal(err)
	}
	if m, _, ok := s2.Current(); ok {
		t.Fatalf("cached version %d signed by a key no longer trusted is served", m.Version)
	}
}

// TestDeltaBadInput: a chunk record whose bytes do not match, a truncated
// manifest and a delta whose base is gone from the topic are never
// installed; nodes keep (or fall back to) a good version.
func TestDeltaBadInput(t *testing.T) {
	addr := inproc.Start(t).Addr
	cl := testClient(t, addr)
	p := NewPublisher(cl, testutil.Logger(), ChunkSize(64<<10))
	ctx := context.Background()
	dirA := t.TempDir()
	a := startSub(t, addr, "pi", dirA, nil)
	v1 := blob(2 << 20)
	m1 := publishWith(t, p, "pi", v1, PublishOptions{Format: Format2})
	checkHeldIntact(t, a, 1, v1)

	// Version 2: a delta whose one sent chunk record holds other bytes
	// than its hash says.
	rec := &kgo.Record{Topic: Topic("pi"), Value: blob(1000), Headers: chunkHeaders2(2, 0, "x1")}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	bad := m1
	bad.Version, bad.Base, bad.PublishID, bad.Sent, bad.DeltaBytes = 2, 1, "x1", 1, 1000
	bad.FirstChunkOffset, bad.LastChunkOffset = rec.Offset, rec.Offset
	bad.ChunkList = append([]ChunkRef{{Size: 1000, Offset: rec.Offset, Hash: chunkHash(blob(1000))}}, m1.ChunkList...)
	bad.Chunks, bad.Size = len(bad.ChunkList), m1.Size+1000
	bad.seal(nil)
	produceManifest(t, cl, bad, 0)

	// Version 3: a truncated manifest.
	v3 := bad
	v3.Version, v3.PublishID = 3, "x3"
	v3.seal(nil)
	produceManifest(t, cl, v3, 2)

	time.Sleep(2 * time.Second)
	if st := a.Stats(); st.Held != 1 || st.Corrupt != 2 {
		t.Fatalf("after a wrong chunk and a truncated manifest: %+v", st)
	}
	checkLatest(t, dirA, "pi", 1)

	// A good delta (version 3 again: the truncated manifest is no
	// version), then the base's records are deleted.
	v4 := learnertest.ChangeRegions(v1, 0.03, 2)
	m4 := publishWith(t, p, "pi", v4, PublishOptions{DeltaFrom: 1})
	if m4.Version != 3 {
		t.Fatalf("delta published as version %d, want 3", m4.Version)
	}
	checkHeld(t, a.Subscriber, 3, v4)
	adm := kadm.NewClient(cl)
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: Topic("pi"), Partition: 0, At: m4.FirstChunkOffset})
	if resp, err := adm.DeleteRecords(ctx, offs); err != nil || resp.Error() != nil {
		t.Fatalf("DeleteRecords: %v %v", err, resp.Error())
	}
	// A node without the base cannot assemble version 3: refused and
	// counted, nothing exposed.
	fresh := startSub(t, addr, "pi", t.TempDir(), nil)
	deadline := time.Now().Add(20 * time.Second)
	for fresh.Stats().Corrupt == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if _, _, ok := fresh.Current(); ok || fresh.Stats().Corrupt == 0 {
		t.Fatalf("node without the base after it was deleted: holds %v, stats %+v", ok, fresh.Stats())
	}
	// The publisher's auto mode sees the base is gone and sends a full
	// version, which both nodes take.
	v5 := learnertest.ChangeRegions(v4, 0.03, 2)
	m5 := publishWith(t, p, "pi", v5, PublishOptions{DeltaFrom: DeltaAuto})
	if m5.Base != 0 {
		t.Fatalf("auto delta over a deleted base: base %d", m5.Base)
	}
	checkHeld(t, fresh.Subscriber, 4, v5)
	checkHeld(t, a.Subscriber, 4, v5)
	if _, err := p.PublishWith(ctx, "pi", bytes.NewReader(v5), PublishOptions{DeltaFrom: 3}); err == nil {
		t.Error("delta from a version whose chunks are gone published")
	}
}

// produceManifest writes m's manifest record, its value cut by cut bytes.
func produceManifest(t *testing.T, cl *kgo.Client, m Manifest, cut int) {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	b = b[:len(b)-cut]
	r := &kgo.Record{Topic: Topic(m.Policy), Value: b, Headers: manifestHeaders2(m.Version, m.PublishID)}
	if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkDeltaBytes measures what a delta costs each node: a 64 MiB
// format 2 version is published and held by four nodes, then versions
// with 3% of their bytes changed (in four contiguous regions, tensors
// that changed) are published with DeltaFrom auto. It reports the bytes
// each node received and the bytes the publisher wrote, as percentages of
// the version's size:
//
//	go test -run '^$' -bench DeltaBytes -benchtime 3x ./learner/
func BenchmarkDeltaBytes(b *testing.B) {
	const size, nodes = 64 << 20, 4
	addr := inproc.Start(b).Addr
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	p := NewPublisher(cl, testutil.Logger())
	ctx := context.Background()
	subs := make([]*Subscriber, nodes)
	var wg sync.WaitGroup
	runCtx, stop := context.WithCancel(ctx)
	defer func() { stop(); wg.Wait() }()
	for i := range subs {
		s, err := NewSubscriber(SubscriberConfig{Brokers: []string{addr}, Policy: "bench", Dir: b.TempDir(), Logger: testutil.Logger(), RetryInterval: 50 * time.Millisecond})
		if err != nil {
			b.Fatal(err)
		}
		subs[i] = s
		wg.Add(1)
		go func() { defer wg.Done(); s.Run(runCtx) }()
	}
	waitAll := func(v int64) {
		for _, s := range subs {
			wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			m, _, err := s.Wait(wctx, v-1)
			cancel()
			if err != nil || m.Version != v {
				b.Fatalf("node holds %d, want %d: %v", m.Version, v, err)
			}
		}
	}
	data := make([]byte, size)
	rand.Read(data)
	m, err := p.PublishWith(ctx, "bench", bytes.NewReader(data), PublishOptions{Format: Format2})
	if err != nil {
		b.Fatal(err)
	}
	waitAll(m.Version)
	var recv, sent, chunks int64
	b.ResetTimer()
	for range b.N {
		data = learnertest.ChangeRegions(data, 0.03, 4)
		before := make([]int64, nodes)
		for i, s := range subs {
			before[i] = s.Stats().Received
		}
		m, err := p.PublishWith(ctx, "bench", bytes.NewReader(data), PublishOptions{DeltaFrom: DeltaAuto})
		if err != nil {
			b.Fatal(err)
		}
		if m.Base == 0 {
			b.Fatalf("version %d is not a delta", m.Version)
		}
		waitAll(m.Version)
		for i, s := range subs {
			recv += s.Stats().Received - before[i]
		}
		for _, c := range m.ChunkList {
			if m.Sent > 0 && c.Offset >= m.FirstChunkOffset {
				sent += int64(c.Size) // a record this publish wrote
			}
		}
		chunks += int64(m.Sent)
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(100*float64(recv)/n/nodes/size, "%received/node")
	b.ReportMetric(100*float64(sent)/n/size, "%written")
	b.ReportMetric(float64(chunks)/n, "chunks_sent/op")
}
