package gossip

import (
	"bytes"
	"log/slog"
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

// bare returns a Pool with what the delegate needs and no memberlist.
func bare(name string) *Pool {
	p := &Pool{cfg: Config{NodeName: name}, log: slog.New(slog.DiscardHandler), maxBroadcast: 1300}
	p.queue = newRecordQueue(func() int { return 5 }, 4)
	p.mu.holdings = make(map[string]Holding)
	p.mu.names = make(map[uint64]string)
	p.mu.records = make(map[string]*storedRecord)
	p.mu.members = make(map[string]*member)
	return p
}

func TestNotifyMsg(t *testing.T) {
	p := bare("me")
	d := &delegate{p: p}
	rec := func(node string, seq uint64, v int64) record {
		return record{node: node, stamp: stamp{boot: 1, seq: seq}, entries: []entry{{key: policyKey("a"), version: v, sinceMs: 1}}}
	}
	direct := encodeRecord(rec("n2", 1, 1))
	direct[0] = msgDirect
	for _, step := range []struct {
		name      string
		msg       []byte
		wantSeq   uint64 // of n2's stored record
		wantQueue int    // broadcasts queued besides the anchor
	}{
		{"direct is stored, not passed on", direct, 1, 0},
		{"newer gossip is stored and passed on", encodeRecord(rec("n2", 2, 2)), 2, 1},
		{"same again is dropped", encodeRecord(rec("n2", 2, 2)), 2, 1},
		{"older is dropped", encodeRecord(rec("n2", 1, 9)), 2, 1},
		{"about this node is ignored", encodeRecord(rec("me", 5, 5)), 2, 1},
		{"garbage is ignored", []byte{msgRecord, 9, 9}, 2, 1},
	} {
		d.NotifyMsg(step.msg)
		p.mu.Lock()
		r := p.mu.records["n2"]
		_, aboutMe := p.mu.records["me"]
		p.mu.Unlock()
		if r == nil || r.rec.stamp.seq != step.wantSeq || aboutMe {
			t.Fatalf("%s: got record %+v (about me: %v), want seq %d", step.name, r, aboutMe, step.wantSeq)
		}
		if r.raw[0] != msgRecord {
			t.Fatalf("%s: stored raw starts with %q, want %q", step.name, r.raw[0], msgRecord)
		}
		if got := p.queue.NumQueued() - 1; got != step.wantQueue {
			t.Fatalf("%s: got %d queued, want %d", step.name, got, step.wantQueue)
		}
	}
}

// LocalState carries only what metas cannot: records of nodes whose meta
// is a stamp, records newer than their node's meta, and this node's own
// record when its meta is a stamp.
func TestLocalStateCarriesWhatMetaCannot(t *testing.T) {
	src := bare("me")
	st := func(seq uint64) stamp { return stamp{boot: 1, seq: seq} }
	es := []entry{{key: policyKey("a"), version: 3, sinceMs: 1}}
	src.mu.members["ext"] = &member{alive: true, meta: encodeExternalMeta(st(4))}
	src.mu.members["ahead"] = &member{alive: true, meta: encodeInlineMeta(st(1), nil)}
	src.mu.members["behind"] = &member{alive: true, meta: encodeInlineMeta(st(9), es)}
	for _, r := range []record{{node: "ext", stamp: st(4)}, {node: "ahead", stamp: st(2)}, {node: "behind", stamp: st(3)}, {node: "gone", stamp: st(1)}} {
		r.entries = es
		src.storeRecord(r, encodeRecord(r), false)
	}
	src.mu.external = true
	src.mu.record = encodeRecord(record{node: "me", stamp: st(7), entries: es})

	dst := bare("other")
	(&delegate{p: dst}).MergeRemoteState((&delegate{p: src}).LocalState(false), false)
	var got []string
	for name := range dst.mu.records {
		got = append(got, name)
	}
	slices.Sort(got)
	if want := []string{"ahead", "ext", "me"}; !slices.Equal(got, want) {
		t.Fatalf("records pushed: got %v, want %v", got, want)
	}
}

func TestEntriesChoosesNewest(t *testing.T) {
	p := bare("me")
	es := func(v int64) []entry { return []entry{{key: 1, version: v, sinceMs: 1}} }
	p.mu.records["n"] = &storedRecord{rec: record{node: "n", stamp: stamp{boot: 5, seq: 3}, entries: es(3)}}
	for _, tc := range []struct {
		name string
		meta []byte
		want int64 // version; 0 = no entries
	}{
		{"record newer than inline meta", encodeInlineMeta(stamp{5, 2}, es(2)), 3},
		{"inline meta newer than record", encodeInlineMeta(stamp{5, 4}, es(4)), 4},
		{"external meta, record lags", encodeExternalMeta(stamp{5, 4}), 3},
		{"external meta of a new boot, old record", encodeExternalMeta(stamp{6, 1}), 0},
		{"record of a new boot before its meta", encodeInlineMeta(stamp{4, 9}, es(9)), 3},
		{"corrupt meta", []byte{7}, 0},
	} {
		p.mu.Lock()
		got, _ := p.entriesLocked("n", tc.meta)
		p.mu.Unlock()
		var v int64
		if len(got) > 0 {
			v = got[0].version
		}
		if v != tc.want {
			t.Errorf("%s: got version %d, want %d", tc.name, v, tc.want)
		}
	}
}
