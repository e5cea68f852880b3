package group

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/storage"
	"github.com/simtel/simtel/internal/testutil"
)

func mustLoad(t *testing.T, s Store) State {
	t.Helper()
	st, err := s.Load()
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	return st
}

func sampleMeta(group string, gen int32) GroupMeta {
	return GroupMeta{
		Group: group, ProtocolType: "consumer", Protocol: "range", Generation: gen, Leader: "m1",
		Members: []MemberMeta{
			{MemberID: "m1", InstanceID: "i1", ClientID: "c1", ClientHost: "/h", SessionTimeoutMillis: 10000,
				RebalanceTimeoutMillis: 30000, Protocols: []ProtocolMeta{{Name: "range", Metadata: []byte{1, 2}}}, Assignment: []byte("a1")},
			{MemberID: "m2", ClientID: "c2", SessionTimeoutMillis: 6000, RebalanceTimeoutMillis: 6000,
				Protocols: []ProtocolMeta{{Name: "range"}, {Name: "sticky", Metadata: []byte{3}}}},
		},
	}
}

func hasGroup(st State, name string) bool {
	for _, g := range st.Groups {
		if g.Meta.Group == name {
			return true
		}
	}
	return false
}

// op is one store mutation of the scripted history below.
type op func(s Store) error

func history() []op {
	off := func(topic string, p int32, o int64) CommittedOffset {
		return CommittedOffset{Topic: topic, Partition: p, Offset: o, LeaderEpoch: 3, Metadata: "m", CommitTimeMillis: 1700000000000}
	}
	return []op{
		func(s Store) error { return s.Commit("g1", []CommittedOffset{off("t", 0, 1), off("t", 1, 2)}) },
		func(s Store) error { return s.SaveGroup(sampleMeta("g1", 1)) },
		func(s Store) error { return s.Commit("g2", []CommittedOffset{off("u", 5, 50)}) },
		func(s Store) error { return s.Commit("g1", []CommittedOffset{off("t", 0, 10)}) },
		func(s Store) error { return s.DeleteOffsets("g1", []TopicPartition{{"t", 1}}) },
		func(s Store) error {
			return s.SaveGroup(GroupMeta{Group: "g3", ProtocolType: "consumer", Generation: 4})
		},
		func(s Store) error { return s.DeleteGroup("g2") },
		func(s Store) error { return s.Commit("g2", []CommittedOffset{off("u", 6, 60)}) },
		func(s Store) error { return s.DeleteOffsets("nope", []TopicPartition{{"t", 0}}) },
		func(s Store) error { return s.Commit("g4", []CommittedOffset{off("t", 2, 7)}) },
		func(s Store) error { return s.DeleteOffsets("g4", []TopicPartition{{"t", 2}}) },
		func(s Store) error { return s.DeleteGroup("never-existed") },
	}
}

// openTestLog opens a partition log in dir, compacted like
// __consumer_offsets; mod adjusts the config.
func openTestLog(t *testing.T, dir string, mod func(*storage.Config)) *storage.Log {
	t.Helper()
	cfg := storage.Config{Dir: dir, Compact: true, Logger: testLogger(t)}
	if mod != nil {
		mod(&cfg)
	}
	l, err := storage.Open(cfg)
	if err != nil {
		t.Fatalf("open log: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func openTestLogStore(t *testing.T, l *storage.Log, logger *slog.Logger, afterSync func(int64)) *LogStore {
	t.Helper()
	if logger == nil {
		logger = testLogger(t)
	}
	s, err := OpenLogStore(l, logger, afterSync)
	if err != nil {
		t.Fatalf("open log store: %v", err)
	}
	return s
}

// logRecord is one record read back from the log.
type logRecord struct {
	offset     int64
	key, value []byte
	header     storage.BatchHeader
}

// readLog returns every record of the log, decoded independently of the
// store's own replay.
func readLog(t *testing.T, l *storage.Log) []logRecord {
	t.Helper()
	var out []logRecord
	res, err := l.Read(l.StartOffset(), 1<<30, l.EndOffset())
	if err != nil {
		t.Fatal(err)
	}
	defer res.Release()
	for _, c := range res.Chunks {
		data := make([]byte, c.Size)
		if _, err := c.File.ReadAt(data, c.Pos); err != nil {
			t.Fatal(err)
		}
		for len(data) > 0 {
			h, err := storage.ParseBatchHeader(data)
			if err != nil {
				t.Fatal(err)
			}
			var b kmsg.RecordBatch
			if err := b.ReadFrom(data[:h.Length]); err != nil {
				t.Fatal(err)
			}
			recs := b.Records
			for range b.NumRecords {
				var r kmsg.Record
				if err := r.ReadFrom(recs); err != nil {
					t.Fatal(err)
				}
				n := len(r.AppendTo(nil))
				recs = recs[n:]
				out = append(out, logRecord{offset: h.BaseOffset + int64(r.OffsetDelta), key: r.Key, value: r.Value, header: h})
			}
			data = data[h.Length:]
		}
	}
	return out
}

func TestLogStoreRoundTrip(t *testing.T) {
	dir := t.TempDir()
	l := openTestLog(t, dir, nil)
	var synced []int64
	s := openTestLogStore(t, l, nil, func(last int64) { synced = append(synced, last) })
	mem := NewMemStore()
	wrote := 0
	for i, o := range history() {
		before := l.EndOffset()
		if err := o(s); err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
		o(mem)
		if end := l.EndOffset(); end != before {
			wrote++
			// One batch per call, durable before the call returned,
			// and the broker told so.
			if l.SyncedOffset() < end {
				t.Fatalf("op %d: synced %d < end %d", i, l.SyncedOffset(), end)
			}
			if len(synced) != wrote || synced[wrote-1] != end-1 {
				t.Fatalf("op %d: afterSync calls %v, want last %d", i, synced, end-1)
			}
		}
	}
	want := mustLoad(t, mem)
	if got := mustLoad(t, s); !reflect.DeepEqual(got, want) {
		t.Fatalf("log store state\n%+v\nmemory store state\n%+v", got, want)
	}
	if len(want.Groups) != 4 || want.Groups[0].Meta.Generation != 1 || len(want.Groups[0].Offsets) != 1 ||
		want.Groups[0].Offsets[0].Offset != 10 || len(want.Groups[1].Offsets) != 1 || want.Groups[1].Offsets[0].Partition != 6 ||
		want.Groups[3].Meta.Group != "g4" || len(want.Groups[3].Offsets) != 0 {
		t.Fatalf("unexpected history result %+v", want)
	}

	// What is in the log: one uncompressed, non-idempotent batch per
	// call that changed something, keys in Kafka's formats.
	recs := readLog(t, l)
	batches := map[int64]bool{}
	for _, r := range recs {
		batches[r.header.BaseOffset] = true
		h := r.header
		if h.Magic != 2 || h.Compression() != storage.CompressionNone || h.ProducerID != -1 || h.IsTransactional() || h.IsControl() {
			t.Fatalf("batch header %+v", h)
		}
		switch v := int16(r.key[0])<<8 | int16(r.key[1]); v {
		case 1:
			var k kmsg.OffsetCommitKey
			if err := k.ReadFrom(r.key); err != nil || k.Group == "" || k.Topic == "" {
				t.Fatalf("offset key %q: %+v %v", r.key, k, err)
			}
		case 2:
			var k kmsg.GroupMetadataKey
			if err := k.ReadFrom(r.key); err != nil || k.Group == "" {
				t.Fatalf("group key %q: %+v %v", r.key, k, err)
			}
		default:
			t.Fatalf("key version %d", v)
		}
	}
	if len(batches) != wrote {
		t.Fatalf("%d batches for %d writing calls", len(batches), wrote)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"commit":         func() error { return s.Commit("g", nil) },
		"delete offsets": func() error { return s.DeleteOffsets("g1", []TopicPartition{{"t", 0}}) },
		"delete group":   func() error { return s.DeleteGroup("g1") },
		"save group":     func() error { return s.SaveGroup(GroupMeta{Group: "g"}) },
		"load":           func() error { _, err := s.Load(); return err },
	} {
		if err := call(); !errors.Is(err, ErrStoreClosed) {
			t.Fatalf("%s after close: %v", name, err)
		}
	}
	// Closing the store left the log to its owner.
	if _, err := l.Read(l.StartOffset(), 1, l.EndOffset()); err != nil {
		t.Fatalf("log unusable after store close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	l2 := openTestLog(t, dir, nil)
	s2 := openTestLogStore(t, l2, nil, nil)
	defer s2.Close()
	if got := mustLoad(t, s2); !reflect.DeepEqual(got, want) {
		t.Fatalf("after reopen\n%+v\nwant\n%+v", got, want)
	}
	// The reopened store knows every live key: deleting a group
	// tombstones all of it.
	if err := s2.DeleteGroup("g1"); err != nil {
		t.Fatal(err)
	}
	mem.DeleteGroup("g1")
	if got, want := mustLoad(t, s2), mustLoad(t, mem); !reflect.DeepEqual(got, want) {
		t.Fatalf("after delete on reopened store\n%+v\nwant\n%+v", got, want)
	}
	tombstones := 0
	for _, r := range readLog(t, l2) {
		if r.offset >= l2.EndOffset()-2 && r.value == nil {
			tombstones++
		}
	}
	if tombstones != 2 { // group key + its one offset
		t.Fatalf("DeleteGroup wrote %d tombstones, want 2", tombstones)
	}
}

// TestLogStoreCompaction writes many superseding records and deletions,
// rolls segments, compacts (twice, so that expired tombstones go too) and
// checks that a reopened store loads exactly the latest state and that
// compaction really shrank the log to about one record per live key.
func TestLogStoreCompaction(t *testing.T) {
	dir := t.TempDir()
	cfg := func(c *storage.Config) {
		c.SegmentBytes = 2048
		c.DeleteRetentionMs = -1 // tombstones go at the second compaction
	}
	l := openTestLog(t, dir, cfg)
	s := openTestLogStore(t, l, nil, nil)
	mem := NewMemStore()
	cur := s
	both := func(f op) {
		t.Helper()
		if err := f(cur); err != nil {
			t.Fatal(err)
		}
		if err := f(mem); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 300 {
		both(func(st Store) error {
			return st.Commit("live", []CommittedOffset{
				{Topic: "t", Partition: int32(i % 4), Offset: int64(i), LeaderEpoch: -1, CommitTimeMillis: int64(i)},
				{Topic: "u", Partition: 0, Offset: int64(i), LeaderEpoch: 2, Metadata: "x"},
			})
		})
		if i%50 == 0 {
			both(func(st Store) error { return st.SaveGroup(sampleMeta("live", int32(i))) })
		}
		if i == 100 {
			// A group that is deleted, and one whose offsets all go
			// while the group stays.
			both(func(st Store) error {
				return st.Commit("doomed", []CommittedOffset{{Topic: "t", Partition: 0, Offset: 5}, {Topic: "t", Partition: 1, Offset: 6}})
			})
			both(func(st Store) error { return st.SaveGroup(sampleMeta("doomed", 1)) })
			both(func(st Store) error {
				return st.Commit("emptied", []CommittedOffset{{Topic: "t", Partition: 3, Offset: 9}})
			})
		}
		if i == 150 {
			both(func(st Store) error { return st.DeleteGroup("doomed") })
			both(func(st Store) error { return st.DeleteOffsets("emptied", []TopicPartition{{"t", 3}}) })
		}
	}
	want := mustLoad(t, mem)
	before := l.Stats()
	if before.Segments < 10 {
		t.Fatalf("only %d segments; the test needs rolls", before.Segments)
	}
	st1, err := l.Compact()
	if err != nil {
		t.Fatal(err)
	}
	st2, err := l.Compact()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("compactions: %+v / %+v", st1, st2)
	if st1.RecordsRemoved == 0 || st2.TombstonesRemoved == 0 {
		t.Fatalf("compaction removed %d records, then %d tombstones", st1.RecordsRemoved, st2.TombstonesRemoved)
	}
	if got := mustLoad(t, s); !reflect.DeepEqual(got, want) {
		t.Fatalf("after compaction\n%+v\nwant\n%+v", got, want)
	}
	s.Close()
	l.Close()

	l2 := openTestLog(t, dir, cfg)
	s2 := openTestLogStore(t, l2, nil, nil)
	if got := mustLoad(t, s2); !reflect.DeepEqual(got, want) {
		t.Fatalf("after compaction and reopen\n%+v\nwant\n%+v", got, want)
	}
	if hasGroup(want, "doomed") || !hasGroup(want, "emptied") {
		t.Fatalf("unexpected state %+v", want)
	}
	// Live keys: live group + 5 offsets, emptied group. Only the
	// active segment may still hold superseded records.
	recs := readLog(t, l2)
	seen := map[string]int{}
	for _, r := range recs {
		seen[string(r.key)]++
	}
	if after := l2.Stats(); after.Size >= before.Size/4 {
		t.Fatalf("log is %d bytes after compaction, was %d", after.Size, before.Size)
	}
	if len(seen) > 7 {
		t.Fatalf("%d distinct keys left, want at most 7 (%d records)", len(seen), len(recs))
	}

	// The store keeps working on the compacted log.
	cur = s2
	both(func(st Store) error { return st.DeleteGroup("live") })
	both(func(st Store) error { return st.DeleteGroup("emptied") })
	if got := mustLoad(t, s2); len(got.Groups) != 0 {
		t.Fatalf("after deleting everything: %+v", got)
	}
	s2.Close()
	l2.Close()
	l3 := openTestLog(t, dir, cfg)
	s3 := openTestLogStore(t, l3, nil, nil)
	defer s3.Close()
	if got := mustLoad(t, s3); len(got.Groups) != 0 {
		t.Fatalf("after deleting everything and reopening: %+v", got)
	}
}

func TestLogStoreConcurrentCommits(t *testing.T) {
	dir := t.TempDir()
	l := openTestLog(t, dir, func(c *storage.Config) { c.SegmentBytes = 16 << 10 })
	var maxSynced atomic.Int64
	s := openTestLogStore(t, l, nil, func(last int64) {
		for {
			cur := maxSynced.Load()
			if last <= cur || maxSynced.CompareAndSwap(cur, last) {
				return
			}
		}
	})
	const writers, commits = 32, 25
	fsyncsBefore := l.Stats().Fsyncs
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range commits {
				err := s.Commit(fmt.Sprintf("g%d", w%4), []CommittedOffset{{Topic: "t", Partition: int32(w), Offset: int64(i)}})
				if err != nil {
					t.Error(err)
					return
				}
				// Durable before Commit returned.
				if end := l.SyncedOffset(); end <= 0 {
					t.Errorf("commit returned with synced offset %d", end)
					return
				}
			}
		})
	}
	wg.Wait()
	fsyncs := l.Stats().Fsyncs - fsyncsBefore
	t.Logf("%d commits, %d fsyncs", writers*commits, fsyncs)
	if got, end := maxSynced.Load(), l.EndOffset(); got != end-1 || l.SyncedOffset() != end {
		t.Fatalf("afterSync saw %d, synced %d, end %d", got, l.SyncedOffset(), end)
	}
	s.Close()
	l.Close()

	l2 := openTestLog(t, dir, nil)
	s2 := openTestLogStore(t, l2, nil, nil)
	defer s2.Close()
	n := 0
	for _, g := range mustLoad(t, s2).Groups {
		for _, o := range g.Offsets {
			if o.Offset != commits-1 {
				t.Fatalf("%s %+v: want offset %d", g.Meta.Group, o, commits-1)
			}
			n++
		}
	}
	if n != writers {
		t.Fatalf("%d partitions, want %d", n, writers)
	}
}

// appendRaw appends a batch of arbitrary records straight to the log, as
// a foreign writer would; attrs are OR-ed into the batch attributes.
func appendRaw(t *testing.T, l *storage.Log, recs []kv, attrs int16) {
	t.Helper()
	b := storage.AppendBatch(nil, recs, 1)
	if attrs != 0 {
		b[21] |= byte(attrs >> 8)
		b[22] |= byte(attrs)
		crc := crc32.Checksum(b[batchCRCStart:], crcTable)
		b[17], b[18], b[19], b[20] = byte(crc>>24), byte(crc>>16), byte(crc>>8), byte(crc)
	}
	hdrs, err := storage.ParseBatches(b, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Append(b, hdrs, 0); err != nil {
		t.Fatal(err)
	}
}

// TestLogStoreSkipsForeignRecords puts CRC-valid batches that are not the
// store's between its own: they are skipped with a warning, everything
// else loads, and a key that decodes (with a value that does not) is
// still tombstoned when its group is deleted.
func TestLogStoreSkipsForeignRecords(t *testing.T) {
	dir := t.TempDir()
	l := openTestLog(t, dir, nil)
	s := openTestLogStore(t, l, nil, nil)
	mem := NewMemStore()
	for _, o := range history()[:4] {
		if err := o(s); err != nil {
			t.Fatal(err)
		}
		o(mem)
	}
	s.Close()

	goodKey := encodeOffsetKey("g1", TopicPartition{"t", 9})
	appendRaw(t, l, []kv{
		{Key: nil, Value: []byte("null key")},
		{Key: []byte("k"), Value: []byte("too short for a version")},
		{Key: []byte{0, 3, 0, 1, 'x'}, Value: []byte("unknown key version")},
		{Key: append(encodeGroupKey("g1"), 0), Value: []byte("trailing byte")},
		{Key: goodKey, Value: []byte{0, 3, 1, 2}},
		{Key: encodeGroupKey("g1"), Value: []byte{0, 99, 0, 0}},
	}, 0)
	appendRaw(t, l, []kv{{Key: encodeGroupKey("zipped"), Value: encodeGroupValue(&GroupMeta{Group: "zipped"}, 1)}}, 1) // "gzip"
	appendRaw(t, l, []kv{{Key: encodeGroupKey("txn"), Value: encodeGroupValue(&GroupMeta{Group: "txn"}, 1)}}, 0x10)

	var logs testutil.SyncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s2 := openTestLogStore(t, l, logger, nil)
	defer s2.Close()
	for _, o := range history()[4:] {
		if err := o(s2); err != nil {
			t.Fatal(err)
		}
		o(mem)
	}
	want := mustLoad(t, mem)
	if got := mustLoad(t, s2); !reflect.DeepEqual(got, want) {
		t.Fatalf("state with foreign records\n%+v\nwant\n%+v", got, want)
	}
	if n := strings.Count(logs.String(), "level=WARN"); n < 8 {
		t.Fatalf("%d warnings, want one per foreign record or batch (8):\n%s", n, logs.String())
	}
	if err := s2.DeleteGroup("g1"); err != nil {
		t.Fatal(err)
	}
	recs := readLog(t, l)
	deleted := false
	for _, r := range recs[len(recs)-3:] {
		deleted = deleted || (bytes.Equal(r.key, goodKey) && r.value == nil)
	}
	if !deleted {
		t.Fatal("DeleteGroup did not tombstone the offset key whose value was garbage")
	}
}

func TestLogStoreRefusesOversizedKeys(t *testing.T) {
	l := openTestLog(t, t.TempDir(), nil)
	s := openTestLogStore(t, l, nil, nil)
	defer s.Close()
	long := strings.Repeat("x", 1<<15)
	if err := s.Commit(long, nil); err == nil {
		t.Fatal("group id of 32 KiB accepted")
	}
	if err := s.Commit("g", []CommittedOffset{{Topic: long}}); err == nil {
		t.Fatal("topic of 32 KiB accepted")
	}
	if err := s.SaveGroup(GroupMeta{Group: long}); err == nil {
		t.Fatal("group id of 32 KiB accepted by SaveGroup")
	}
	if end := l.EndOffset(); end != 0 {
		t.Fatalf("refused calls wrote %d records", end)
	}
	// Long strings in the (flexible) group value are fine.
	meta := GroupMeta{Group: "g", ProtocolType: "consumer", Protocol: long, Generation: 1, Leader: "m",
		Members: []MemberMeta{{MemberID: "m", Protocols: []ProtocolMeta{{Name: long, Metadata: bytes.Repeat([]byte{1}, 1<<16)}}}}}
	if err := s.SaveGroup(meta); err != nil {
		t.Fatal(err)
	}
	got := mustLoad(t, s)
	if len(got.Groups) != 1 || !reflect.DeepEqual(got.Groups[0].Meta, meta) {
		t.Fatal("long group metadata did not round trip")
	}
}

// TestLogStoreLoadSeesExternalAppends: records that reach the log without
// going through the store (as replication will append them) are seen by
// the next Load, and the store's key index learns them.
func TestLogStoreLoadSeesExternalAppends(t *testing.T) {
	l := openTestLog(t, t.TempDir(), nil)
	s := openTestLogStore(t, l, nil, nil)
	defer s.Close()
	o := CommittedOffset{Topic: "t", Partition: 3, Offset: 33, LeaderEpoch: -1}
	meta := sampleMeta("ext", 2)
	appendRaw(t, l, []kv{
		{Key: encodeGroupKey("ext"), Value: encodeGroupValue(&meta, 1)},
		{Key: encodeOffsetKey("ext", TopicPartition{"t", 3}), Value: encodeOffsetValue(&o)},
	}, 0)
	st := mustLoad(t, s)
	if len(st.Groups) != 1 || !reflect.DeepEqual(st.Groups[0].Meta, meta) || len(st.Groups[0].Offsets) != 1 || st.Groups[0].Offsets[0] != o {
		t.Fatalf("external records not loaded: %+v", st)
	}
	if err := s.DeleteGroup("ext"); err != nil {
		t.Fatal(err)
	}
	if recs := readLog(t, l); len(recs) != 4 || recs[2].value != nil || recs[3].value != nil {
		t.Fatalf("DeleteGroup after an external append wrote %d records: %+v", len(recs)-2, recs)
	}
	if st := mustLoad(t, s); len(st.Groups) != 0 {
		t.Fatalf("after delete: %+v", st)
	}
}
