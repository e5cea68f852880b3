package group

import (
	"log/slog"
	"reflect"
	"testing"
	"time"
)

// seedRecords are valid log records of every kind.
func seedRecords() []kv {
	o := CommittedOffset{Topic: "t", Partition: 1, Offset: 42, LeaderEpoch: -1, Metadata: "m", CommitTimeMillis: 7}
	meta := sampleMeta("g", 3)
	return []kv{
		{key: encodeOffsetKey("g", TopicPartition{"t", 1}), value: encodeOffsetValue(&o)},
		{key: encodeOffsetKey("g", TopicPartition{"t", 1})},
		{key: encodeGroupKey("g"), value: encodeGroupValue(&meta, 5)},
		{key: encodeGroupKey("g"), value: encodeGroupValue(&GroupMeta{Group: "g"}, 5)},
		{key: encodeGroupKey("g")},
	}
}

// reencode encodes a decoded record back into a log record.
func reencode(r *record) kv {
	switch r.kind {
	case recCommit:
		o := r.offsets[0]
		return kv{key: encodeOffsetKey(r.group, TopicPartition{o.Topic, o.Partition}), value: encodeOffsetValue(&o)}
	case recDeleteOffsets:
		return kv{key: encodeOffsetKey(r.group, r.tps[0])}
	case recSaveGroup:
		return kv{key: encodeGroupKey(r.group), value: encodeGroupValue(&r.meta, 0)}
	default:
		return kv{key: encodeGroupKey(r.group)}
	}
}

// FuzzLogStoreDecode feeds arbitrary keys and values to the record
// decoder, alone and inside a CRC-valid batch through the replay path: it
// must never panic; a record that decodes must re-encode to one that
// decodes to the same thing; and whatever state the records build, the
// coordinator must be able to restore it.
func FuzzLogStoreDecode(f *testing.F) {
	for _, r := range seedRecords() {
		f.Add(r.key, r.value, r.value == nil)
	}
	f.Add([]byte{0, 1}, []byte{0, 3}, false)
	f.Add([]byte{0, 2, 0xff, 0xff}, []byte{0, 4, 0, 0, 0, 0, 0, 0xff, 0xff}, false)
	f.Add([]byte{}, []byte{}, true)
	f.Fuzz(func(t *testing.T, key, value []byte, tombstone bool) {
		if tombstone {
			value = nil
		}
		r, err := decodeLogRecord(key, value)
		if err == nil {
			again, err := decodeLogRecord(reencode(&r).key, reencode(&r).value)
			if err != nil {
				t.Fatalf("re-encoded record does not decode: %v (%+v)", err, r)
			}
			if !reflect.DeepEqual(again, r) {
				t.Fatalf("round trip differs:\n%+v\n%+v", again, r)
			}
		}

		// The same record, and the raw bytes, through the replay.
		rp := replayer{logger: slog.New(slog.DiscardHandler), state: newStoreState(), keys: keyIndex{}}
		rp.batches(appendBatch(nil, append(seedRecords(), kv{key: key, value: value}), 1))
		rp.batches(key)
		rp.batches(value)
		if rp.stats.records < len(seedRecords()) {
			t.Fatalf("replay applied %d records, want at least %d", rp.stats.records, len(seedRecords()))
		}
		for _, gs := range rp.state.snapshot().Groups {
			g := (&Coordinator{}).restoreGroup(gs, time.Unix(0, 0))
			if len(g.members) > 0 && (g.state != stateStable || g.members[g.leader] == nil) {
				t.Fatalf("restored group with members in state %v, leader %q", g.state, g.leader)
			}
			g.metaLocked()
			g.selectProtocolLocked()
		}
	})
}

// TestDecodeLogRecordGarbage checks the decoder on every prefix of valid
// keys and values: all must fail cleanly except the full record, and a
// trailing byte must be refused.
func TestDecodeLogRecordGarbage(t *testing.T) {
	for i, r := range seedRecords() {
		want, err := decodeLogRecord(r.key, r.value)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		for n := range len(r.key) {
			if _, err := decodeLogRecord(r.key[:n], r.value); err == nil {
				t.Fatalf("record %d: key prefix %d/%d decoded", i, n, len(r.key))
			}
		}
		if _, err := decodeLogRecord(append(r.key, 0), r.value); err == nil {
			t.Fatalf("record %d: key with a trailing byte decoded", i)
		}
		if r.value == nil {
			continue
		}
		for n := range len(r.value) {
			if _, err := decodeLogRecord(r.key, r.value[:n]); err == nil {
				t.Fatalf("record %d: value prefix %d/%d decoded", i, n, len(r.value))
			}
		}
		if _, err := decodeLogRecord(r.key, append(r.value, 0)); err == nil {
			t.Fatalf("record %d: value with a trailing byte decoded", i)
		}
		if got := reencode(&want); !reflect.DeepEqual(mustDecode(t, got), want) {
			t.Fatalf("record %d: round trip differs", i)
		}
	}
	// The sample metadata round trips exactly, including the member
	// supporting two protocols (carried in the simtel tag).
	meta := sampleMeta("g", 3)
	got := mustDecode(t, kv{key: encodeGroupKey("g"), value: encodeGroupValue(&meta, 1)})
	if !reflect.DeepEqual(got.meta, meta) {
		t.Fatalf("group metadata round trip:\n%+v\n%+v", got.meta, meta)
	}
}

func mustDecode(t *testing.T, r kv) record {
	t.Helper()
	got, err := decodeLogRecord(r.key, r.value)
	if err != nil {
		t.Fatal(err)
	}
	return got
}
