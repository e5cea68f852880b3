package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simtel/simtel/agent/gossip"
	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/learner"
)

func testRelay(self string, key []byte) *relay {
	cfg := &Config{Policies: []string{"actor"}, PolicyRelaySeeds: 2, PolicyRelayWait: time.Second}
	cfg.Tags.Host = self
	return newRelay(cfg, key, slog.New(slog.DiscardHandler))
}

func TestRelayAuth(t *testing.T) {
	r := testRelay("n1", []byte("pool-key-0123456789"))
	path := "/v1/relay/actor/3/0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name, path, auth string
		want             bool
	}{
		{"signed", path, r.sign(path), true},
		{"signed for another path", path, r.sign("/v1/relay/actor/4/0123456789abcdef0123456789abcdef"), false},
		{"signed with another key", path, testRelay("n2", []byte("other-key-0123456789")).sign(path), false},
		{"no scheme", path, r.sign(path)[len(relayAuthScheme):], false},
		{"not hex", path, relayAuthScheme + "zz", false},
		{"none", path, "", false},
	} {
		req := httptest.NewRequest("GET", tc.path, nil)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		if got := r.authorized(req); got != tc.want {
			t.Errorf("%s: authorized %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Every node computes the same order of the pool for a version: the ranks
// are a permutation, and the seeds change from version to version.
func TestRelayRanks(t *testing.T) {
	var view gossip.View
	for i := range 32 {
		view.Nodes = append(view.Nodes, gossip.NodeHolding{Node: fmt.Sprintf("node%03d", i), Relay: "h:1", Alive: true})
	}
	view.Nodes = append(view.Nodes, gossip.NodeHolding{Node: "old", Alive: true}, gossip.NodeHolding{Node: "gone", Relay: "h:1"})
	firstSeeds := map[string]bool{}
	for v := int64(1); v <= 20; v++ {
		seen := map[int]string{}
		for _, nh := range view.Nodes[:32] {
			rank, n := testRelay(nh.Node, nil).rank(view, v)
			if n != 32 {
				t.Fatalf("version %d: %s counts %d nodes, want 32 (no relay or not alive: not counted)", v, nh.Node, n)
			}
			if other, dup := seen[rank]; dup {
				t.Fatalf("version %d: %s and %s both rank %d", v, nh.Node, other, rank)
			}
			seen[rank] = nh.Node
		}
		firstSeeds[seen[0]] = true
	}
	if len(firstSeeds) < 5 {
		t.Errorf("the first seed of 20 versions is one of %d nodes, want them spread", len(firstSeeds))
	}
	// A node missing from the view (its join not seen yet) still ranks
	// itself.
	if rank, n := testRelay("new", nil).rank(view, 1); n != 33 || rank < 0 || rank > 32 {
		t.Errorf("node outside the view: rank %d of %d", rank, n)
	}
}

// The windows of sources share a version's copies evenly: with every node
// taking its chunks evenly from its sources, no node serves more than 1.5
// copies, whatever the pool's size and the seeds, and every node that
// fetches from peers has a source.
func TestRelaySourceWindows(t *testing.T) {
	for _, n := range []int{3, 12, 32, 1000} {
		for _, seeds := range []int{1, 2, 3} {
			served := make([]float64, n)
			for k := seeds; k < n; k++ {
				lo := sourcesFrom(k, seeds)
				if lo >= k {
					t.Fatalf("%d nodes, %d seeds: rank %d has no source", n, seeds, k)
				}
				for j := lo; j < k; j++ {
					served[j] += 1 / float64(k-lo)
				}
			}
			if most := slices.Max(served); most > 1.5 {
				t.Errorf("%d nodes, %d seeds: a node serves %.2f copies, want at most 1.5", n, seeds, most)
			}
		}
	}
}

// TestRelaySpreadScore: the chunks one node asks of its sources, taken
// by the highest spreadScore, spread evenly over them, and two nodes
// with the same sources prefer different ones for most chunks.
func TestRelaySpreadScore(t *testing.T) {
	const chunks = 600
	for _, sources := range [][]string{{"n1", "n2"}, {"n1", "n2", "n3"}, {"n2", "n3", "n4", "n5", "n6"}} {
		picks := map[string][2]int{}
		same := 0
		for c := range chunks {
			hash := fmt.Sprintf("chunk-%d", c)
			var first [2]string
			for i, self := range []string{"n7", "n8"} {
				best, bestScore := "", uint64(0)
				for _, s := range sources {
					if score := spreadScore(hash, self, s); best == "" || score > bestScore {
						best, bestScore = s, score
					}
				}
				first[i] = best
				n := picks[best]
				n[i]++
				picks[best] = n
			}
			if first[0] == first[1] {
				same++
			}
		}
		fair := chunks / len(sources)
		for _, s := range sources {
			for i, n := range picks[s] {
				if n < fair*3/4 || n > fair*5/4 {
					t.Errorf("sources %v: node %d asked %s for %d of %d chunks, want about %d", sources, i, s, n, chunks, fair)
				}
			}
		}
		if want := chunks / len(sources); same > want*5/4 {
			t.Errorf("sources %v: two nodes chose the same source for %d of %d chunks, want about %d", sources, same, chunks, want)
		}
	}
}

// A request for a chunk of the version being assembled waits for it, and
// gives up when the node moves to another version.
func TestRelayAwaitPartial(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := testRelay("n1", nil)
		m := learner.Manifest{Policy: "actor", Version: 5, ChunkList: []learner.ChunkRef{{Size: 10, Hash: "a"}, {Size: 20, Hash: "b"}}}
		r.onChunk(m, 0, "/tmp/x", 0)
		if at, ok := r.awaitPartial(context.Background(), "actor", 5, "a"); !ok || at.Size != 10 {
			t.Fatalf("chunk held: %+v, %v", at, ok)
		}
		go func() {
			time.Sleep(time.Second)
			r.onChunk(m, 1, "/tmp/x", 10)
		}()
		if at, ok := r.awaitPartial(context.Background(), "actor", 5, "b"); !ok || at.Pos != 10 || at.Size != 20 {
			t.Fatalf("chunk written while waiting: %+v, %v", at, ok)
		}
		start := time.Now()
		if _, ok := r.awaitPartial(context.Background(), "actor", 5, "c"); ok || time.Since(start) != relayPartialWait {
			t.Fatalf("chunk never written: ok %v after %v, want false after %v", ok, time.Since(start), relayPartialWait)
		}
		if _, ok := r.awaitPartial(context.Background(), "actor", 4, "a"); ok {
			t.Fatal("chunk of another version served")
		}
		go func() {
			time.Sleep(time.Second)
			r.onChunk(learner.Manifest{Policy: "actor", Version: 6, ChunkList: m.ChunkList}, 0, "/tmp/y", 0)
		}()
		start = time.Now()
		if _, ok := r.awaitPartial(context.Background(), "actor", 5, "c"); ok || time.Since(start) != time.Second {
			t.Fatalf("waiting for version 5 when 6 started: ok %v after %v, want false after 1s", ok, time.Since(start))
		}
	})
}

// A node whose peers answer "not yet" to every request (nodes ahead of it
// that advertise the version and never get its chunks) stops asking them
// once past its deadline with no chunk arriving, and leaves the chunks to
// the brokers: a round of requests used to run through every chunk, each
// waiting on the peer, whatever the deadline.
func TestRelayStalledPeersFallBack(t *testing.T) {
	const version, chunks = 5, 160
	var asked atomic.Int64
	peerSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		asked.Add(1)
		time.Sleep(100 * time.Millisecond) // as a partial holder waits for a chunk
		http.NotFound(w, req)
	}))
	defer peerSrv.Close()

	// The peer must come before this node in the version's order to be
	// asked while it is still fetching.
	self := "n1"
	peerName := ""
	for i := 0; peerName == ""; i++ {
		if n := fmt.Sprintf("p%d", i); orderKey(n, version) < orderKey(self, version) {
			peerName = n
		}
	}
	mine, err := gossip.Start(gossip.Config{NodeName: self, Bind: "127.0.0.1:0", Cluster: "stall", Relay: "127.0.0.1:1", Fast: true})
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Close()
	theirs, err := gossip.Start(gossip.Config{NodeName: peerName, Bind: "127.0.0.1:0", Join: []string{mine.Addr()}, Cluster: "stall",
		Relay: strings.TrimPrefix(peerSrv.URL, "http://"), Fast: true})
	if err != nil {
		t.Fatal(err)
	}
	defer theirs.Close()
	theirs.SetHolding(fetchingName("actor"), gossip.Holding{Version: version})

	r := testRelay(self, []byte("pool-key-0123456789"))
	r.pool, r.seeds, r.wait, r.stall = mine, 0, 100*time.Millisecond, 200*time.Millisecond
	testutil.WaitFor(t, 30*time.Second, "the peer's fetching version in the view", func() error {
		if len(r.holders("actor", version)) != 1 {
			return fmt.Errorf("holders %+v", r.holders("actor", version))
		}
		return nil
	})
	m := learner.Manifest{Policy: "actor", Version: version}
	want := make([]int, chunks)
	for i := range want {
		want[i] = i
		m.ChunkList = append(m.ChunkList, learner.ChunkRef{Size: 1, Hash: fmt.Sprintf("%032x", i)})
	}
	err = r.FetchChunks(context.Background(), m, want, func(int, []byte) error {
		t.Error("put called for a chunk no peer has")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Past the deadline (wait × (1 + rank/n), under 0.2 s) and the stall
	// (0.2 s) no chunk is asked for again: a few waves of relayPerNode
	// requests of 0.1 s each, not one per chunk.
	if n := asked.Load(); n >= chunks/2 {
		t.Errorf("the peer was asked %d times for %d chunks it never had, want the node to give up on it well before asking for each", n, chunks)
	}
	t.Logf("asked %d times for %d chunks", asked.Load(), chunks)
}
