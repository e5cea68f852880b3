package broker

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/simtel/simtel/broker/cluster"
)

// testMetadata is a cluster of brokers 0..n-1 (alive unless in down) with
// one topic whose partitions have the given replica sets.
func testMetadata(n int, down []int32, sets ...[]int32) *cluster.Metadata {
	md := &cluster.Metadata{Brokers: map[int32]cluster.BrokerInfo{}, Topics: map[string]*cluster.TopicInfo{}}
	for i := range int32(n) {
		md.Brokers[i] = cluster.BrokerInfo{ID: i, Alive: !slices.Contains(down, i)}
	}
	t := &cluster.TopicInfo{Name: "t"}
	for _, s := range sets {
		t.Partitions = append(t.Partitions, cluster.Assignment{Replicas: s, Leader: s[0]})
	}
	md.Topics["t"] = t
	return md
}

// apply plays planned moves into the metadata as finished.
func applyMoves(md *cluster.Metadata, moves []move) {
	for _, m := range moves {
		m.topic.Partitions[m.part].Replicas = m.target
	}
}

func counts(md *cluster.Metadata) (holds, leads map[int32]int) {
	holds, leads = map[int32]int{}, map[int32]int{}
	for _, t := range md.Topics {
		for _, a := range t.Partitions {
			for j, r := range a.Replicas {
				holds[r]++
				if j == 0 {
					leads[r]++
				}
			}
		}
	}
	return holds, leads
}

func TestPlanMovesJoin(t *testing.T) {
	// 8 partitions RF 3 on brokers 0-2; broker 3 joins.
	var sets [][]int32
	for p := range 8 {
		sets = append(sets, []int32{int32(p % 3), int32((p + 1) % 3), int32((p + 2) % 3)})
	}
	md := testMetadata(4, nil, sets...)
	never := func(int32) time.Duration { return 0 }
	for round := 0; ; round++ {
		moves := planMoves(md, never, 10*time.Minute, true)
		if len(moves) == 0 {
			break
		}
		if len(moves) > maxMoves {
			t.Fatalf("round %d: %d moves at once, want at most %d", round, len(moves), maxMoves)
		}
		for _, m := range moves {
			if len(m.target) != 3 {
				t.Fatalf("move %v changes the replication factor", m)
			}
		}
		applyMoves(md, moves)
		if round > 20 {
			t.Fatal("planning does not converge")
		}
	}
	holds, leads := counts(md)
	want := map[int32]int{0: 6, 1: 6, 2: 6, 3: 6}
	if fmt.Sprint(holds) != fmt.Sprint(want) {
		t.Errorf("replicas per broker %v, want %v", holds, want)
	}
	if fmt.Sprint(leads) != fmt.Sprint(map[int32]int{0: 2, 1: 2, 2: 2, 3: 2}) {
		t.Errorf("preferred leaders per broker %v, want 2 each", leads)
	}
	// Without auto-rebalance nothing moves.
	md = testMetadata(4, nil, sets...)
	if moves := planMoves(md, never, 10*time.Minute, false); len(moves) != 0 {
		t.Errorf("auto-rebalance off planned %v", moves)
	}
}

func TestPlanMovesReplace(t *testing.T) {
	sets := [][]int32{{0, 1, 2}, {1, 2, 3}, {2, 3, 0}, {3, 0, 1}}
	md := testMetadata(4, []int32{3}, sets...)
	gone := func(d time.Duration) func(int32) time.Duration {
		return func(id int32) time.Duration {
			if id == 3 {
				return d
			}
			return 0
		}
	}
	// Gone for less than replace-after: nothing moves, and no rebalance
	// while a down broker still holds replicas.
	if moves := planMoves(md, gone(time.Minute), 10*time.Minute, true); len(moves) != 0 {
		t.Fatalf("planned %v before replace-after passed", moves)
	}
	moves := planMoves(md, gone(11*time.Minute), 10*time.Minute, true)
	if len(moves) != maxMoves {
		t.Fatalf("planned %d moves, want %d (the limit): %v", len(moves), maxMoves, moves)
	}
	for _, m := range moves {
		if slices.Contains(m.target, 3) || len(m.target) != 3 {
			t.Errorf("move %v keeps the gone broker or changes the replication factor", m)
		}
		// Only the gone replica changes place.
		old := m.topic.Partitions[m.part].Replicas
		for j := range old {
			if old[j] != 3 && old[j] != m.target[j] {
				t.Errorf("move %v also moves replica %d", m, old[j])
			}
		}
	}
	// A partition already moving counts against the limit.
	md.Topics["t"].Partitions[0].Target = []int32{0, 1, 2}
	if moves := planMoves(md, gone(11*time.Minute), 10*time.Minute, true); len(moves) != maxMoves-1 {
		t.Errorf("with one move in progress planned %d, want %d", len(moves), maxMoves-1)
	}
	// Moves in progress to the gone broker get a new target, though no
	// new move may start.
	md = testMetadata(4, []int32{3}, []int32{0, 1, 2}, []int32{0, 1, 2}, []int32{0, 1, 2}, []int32{0, 1, 2})
	for i := range maxMoves {
		md.Topics["t"].Partitions[i].Target = []int32{0, 1, 3}
	}
	moves = planMoves(md, gone(11*time.Minute), 10*time.Minute, true)
	if len(moves) != maxMoves {
		t.Fatalf("planned %v, want %d new targets", moves, maxMoves)
	}
	for _, m := range moves {
		if !m.override || !slices.Equal(m.target, []int32{0, 1, 2}) {
			t.Errorf("move %v (override %v): want the target {0 1 2} (back to the old replica) replacing the one in progress", m, m.override)
		}
	}
}
