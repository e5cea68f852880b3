package gossip

import (
	"bytes"
	"slices"
	"testing"
)

// The record queue keeps every node's newest record, even in the sequence
// that makes memberlist's TransmitLimitedQueue reuse an id (a named
// broadcast replacing the only queued one, then two more of equal length).
func TestRecordQueueKeepsEqualLengthRecords(t *testing.T) {
	q := newRecordQueue(func() int { return 3 }, 4)
	msg := func(node string, v byte) []byte { return []byte{msgRecord, v, node[0], node[1], 0, 0, 0, 0} }
	q.QueueBroadcast(&recordBroadcast{node: "n1", msg: msg("n1", 1)})
	q.QueueBroadcast(&recordBroadcast{node: "n1", msg: msg("n1", 2)}) // replaces: queue briefly empty
	q.QueueBroadcast(&recordBroadcast{node: "n2", msg: msg("n2", 1)})
	q.QueueBroadcast(&recordBroadcast{node: "n3", msg: msg("n3", 1)})
	got := q.GetBroadcasts(0, 1400)
	want := [][]byte{msg("n1", 2), msg("n2", 1), msg("n3", 1)}
	for _, w := range want {
		if !slices.ContainsFunc(got, func(g []byte) bool { return bytes.Equal(g, w) }) {
			t.Errorf("broadcast %v lost; got %v", w, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %d broadcasts, want %d (the anchor must never be sent)", len(got), len(want))
	}
}
