package group

import (
	"encoding/binary"
	"hash/crc32"
	"reflect"
	"testing"
	"time"
)

// seedLog is a valid log holding every record kind.
func seedLog() []byte {
	st := newStoreState()
	recs := []record{
		{kind: recCommit, group: "g", offsets: []CommittedOffset{{Topic: "t", Partition: 1, Offset: 42, LeaderEpoch: -1, Metadata: "m"}}},
		{kind: recSaveGroup, group: "g", meta: sampleMeta("g", 3)},
		{kind: recDeleteOffsets, group: "g", tps: []TopicPartition{{"t", 1}}},
		{kind: recCommit, group: "h", offsets: []CommittedOffset{{Topic: "u", Partition: 0, Offset: 7}}},
		{kind: recDeleteGroup, group: "h"},
	}
	buf := []byte(fileMagic)
	for i := range recs {
		st.apply(&recs[i])
		buf = appendFrame(buf, &recs[i])
	}
	return buf
}

// FuzzFileStoreRecovery feeds arbitrary bytes to the log recovery path:
// it must never panic, must only keep a prefix, must be idempotent (the
// kept prefix recovers to the same state with nothing dropped) and the
// recovered state must survive a snapshot rewrite unchanged.
func FuzzFileStoreRecovery(f *testing.F) {
	valid := seedLog()
	f.Add(valid)
	f.Add(valid[len(fileMagic):])
	f.Add(valid[:len(valid)-3])
	f.Add([]byte(fileMagic))
	f.Add([]byte{})
	f.Add([]byte(fileMagic + "\xff\xff\xff\xff\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		// Random bytes rarely get past the CRC, so also frame the input
		// as one checksummed payload: that drives decodeRecord itself.
		framed := []byte(fileMagic)
		framed = binary.LittleEndian.AppendUint32(framed, uint32(len(data)))
		framed = binary.LittleEndian.AppendUint32(framed, crc32.Checksum(data, crcTable))
		framed = append(framed, data...)
		for _, input := range [][]byte{data, append([]byte(fileMagic), data...), framed} {
			res, err := scanLog(input)
			if err != nil {
				if res.valid != 0 {
					t.Fatalf("error with valid prefix %d", res.valid)
				}
				continue
			}
			if res.valid < 0 || res.valid > len(input) {
				t.Fatalf("valid prefix %d of %d bytes", res.valid, len(input))
			}
			if res.needMagic {
				continue
			}
			again, err := scanLog(input[:res.valid])
			if err != nil || again.valid != res.valid || again.tailErr != nil {
				t.Fatalf("rescan of the valid prefix: valid %d/%d err %v tail %v", again.valid, res.valid, err, again.tailErr)
			}
			want := res.state.snapshot()
			// Whatever a store holds, the coordinator must be able to
			// restore it.
			for _, gs := range want.Groups {
				g := (&Coordinator{}).restoreGroup(gs, time.Unix(0, 0))
				if len(g.members) > 0 && (g.state != stateStable || g.members[g.leader] == nil) {
					t.Fatalf("restored group with members in state %v, leader %q", g.state, g.leader)
				}
				g.metaLocked()
				g.selectProtocolLocked()
			}
			if got := again.state.snapshot(); !reflect.DeepEqual(got, want) {
				t.Fatalf("rescan state differs:\n%+v\n%+v", got, want)
			}
			// Rewriting the state as a snapshot log and recovering it
			// must give the same state back.
			buf := []byte(fileMagic)
			recs := res.state.records()
			for i := range recs {
				buf = appendFrame(buf, &recs[i])
			}
			rewritten, err := scanLog(buf)
			if err != nil || rewritten.valid != len(buf) {
				t.Fatalf("snapshot log: valid %d/%d err %v tail %v", rewritten.valid, len(buf), err, rewritten.tailErr)
			}
			if got := rewritten.state.snapshot(); !reflect.DeepEqual(got, want) {
				t.Fatalf("snapshot round trip differs:\n%+v\n%+v", got, want)
			}
		}
	})
}

// TestDecodeRecordGarbage checks decodeRecord on every prefix of valid
// payloads: all must fail cleanly except the full payload.
func TestDecodeRecordGarbage(t *testing.T) {
	recs := []record{
		{kind: recCommit, group: "g", offsets: []CommittedOffset{{Topic: "t", Partition: 1, Offset: 42, LeaderEpoch: -1, Metadata: "m"}}},
		{kind: recSaveGroup, group: "g", meta: sampleMeta("g", 3)},
		{kind: recDeleteOffsets, group: "g", tps: []TopicPartition{{"t", 1}}},
		{kind: recDeleteGroup, group: "h"},
	}
	for _, r := range recs {
		p := appendRecord(nil, &r)
		for i := range len(p) {
			if _, err := decodeRecord(p[:i]); err == nil {
				t.Fatalf("kind %d: prefix %d/%d decoded", r.kind, i, len(p))
			}
		}
		got, err := decodeRecord(p)
		if err != nil {
			t.Fatalf("kind %d: %v", r.kind, err)
		}
		if r.kind == recSaveGroup {
			r.meta.Group = r.group
		}
		if !reflect.DeepEqual(got, r) {
			t.Fatalf("kind %d round trip:\n%+v\n%+v", r.kind, got, r)
		}
		if _, err := decodeRecord(append(p, 0)); err == nil {
			t.Fatalf("kind %d: trailing byte accepted", r.kind)
		}
	}
	if _, err := decodeRecord([]byte{99, 0}); err == nil {
		t.Fatal("unknown kind accepted")
	}
}
