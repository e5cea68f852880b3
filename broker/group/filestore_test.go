package group

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
)

func openTestStore(t *testing.T, dir string, opts fileStoreOptions) *FileStore {
	t.Helper()
	s, err := openFileStore(dir, testLogger(t), opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

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
	}
}

// runHistory applies the scripted history to s, returning the state and
// the log file size after each op (index 0: before any).
func runHistory(t *testing.T, s *FileStore, path string) (states []State, sizes []int64) {
	t.Helper()
	record := func() {
		states = append(states, mustLoad(t, s))
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, fi.Size())
	}
	record()
	for i, o := range history() {
		if err := o(s); err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
		record()
	}
	return states, sizes
}

func TestFileStoreRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, dir, defaultFileStoreOptions)
	mem := NewMemStore()
	for i, o := range history() {
		if err := o(s); err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
		o(mem)
	}
	want := mustLoad(t, mem)
	if got := mustLoad(t, s); !reflect.DeepEqual(got, want) {
		t.Fatalf("file store state\n%+v\nmemory store state\n%+v", got, want)
	}
	if len(want.Groups) != 3 || want.Groups[0].Meta.Generation != 1 || len(want.Groups[0].Offsets) != 1 ||
		want.Groups[0].Offsets[0].Offset != 10 || len(want.Groups[1].Offsets) != 1 || want.Groups[1].Offsets[0].Partition != 6 {
		t.Fatalf("unexpected history result %+v", want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit("g", nil); !errors.Is(err, ErrStoreClosed) {
		t.Fatalf("commit after close: %v", err)
	}
	if _, err := s.Load(); !errors.Is(err, ErrStoreClosed) {
		t.Fatalf("load after close: %v", err)
	}
	s2 := openTestStore(t, dir, defaultFileStoreOptions)
	defer s2.Close()
	if got := mustLoad(t, s2); !reflect.DeepEqual(got, want) {
		t.Fatalf("after reopen\n%+v\nwant\n%+v", got, want)
	}
}

func TestFileStoreTornTail(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, logFileName)
	s := openTestStore(t, dir, defaultFileStoreOptions)
	states, sizes := runHistory(t, s, path)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	full, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	// Every possible cut, as a crash mid-append leaves: recovery keeps
	// exactly the records that were whole.
	for cut := int64(len(fileMagic)); cut <= int64(len(full)); cut++ {
		cdir := t.TempDir()
		cpath := filepath.Join(cdir, logFileName)
		if err := os.WriteFile(cpath, full[:cut], 0o644); err != nil {
			t.Fatal(err)
		}
		k := 0
		for i, sz := range sizes {
			if sz <= cut {
				k = i
			}
		}
		cs := openTestStore(t, cdir, defaultFileStoreOptions)
		if got := mustLoad(t, cs); !reflect.DeepEqual(got, states[k]) {
			t.Fatalf("cut at %d: state\n%+v\nwant (after %d ops)\n%+v", cut, got, k, states[k])
		}
		// The torn tail is gone, and appends land after the valid
		// prefix.
		if fi, _ := os.Stat(cpath); fi.Size() != sizes[k] {
			t.Fatalf("cut at %d: file is %d bytes after recovery, want %d", cut, fi.Size(), sizes[k])
		}
		if err := cs.Commit("after", []CommittedOffset{{Topic: "z", Partition: 1, Offset: 9}}); err != nil {
			t.Fatal(err)
		}
		cs.Close()
		cs = openTestStore(t, cdir, defaultFileStoreOptions)
		st := mustLoad(t, cs)
		cs.Close()
		if !hasGroup(st, "after") {
			t.Fatalf("cut at %d: commit after recovery lost: %+v", cut, st)
		}
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

func TestFileStoreGarbageAndCorruption(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, logFileName)
	s := openTestStore(t, dir, defaultFileStoreOptions)
	states, sizes := runHistory(t, s, path)
	s.Close()
	full, _ := os.ReadFile(path)

	check := func(name string, data []byte, want State, wantSize int64) {
		t.Helper()
		cdir := t.TempDir()
		if err := os.WriteFile(filepath.Join(cdir, logFileName), data, 0o644); err != nil {
			t.Fatal(err)
		}
		cs := openTestStore(t, cdir, defaultFileStoreOptions)
		defer cs.Close()
		if got := mustLoad(t, cs); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: state\n%+v\nwant\n%+v", name, got, want)
		}
		if fi, _ := os.Stat(filepath.Join(cdir, logFileName)); fi.Size() != wantSize {
			t.Fatalf("%s: %d bytes after recovery, want %d", name, fi.Size(), wantSize)
		}
	}
	last := len(states) - 1
	garbage := append(bytes.Clone(full), []byte("\x05\x00\x00\x00garbage that is not a frame")...)
	check("garbage appended", garbage, states[last], sizes[last])
	zeros := append(bytes.Clone(full), make([]byte, 4096)...) // preallocated, never written
	check("zeros appended", zeros, states[last], sizes[last])
	huge := append(bytes.Clone(full), 0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0, 1)
	check("huge length", huge, states[last], sizes[last])

	// A flipped bit inside the 4th record: the first 3 survive.
	flipped := bytes.Clone(full)
	flipped[sizes[3]+frameHeaderLen+2] ^= 0x10
	check("corrupt record", flipped, states[3], sizes[3])

	// A file shorter than the magic is a crashed creation: start fresh.
	check("torn magic", []byte(fileMagic[:3]), State{}, int64(len(fileMagic)))
	check("empty file", nil, State{}, int64(len(fileMagic)))

	// A file that is not ours is refused and left alone.
	cdir := t.TempDir()
	foreign := []byte("definitely not a group log")
	os.WriteFile(filepath.Join(cdir, logFileName), foreign, 0o644)
	if _, err := openFileStore(cdir, testLogger(t), defaultFileStoreOptions); err == nil {
		t.Fatal("opened a foreign file")
	}
	if data, _ := os.ReadFile(filepath.Join(cdir, logFileName)); !bytes.Equal(data, foreign) {
		t.Fatal("foreign file modified")
	}
}

func TestFileStoreRewrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, logFileName)
	opts := fileStoreOptions{compactFactor: 3, compactMinBytes: 2048}
	s := openTestStore(t, dir, opts)
	var maxSize int64
	for i := range 2000 {
		err := s.Commit("g", []CommittedOffset{
			{Topic: "t", Partition: int32(i % 4), Offset: int64(i)},
		})
		if err != nil {
			t.Fatal(err)
		}
		if i%100 == 0 {
			s.SaveGroup(sampleMeta("g", int32(i)))
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		maxSize = max(maxSize, fi.Size())
	}
	want := mustLoad(t, s)
	s.Close()
	// 2000 commits of ~20 bytes would be ~50KB without rewrites.
	if maxSize > 8<<10 {
		t.Fatalf("log grew to %d bytes despite rewrites", maxSize)
	}
	if _, err := os.Stat(filepath.Join(dir, tmpFileName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temp file left behind: %v", err)
	}
	s = openTestStore(t, dir, opts)
	defer s.Close()
	got := mustLoad(t, s)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("after rewrite and reopen\n%+v\nwant\n%+v", got, want)
	}
	if len(got.Groups) != 1 || len(got.Groups[0].Offsets) != 4 || got.Groups[0].Offsets[3].Offset != 1999 ||
		got.Groups[0].Meta.Generation != 1900 {
		t.Fatalf("unexpected state %+v", got)
	}
}

func TestFileStoreStaleTempFile(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, dir, defaultFileStoreOptions)
	s.Commit("g", []CommittedOffset{{Topic: "t", Offset: 5}})
	s.Close()
	// A rewrite that crashed before its rename.
	os.WriteFile(filepath.Join(dir, tmpFileName), []byte(fileMagic+"partial"), 0o644)
	s = openTestStore(t, dir, defaultFileStoreOptions)
	defer s.Close()
	if st := mustLoad(t, s); len(st.Groups) != 1 || st.Groups[0].Offsets[0].Offset != 5 {
		t.Fatalf("state %+v", st)
	}
	if _, err := os.Stat(filepath.Join(dir, tmpFileName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("stale temp file not removed")
	}
}

func TestFileStoreConcurrentCommits(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, dir, fileStoreOptions{compactFactor: 2, compactMinBytes: 4096})
	const writers, commits = 32, 25
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range commits {
				err := s.Commit(fmt.Sprintf("g%d", w%4), []CommittedOffset{{Topic: "t", Partition: int32(w), Offset: int64(i)}})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	s.Close()
	s = openTestStore(t, dir, defaultFileStoreOptions)
	defer s.Close()
	n := 0
	for _, g := range mustLoad(t, s).Groups {
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
