package gossip

import (
	"maps"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	now := time.Unix(1_700_000_100, 0)
	at := func(sec int64) time.Time { return time.Unix(1_700_000_000+sec, 0) }
	type want struct {
		staleVersions int64
		staleSeconds  float64
	}
	for _, tc := range []struct {
		name      string
		nodes     []NodeHolding
		newest    int64
		byVersion map[int64]int
		want      map[string]want
	}{
		{
			name: "staleness counts from the first node to get newest",
			nodes: []NodeHolding{
				{Node: "c", Alive: true, Version: 3, Since: at(70)},
				{Node: "a", Alive: true, Version: 3, Since: at(40)}, // first holder of 3: 60s ago
				{Node: "b", Alive: true, Version: 1, Since: at(10)},
				{Node: "d", Alive: true, Version: 2, Since: at(50)},
				{Node: "e", Alive: true}, // holds nothing
			},
			newest:    3,
			byVersion: map[int64]int{3: 2, 2: 1, 1: 1, 0: 1},
			want: map[string]want{
				"a": {0, 0}, "c": {0, 0},
				"b": {2, 60}, "d": {1, 60}, "e": {3, 60},
			},
		},
		{
			name:      "all up to date",
			nodes:     []NodeHolding{{Node: "a", Alive: true, Version: 4, Since: at(1)}, {Node: "b", Alive: true, Version: 4, Since: at(2)}},
			newest:    4,
			byVersion: map[int64]int{4: 2},
			want:      map[string]want{"a": {0, 0}, "b": {0, 0}},
		},
		{
			name:      "nobody holds it",
			nodes:     []NodeHolding{{Node: "a", Alive: true}, {Node: "b", Alive: true}},
			newest:    0,
			byVersion: map[int64]int{0: 2},
			want:      map[string]want{"a": {0, 0}, "b": {0, 0}},
		},
		{
			name: "newest from a clock ahead of ours is not negative",
			nodes: []NodeHolding{
				{Node: "a", Alive: true, Version: 2, Since: now.Add(5 * time.Second)},
				{Node: "b", Alive: true, Version: 1, Since: at(0)},
			},
			newest:    2,
			byVersion: map[int64]int{2: 1, 1: 1},
			want:      map[string]want{"a": {0, 0}, "b": {1, 0}},
		},
		{
			name: "unknown Since of newest falls back to a known one",
			nodes: []NodeHolding{
				{Node: "a", Alive: true, Version: 2},
				{Node: "b", Alive: true, Version: 2, Since: at(90)},
				{Node: "c", Alive: true, Version: 1, Since: at(0)},
			},
			newest:    2,
			byVersion: map[int64]int{2: 2, 1: 1},
			want:      map[string]want{"a": {0, 0}, "b": {0, 0}, "c": {1, 10}},
		},
		{
			name: "failed nodes are listed but not counted",
			nodes: []NodeHolding{
				{Node: "a", Alive: true, Version: 2, Since: at(40)},
				{Node: "b", Alive: false, Version: 3, Since: at(0)}, // would be newest
				{Node: "c", Alive: false, Version: 1, Since: at(0)},
				{Node: "d", Alive: true, Version: 1, Since: at(0)},
			},
			newest:    2,
			byVersion: map[int64]int{2: 1, 1: 1},
			want:      map[string]want{"a": {0, 0}, "b": {0, 0}, "c": {0, 0}, "d": {1, 60}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := summarize("p", now, tc.nodes)
			if v.Newest != tc.newest || !maps.Equal(v.ByVersion, tc.byVersion) {
				t.Fatalf("got Newest %d ByVersion %v, want %d %v", v.Newest, v.ByVersion, tc.newest, tc.byVersion)
			}
			if len(v.Nodes) != len(tc.nodes) {
				t.Fatalf("got %d nodes, want %d", len(v.Nodes), len(tc.nodes))
			}
			var maxV int64
			var maxS float64
			for i, n := range v.Nodes {
				if i > 0 && v.Nodes[i-1].Node >= n.Node {
					t.Fatalf("nodes not sorted: %+v", v.Nodes)
				}
				w := tc.want[n.Node]
				if n.StaleVersions != w.staleVersions || n.StaleSeconds != w.staleSeconds {
					t.Errorf("node %s: got stale %d/%vs, want %d/%vs", n.Node, n.StaleVersions, n.StaleSeconds, w.staleVersions, w.staleSeconds)
				}
				maxV, maxS = max(maxV, w.staleVersions), max(maxS, w.staleSeconds)
			}
			if v.MaxStaleVersions != maxV || v.MaxStaleSeconds != maxS {
				t.Errorf("got MaxStale %d/%v, want %d/%v", v.MaxStaleVersions, v.MaxStaleSeconds, maxV, maxS)
			}
		})
	}
}
