package gossip

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/simtel/simtel/internal/testutil"
)

// recorder keeps the log records of all pools of a test so tests can
// assert on them and dump them when they fail.
type recorder struct {
	mu   sync.Mutex
	recs []logRec
}

type logRec struct {
	msg   string
	attrs map[string]string
}

// newRecorder returns a recorder that logs, if the test fails, the pools'
// own records and memberlist's warnings and errors (all of memberlist's
// lines with GOSSIP_TEST_VERBOSE set).
func newRecorder(t *testing.T) *recorder {
	r := &recorder{}
	verbose := os.Getenv("GOSSIP_TEST_VERBOSE") != ""
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, rec := range r.recs {
			lvl := rec.attrs["level"]
			if rec.msg != "memberlist" || verbose || strings.HasPrefix(lvl, "err") || strings.HasPrefix(lvl, "warn") {
				t.Logf("%s %v", rec.msg, rec.attrs)
			}
		}
	})
	return r
}

func (r *recorder) logger(node string) *slog.Logger {
	return slog.New(&recHandler{r: r, attrs: []slog.Attr{slog.String("node", node)}})
}

// find returns the records with message msg whose attribute key contains
// sub ("" matches any).
func (r *recorder) find(msg, key, sub string) []logRec {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []logRec
	for _, rec := range r.recs {
		if rec.msg == msg && (key == "" || strings.Contains(rec.attrs[key], sub)) {
			out = append(out, rec)
		}
	}
	return out
}

type recHandler struct {
	r     *recorder
	attrs []slog.Attr
}

func (h *recHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recHandler) WithGroup(string) slog.Handler            { return h }
func (h *recHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &recHandler{r: h.r, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}
func (h *recHandler) Handle(_ context.Context, rec slog.Record) error {
	attrs := make(map[string]string)
	for _, a := range h.attrs {
		attrs[a.Key] = a.Value.String()
	}
	rec.Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value.String()
		return true
	})
	h.r.mu.Lock()
	h.r.recs = append(h.r.recs, logRec{msg: rec.Message, attrs: attrs})
	h.r.mu.Unlock()
	return nil
}

// freeAddr returns a 127.0.0.1 address whose port is free for TCP and UDP
// right now, for nodes that must be named in a seed list before they start:
// below the ephemeral range (testutil.FreePort), where no other process's
// outgoing connection takes it before the node listens.
func freeAddr(t *testing.T) string {
	t.Helper()
	for range 20 {
		addr := testutil.FreePort(t)
		u, err := net.ListenPacket("udp", addr)
		if err != nil {
			continue
		}
		u.Close()
		return addr
	}
	t.Fatal("no free port for TCP and UDP")
	return ""
}

func startPool(t *testing.T, rec *recorder, cfg Config) *Pool {
	t.Helper()
	cfg.Fast = true
	cfg.Logger = rec.logger(cfg.NodeName)
	p, err := Start(cfg)
	if err != nil {
		t.Fatalf("Start(%s): %v", cfg.NodeName, err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close(%s): %v", cfg.NodeName, err)
		}
	})
	return p
}

// wantNode is what a view must say about one node. Staleness seconds are
// checked to lie in [minSec, maxSec]. A gone node must be absent or listed
// with Alive false.
type wantNode struct {
	version, staleVersions int64
	minSec, maxSec         float64
	gone                   bool
}

func checkView(v View, newest int64, byVersion map[int64]int, nodes map[string]wantNode) error {
	if v.Newest != newest {
		return fmt.Errorf("got Newest %d, want %d", v.Newest, newest)
	}
	if !maps.Equal(v.ByVersion, byVersion) {
		return fmt.Errorf("got ByVersion %v, want %v", v.ByVersion, byVersion)
	}
	seen := 0
	var maxVer int64
	var maxSec float64
	for _, n := range v.Nodes {
		w, ok := nodes[n.Node]
		if !ok {
			return fmt.Errorf("unexpected node %q in view", n.Node)
		}
		if w.gone {
			if n.Alive {
				return fmt.Errorf("node %s: got Alive, want gone", n.Node)
			}
			if n.StaleVersions != 0 || n.StaleSeconds != 0 {
				return fmt.Errorf("node %s: gone but counted stale", n.Node)
			}
			continue
		}
		seen++
		if n.Version != w.version || n.StaleVersions != w.staleVersions {
			return fmt.Errorf("node %s: got version %d stale %d, want %d stale %d", n.Node, n.Version, n.StaleVersions, w.version, w.staleVersions)
		}
		if n.StaleSeconds < w.minSec || n.StaleSeconds > w.maxSec {
			return fmt.Errorf("node %s: got StaleSeconds %v, want in [%v, %v]", n.Node, n.StaleSeconds, w.minSec, w.maxSec)
		}
		if n.Version > 0 && n.Since.IsZero() {
			return fmt.Errorf("node %s: holds version %d with zero Since", n.Node, n.Version)
		}
		if !n.Alive || n.Addr == "" {
			return fmt.Errorf("node %s: got Alive %v Addr %q", n.Node, n.Alive, n.Addr)
		}
		maxVer, maxSec = max(maxVer, n.StaleVersions), max(maxSec, n.StaleSeconds)
	}
	want := 0
	for _, w := range nodes {
		if !w.gone {
			want++
		}
	}
	if seen != want {
		return fmt.Errorf("got %d live nodes, want %d: %+v", seen, want, v.Nodes)
	}
	if v.MaxStaleVersions != maxVer || v.MaxStaleSeconds != maxSec {
		return fmt.Errorf("got MaxStale %d/%v, want %d/%v", v.MaxStaleVersions, v.MaxStaleSeconds, maxVer, maxSec)
	}
	return nil
}

func allViews(pools []*Pool, policy string, check func(View) error) func() error {
	return func() error {
		for _, p := range pools {
			if p == nil {
				continue
			}
			if err := check(p.View(policy)); err != nil {
				return fmt.Errorf("view of %s: %w", p.cfg.NodeName, err)
			}
		}
		return nil
	}
}

func TestPoolRollout(t *testing.T) {
	rec := newRecorder(t)
	seedA, seedB := freeAddr(t), freeAddr(t)
	seeds := []string{seedA, seedB}
	binds := []string{seedA, seedB, "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"}

	rs := uint64(time.Now().UnixNano())
	order := rand.New(rand.NewPCG(rs, 0)).Perm(len(binds))
	t.Logf("start order %v (seed %d)", order, rs)
	pools := make([]*Pool, len(binds))
	for _, i := range order {
		pools[i] = startPool(t, rec, Config{
			NodeName: fmt.Sprintf("n%d", i+1), Bind: binds[i], Join: seeds, Cluster: "run-42",
		})
		// Pacing, not an assertion: lets the nodes started first find
		// their seeds missing and retry.
		time.Sleep(100 * time.Millisecond)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range pools {
				dumpPool(t, p)
			}
		}
	})
	for i, p := range pools {
		host, port, err := net.SplitHostPort(p.Addr())
		if err != nil || host != "127.0.0.1" || port == "0" {
			t.Fatalf("n%d: got Addr %q, want 127.0.0.1 with a real port", i+1, p.Addr())
		}
		if i < 2 && p.Addr() != binds[i] {
			t.Fatalf("n%d: got Addr %q, want %q", i+1, p.Addr(), binds[i])
		}
	}
	testutil.WaitFor(t, 15*time.Second, "all joined", func() error {
		for i, p := range pools {
			if got := p.Members(); got != 5 {
				return fmt.Errorf("n%d: got %d members, want 5", i+1, got)
			}
		}
		return nil
	})
	if len(rec.find("gossip join failed, retrying", "", "")) == 0 {
		t.Errorf("no node retried its join, though the first one started had no live seed")
	}
	if got := len(rec.find("gossip pool joined", "", "")); got != 5 {
		t.Errorf("got %d \"gossip pool joined\" logs, want 5", got)
	}

	// 3 nodes at v2, 2 at v1. v2 first landed 10s ago (on n1).
	base := time.Now()
	pools[3].SetHolding("actor", Holding{Version: 1, Since: base.Add(-60 * time.Second)})
	pools[4].SetHolding("actor", Holding{Version: 1, Since: base.Add(-50 * time.Second)})
	pools[0].SetHolding("actor", Holding{Version: 2, Since: base.Add(-10 * time.Second)})
	pools[1].SetHolding("actor", Holding{Version: 2, Since: base.Add(-5 * time.Second)})
	pools[2].SetHolding("actor", Holding{Version: 2, Since: base.Add(-1 * time.Second)})
	upToDate := wantNode{minSec: 0, maxSec: 0}
	testutil.WaitFor(t, converge, "views of v2 rollout", allViews(pools, "actor", func(v View) error {
		return checkView(v, 2, map[int64]int{2: 3, 1: 2}, map[string]wantNode{
			"n1": {version: 2, minSec: 0, maxSec: 0},
			"n2": {version: 2, minSec: 0, maxSec: 0},
			"n3": {version: 2, minSec: 0, maxSec: 0},
			"n4": {version: 1, staleVersions: 1, minSec: 10, maxSec: 40},
			"n5": {version: 1, staleVersions: 1, minSec: 10, maxSec: 40},
		})
	}))
	// Since travels with millisecond precision.
	v := pools[4].View("actor")
	if got, want := v.Nodes[0].Since.UnixMilli(), base.Add(-10*time.Second).UnixMilli(); got != want {
		t.Errorf("n1 Since seen by n5: got %d ms, want %d ms", got, want)
	}

	// A policy nobody holds: everyone at 0, nobody stale.
	testutil.WaitFor(t, time.Second, "view of unknown policy", allViews(pools, "critic", func(v View) error {
		return checkView(v, 0, map[int64]int{0: 5}, map[string]wantNode{
			"n1": upToDate, "n2": upToDate, "n3": upToDate, "n4": upToDate, "n5": upToDate,
		})
	}))

	// n4 gets v3: everyone else is behind, measured from n4's Since.
	pools[3].SetHolding("actor", Holding{Version: 3, Since: time.Now()})
	testutil.WaitFor(t, converge, "views of v3 update", allViews(pools, "actor", func(v View) error {
		return checkView(v, 3, map[int64]int{3: 1, 2: 3, 1: 1}, map[string]wantNode{
			"n1": {version: 2, staleVersions: 1, minSec: 1e-9, maxSec: 30},
			"n2": {version: 2, staleVersions: 1, minSec: 1e-9, maxSec: 30},
			"n3": {version: 2, staleVersions: 1, minSec: 1e-9, maxSec: 30},
			"n4": {version: 3},
			"n5": {version: 1, staleVersions: 2, minSec: 1e-9, maxSec: 30},
		})
	}))

	// n2 (a seed) leaves: it goes from the others' views and counts.
	if err := pools[1].Close(); err != nil {
		t.Fatalf("Close(n2): %v", err)
	}
	rest := []*Pool{pools[0], pools[2], pools[3], pools[4]}
	afterLeave := map[string]wantNode{
		"n1": {version: 2, staleVersions: 1, minSec: 1e-9, maxSec: 30},
		"n2": {gone: true},
		"n3": {version: 2, staleVersions: 1, minSec: 1e-9, maxSec: 30},
		"n4": {version: 3},
		"n5": {version: 1, staleVersions: 2, minSec: 1e-9, maxSec: 30},
	}
	testutil.WaitFor(t, converge, "n2 gone", allViews(rest, "actor", func(v View) error {
		return checkView(v, 3, map[int64]int{3: 1, 2: 2, 1: 1}, afterLeave)
	}))
	for _, p := range rest {
		if got := p.Members(); got != 4 {
			t.Errorf("%s: got %d members after n2 left, want 4", p.cfg.NodeName, got)
		}
	}

	// Withdrawing a policy: n4 holds nothing again, n1 and n3 are newest.
	pools[3].SetHolding("actor", Holding{})
	testutil.WaitFor(t, converge, "views after withdraw", allViews(rest, "actor", func(v View) error {
		return checkView(v, 2, map[int64]int{2: 2, 1: 1, 0: 1}, map[string]wantNode{
			"n1": {version: 2},
			"n2": {gone: true},
			"n3": {version: 2},
			"n4": {version: 0, staleVersions: 2, minSec: 10, maxSec: 40},
			"n5": {version: 1, staleVersions: 1, minSec: 10, maxSec: 40},
		})
	}))

	// n3 crashes (no leave): failure detection takes it out of the counts.
	crash(pools[2])
	rest = []*Pool{pools[0], pools[3], pools[4]}
	testutil.WaitFor(t, 20*time.Second, "n3 declared dead", allViews(rest, "actor", func(v View) error {
		return checkView(v, 2, map[int64]int{2: 1, 1: 1, 0: 1}, map[string]wantNode{
			"n1": {version: 2},
			"n2": {gone: true},
			"n3": {gone: true},
			"n4": {version: 0, staleVersions: 2, minSec: 10, maxSec: 60},
			"n5": {version: 1, staleVersions: 1, minSec: 10, maxSec: 60},
		})
	}))
}

// crash stops p's memberlist without leaving, as a killed agent would.
func crash(p *Pool) {
	p.closeOnce.Do(func() {
		p.cancel()
		_ = p.ml.Shutdown()
		p.wg.Wait()
	})
}

// converge bounds how long the tests wait for the pools to agree. A meta
// update can be lost in memberlist's broadcast queue (see anchor in
// delegate.go); push/pull, every 15 s with Fast, repairs it. Two push/pull
// periods plus slack keeps the tests from failing on that, or on a loaded
// machine, while a pool that never converges still fails them.
const converge = 35 * time.Second

func TestPoolClustersDoNotMerge(t *testing.T) {
	rec := newRecorder(t)
	seedA, seedB := freeAddr(t), freeAddr(t)
	seeds := []string{seedA, seedB}
	a1 := startPool(t, rec, Config{NodeName: "a1", Bind: seedA, Join: seeds, Cluster: "run-A"})
	b1 := startPool(t, rec, Config{NodeName: "b1", Bind: seedB, Join: seeds, Cluster: "run-B"})
	a2 := startPool(t, rec, Config{NodeName: "a2", Bind: "127.0.0.1:0", Join: seeds, Cluster: "run-A"})
	b2 := startPool(t, rec, Config{NodeName: "b2", Bind: "127.0.0.1:0", Join: seeds, Cluster: "run-B"})
	a := []*Pool{a1, a2}
	b := []*Pool{b1, b2}
	for _, p := range a {
		p.SetHolding("actor", Holding{Version: 5})
	}
	for _, p := range b {
		p.SetHolding("actor", Holding{Version: 7})
	}
	viewOf := func(pools []*Pool, version int64, n1, n2 string) func() error {
		return allViews(pools, "actor", func(v View) error {
			return checkView(v, version, map[int64]int{version: 2}, map[string]wantNode{n1: {version: version}, n2: {version: version}})
		})
	}
	testutil.WaitFor(t, converge, "pool A formed", viewOf(a, 5, "a1", "a2"))
	testutil.WaitFor(t, converge, "pool B formed", viewOf(b, 7, "b1", "b2"))
	// The pools did contact each other (same seeds) and refused.
	testutil.WaitFor(t, converge, "label rejection", func() error {
		if len(rec.find("memberlist", "text", "unacceptable label")) == 0 {
			return fmt.Errorf("no node logged a label rejection")
		}
		return nil
	})
	// Hold for several gossip, probe and join-retry rounds: still apart.
	end := time.Now().Add(3 * time.Second)
	for time.Now().Before(end) {
		for _, check := range []func() error{viewOf(a, 5, "a1", "a2"), viewOf(b, 7, "b1", "b2")} {
			if err := check(); err != nil {
				t.Fatalf("pools of different runs merged: %v", err)
			}
		}
		for _, p := range append(append([]*Pool(nil), a...), b...) {
			if got := p.Members(); got != 2 {
				t.Fatalf("%s: got %d members, want 2", p.cfg.NodeName, got)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func longName(i int) string {
	return fmt.Sprintf("%s-policy-%02d", strings.Repeat("reinforcement-learning-actor-critic-", 5), i)
}

// metaOf returns n's meta as seen by p.
func metaOf(p *Pool, n string) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m, ok := p.mu.members[n]; ok {
		return m.meta
	}
	return nil
}

func TestPoolManyPolicies(t *testing.T) {
	rec := newRecorder(t)
	n1 := startPool(t, rec, Config{NodeName: "n1", Bind: "127.0.0.1:0", Cluster: "run-7"})
	n2 := startPool(t, rec, Config{NodeName: "n2", Bind: "127.0.0.1:0", Cluster: "run-7", Join: []string{n1.Addr()}})
	pools := []*Pool{n1, n2}
	testutil.WaitFor(t, converge, "joined", func() error {
		if n1.Members() != 2 || n2.Members() != 2 {
			return fmt.Errorf("members %d/%d, want 2/2", n1.Members(), n2.Members())
		}
		return nil
	})

	// 10 policies with 190-byte names fit the meta, whatever the names.
	for i := range 10 {
		n1.SetHolding(longName(i), Holding{Version: 1_000_000 + int64(i)})
	}
	n1.mu.Lock()
	external, size := n1.mu.external, len(n1.mu.meta)
	n1.mu.Unlock()
	if external || size > memberlist.MetaMaxSize {
		t.Fatalf("10 policies: got external %v, meta %d bytes; want inline within %d", external, size, memberlist.MetaMaxSize)
	}
	t.Logf("meta with 10 policies: %d bytes", size)
	testutil.WaitFor(t, converge, "10 policies seen by n2", func() error {
		if got := len(metaOf(n2, "n1")); got != size {
			return fmt.Errorf("n2 sees a %d-byte meta of n1, want %d", got, size)
		}
		for i := range 10 {
			v := n2.View(longName(i))
			if v.Newest != 1_000_000+int64(i) || v.ByVersion[0] != 1 {
				return fmt.Errorf("policy %d: got %+v", i, v)
			}
		}
		return nil
	})

	// 60 policies do not fit: the meta becomes a stamp and the holdings a
	// broadcast record.
	for i := range 60 {
		n1.SetHolding(longName(i), Holding{Version: int64(i + 1)})
		n2.SetHolding(longName(i), Holding{Version: int64(i + 2)})
	}
	for _, p := range pools {
		p.mu.Lock()
		external, size := p.mu.external, len(p.mu.meta)
		rec := len(p.mu.record)
		p.mu.Unlock()
		if !external || size > memberlist.MetaMaxSize || rec > p.maxBroadcast {
			t.Fatalf("%s with 60 policies: got external %v meta %d record %d; want external, meta <= %d, record <= %d",
				p.cfg.NodeName, external, size, rec, memberlist.MetaMaxSize, p.maxBroadcast)
		}
	}
	// check: n1 holds i+1 and n2 i+2+bump of policy i; others nothing.
	check := func(pools []*Pool, bump int64, others int) func() error {
		return func() error {
			for _, p := range pools {
				for _, i := range []int{0, 17, 59} {
					v := p.View(longName(i))
					want := map[int64]int{int64(i + 1): 1, int64(i+2) + bump: 1}
					if others > 0 {
						want[0] = others
					}
					if !maps.Equal(v.ByVersion, want) {
						return fmt.Errorf("%s, policy %d: got ByVersion %v, want %v", p.cfg.NodeName, i, v.ByVersion, want)
					}
				}
			}
			return nil
		}
	}
	testutil.WaitFor(t, converge, "60 policies by broadcast", check(pools, 0, 0))

	// A node joining later learns the records by the join's push/pull.
	n3 := startPool(t, rec, Config{NodeName: "n3", Bind: "127.0.0.1:0", Cluster: "run-7", Join: []string{n2.Addr()}})
	testutil.WaitFor(t, converge, "records pushed to a late joiner", check([]*Pool{n3}, 0, 1))

	// An update in external mode propagates.
	for _, i := range []int{0, 17, 59} {
		n2.SetHolding(longName(i), Holding{Version: int64(i + 2 + 100)})
	}
	testutil.WaitFor(t, converge, "external update", check([]*Pool{n1, n2, n3}, 100, 1))
}

// A record too big for a UDP broadcast still reaches a peer by push/pull.
func TestPoolRecordTooBigForBroadcast(t *testing.T) {
	rec := newRecorder(t)
	n1 := startPool(t, rec, Config{NodeName: "n1", Bind: "127.0.0.1:0", Cluster: "run-8"})
	for i := range 200 {
		n1.SetHolding(longName(i), Holding{Version: int64(i + 1)})
	}
	n1.mu.Lock()
	size := len(n1.mu.record)
	n1.mu.Unlock()
	if size <= n1.maxBroadcast {
		t.Fatalf("record of 200 policies is %d bytes, want more than %d for this test", size, n1.maxBroadcast)
	}
	if len(rec.find("gossip holdings too large for a broadcast, relying on push-pull", "", "")) != 1 {
		t.Errorf("want one warning about the record size")
	}
	n2 := startPool(t, rec, Config{NodeName: "n2", Bind: "127.0.0.1:0", Cluster: "run-8", Join: []string{n1.Addr()}})
	testutil.WaitFor(t, converge, "big record by push/pull", func() error {
		for _, i := range []int{0, 199} {
			if v := n2.View(longName(i)); v.Newest != int64(i+1) {
				return fmt.Errorf("policy %d: got Newest %d, want %d", i, v.Newest, i+1)
			}
		}
		return nil
	})
}

// dumpPool logs p's member table, for failing tests.
func dumpPool(t *testing.T, p *Pool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for name, m := range p.mu.members {
		t.Logf("%s sees %s: %+v", p.cfg.NodeName, name, *m)
	}
}

// A node's relay address reaches the other nodes' views with its
// holdings; a node without one shows none; one advertised as ":port" gets
// the host of the node's gossip address.
func TestPoolRelayAddress(t *testing.T) {
	rec := newRecorder(t)
	n1 := startPool(t, rec, Config{NodeName: "n1", Bind: "127.0.0.1:0", Cluster: "run-9", Relay: "127.0.0.1:23001"})
	n2 := startPool(t, rec, Config{NodeName: "n2", Bind: "127.0.0.1:0", Cluster: "run-9", Join: []string{n1.Addr()}})
	startPool(t, rec, Config{NodeName: "n3", Bind: "127.0.0.1:0", Cluster: "run-9", Join: []string{n1.Addr()}, Relay: ":23003"})
	n1.SetHolding("actor", Holding{Version: 4})
	testutil.WaitFor(t, converge, "n2 sees n1's relay", func() error {
		v := n2.View("actor")
		relays := map[string]string{}
		for _, n := range v.Nodes {
			relays[n.Node] = n.Relay
			if n.Node == "n1" && n.Version != 4 {
				return fmt.Errorf("n1 holds %d in n2's view, want 4", n.Version)
			}
		}
		if len(relays) != 3 || relays["n1"] != "127.0.0.1:23001" || relays["n2"] != "" || relays["n3"] != "127.0.0.1:23003" {
			return fmt.Errorf("relays %v", relays)
		}
		return nil
	})
	if v := n1.View("actor"); len(v.Nodes) == 0 || v.Nodes[0].Relay != "127.0.0.1:23001" {
		t.Errorf("n1's own view: %+v", v.Nodes)
	}
	if _, err := Start(Config{NodeName: "x", Bind: "127.0.0.1:0", Relay: strings.Repeat("a", 300)}); err == nil {
		t.Error("a 300-byte relay address was accepted")
	}
}
