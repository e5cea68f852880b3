package group

import (
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/simtel/simtel/broker/storage"
)

// seedRecords are valid log records of every kind.
func seedRecords() []kv {
	o := CommittedOffset{Topic: "t", Partition: 1, Offset: 42, LeaderEpoch: -1, Metadata: "m", CommitTimeMillis: 7}
	meta := sampleMeta("g", 3)
	return []kv{
		{Key: encodeOffsetKey("g", TopicPartition{"t", 1}), Value: encodeOffsetValue(&o)},
		{Key: encodeOffsetKey("g", TopicPartition{"t", 1})},
		{Key: encodeGroupKey("g"), Value: encodeGroupValue(&meta, 5)},
		{Key: encodeGroupKey("g"), Value: encodeGroupValue(&GroupMeta{Group: "g"}, 5)},
		{Key: encodeGroupKey("g")},
	}
}

// reencode encodes a decoded record back into a log record.
func reencode(r *record) kv {
	switch r.kind {
	case recCommit:
		o := r.offsets[0]
		return kv{Key: encodeOffsetKey(r.group, TopicPartition{o.Topic, o.Partition}), Value: encodeOffsetValue(&o)}
	case recDeleteOffsets:
		return kv{Key: encodeOffsetKey(r.group, r.tps[0])}
	case recSaveGroup:
		return kv{Key: encodeGroupKey(r.group), Value: encodeGroupValue(&r.meta, 0)}
	default:
		return kv{Key: encodeGroupKey(r.group)}
	}
}

// FuzzLogStoreDecode feeds arbitrary keys and values to the record
// decoder, alone and inside a CRC-valid batch through the replay path: it
// must never panic; a record that decodes must re-encode to one that
// decodes to the same thing; and whatever state the records build, the
// coordinator must be able to restore it.
func FuzzLogStoreDecode(f *testing.F) {
	for _, r := range seedRecords() {
		f.Add(r.Key, r.Value, r.Value == nil)
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
			again, err := decodeLogRecord(reencode(&r).Key, reencode(&r).Value)
			if err != nil {
				t.Fatalf("re-encoded record does not decode: %v (%+v)", err, r)
			}
			if !reflect.DeepEqual(again, r) {
				t.Fatalf("round trip differs:\n%+v\n%+v", again, r)
			}
		}

		// The same record, and the raw bytes, through the replay.
		rp := replayer{logger: slog.New(slog.DiscardHandler), state: newStoreState(), keys: keyIndex{}}
		rp.batches(storage.AppendBatch(nil, append(seedRecords(), kv{Key: key, Value: value}), 1))
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
		want, err := decodeLogRecord(r.Key, r.Value)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		for n := range len(r.Key) {
			if _, err := decodeLogRecord(r.Key[:n], r.Value); err == nil {
				t.Fatalf("record %d: key prefix %d/%d decoded", i, n, len(r.Key))
			}
		}
		if _, err := decodeLogRecord(append(r.Key, 0), r.Value); err == nil {
			t.Fatalf("record %d: key with a trailing byte decoded", i)
		}
		if r.Value == nil {
			continue
		}
		for n := range len(r.Value) {
			if _, err := decodeLogRecord(r.Key, r.Value[:n]); err == nil {
				t.Fatalf("record %d: value prefix %d/%d decoded", i, n, len(r.Value))
			}
		}
		if _, err := decodeLogRecord(r.Key, append(r.Value, 0)); err == nil {
			t.Fatalf("record %d: value with a trailing byte decoded", i)
		}
		if got := reencode(&want); !reflect.DeepEqual(mustDecode(t, got), want) {
			t.Fatalf("record %d: round trip differs", i)
		}
	}
	// The sample metadata round trips exactly, including the member
	// supporting two protocols (carried in the simtel tag).
	meta := sampleMeta("g", 3)
	got := mustDecode(t, kv{Key: encodeGroupKey("g"), Value: encodeGroupValue(&meta, 1)})
	if !reflect.DeepEqual(got.meta, meta) {
		t.Fatalf("group metadata round trip:\n%+v\n%+v", got.meta, meta)
	}
}

func mustDecode(t *testing.T, r kv) record {
	t.Helper()
	got, err := decodeLogRecord(r.Key, r.Value)
	if err != nil {
		t.Fatal(err)
	}
	return got
}
