package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
)

// Store is one raft group's log and stable store in the WAL.
type Store struct {
	w     *WAL
	group uint64
}

var (
	_ raft.LogStore          = (*Store)(nil)
	_ raft.StableStore       = (*Store)(nil)
	_ raft.MonotonicLogStore = (*Store)(nil)
)

// Store returns the raft stores of group. Several calls for one group
// share the same state.
func (w *WAL) Store(group uint64) *Store { return &Store{w: w, group: group} }

// IsMonotonic tells raft to remove every old entry after installing a
// snapshot, so the log never has a gap.
func (s *Store) IsMonotonic() bool { return true }

func (s *Store) FirstIndex() (uint64, error) {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if err := s.w.usableLocked(); err != nil {
		return 0, err
	}
	if g := s.w.mu.groups[s.group]; g != nil && len(g.pos) > 0 {
		return g.first, nil
	}
	return 0, nil
}

func (s *Store) LastIndex() (uint64, error) {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if err := s.w.usableLocked(); err != nil {
		return 0, err
	}
	if g := s.w.mu.groups[s.group]; g != nil {
		return g.last(), nil
	}
	return 0, nil
}

func (s *Store) GetLog(index uint64, out *raft.Log) error {
	rec, err := s.w.readEntry(s.group, index)
	if errors.Is(err, errNotFound) {
		return raft.ErrLogNotFound
	}
	if err != nil {
		return err
	}
	*out = rec.log
	return nil
}

func (s *Store) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs appends contiguous entries following the group's last one
// (or starting anywhere when the group's log is empty) and returns once
// they are durable.
func (s *Store) StoreLogs(logs []*raft.Log) error {
	wait, err := s.StoreLogsDeferred(logs)
	if err != nil {
		return err
	}
	return wait()
}

// StoreLogsDeferred is StoreLogs returning once the entries are written
// and indexed (GetLog reads them), before they are durable: wait returns
// once they are, or with the error that keeps them from it.
func (s *Store) StoreLogsDeferred(logs []*raft.Log) (wait func() error, err error) {
	if len(logs) == 0 {
		return func() error { return nil }, nil
	}
	// Each entry is three pieces written with one pwritev: its header
	// and fixed fields, its data as raft holds it (not copied), and its
	// extensions.
	iov := make([][]byte, 0, 3*len(logs))
	sizes := make([]int64, len(logs))
	recs := make([]record, len(logs))
	heads := make([]byte, 0, len(logs)*(entryHead+4))
	for i, l := range logs {
		start := len(heads)
		heads = appendEntryHead(heads, s.group, l)
		head := heads[start:len(heads):len(heads)]
		tail := binary.LittleEndian.AppendUint32(heads[len(heads):len(heads)], uint32(len(l.Extensions)))
		heads = heads[:len(heads)+4]
		sealPieces(head, l.Data, tail, l.Extensions)
		iov = append(iov, head)
		if len(l.Data) > 0 {
			iov = append(iov, l.Data)
		}
		iov = append(iov, tail)
		if len(l.Extensions) > 0 {
			iov = append(iov, l.Extensions)
		}
		sizes[i] = int64(entrySize(l))
		recs[i] = record{kind: kindEntry, group: s.group, log: raft.Log{Index: l.Index}}
	}
	check := func() error {
		want := logs[0].Index
		if g := s.w.mu.groups[s.group]; g != nil && len(g.pos) > 0 {
			want = g.last() + 1
		}
		for _, l := range logs {
			if l.Index != want {
				return fmt.Errorf("cannot store raft log entry %d of group %x: the next entry must be %d (entries are appended in order; delete a conflicting suffix first)", l.Index, s.group, want)
			}
			want++
		}
		return nil
	}
	seq, err := s.w.appendRecords(iov, sizes, recs, check)
	if err != nil {
		return nil, err
	}
	return func() error { return s.w.syncTo(seq) }, nil
}

// DeleteRange removes entries min..max: a prefix after a snapshot
// (whole segments are deleted once no group needs them) or a
// conflicting suffix.
func (s *Store) DeleteRange(lo, hi uint64) error {
	if lo > hi {
		return nil
	}
	check := func() error {
		if g := s.w.mu.groups[s.group]; g != nil && middleDelete(g, lo, hi) {
			return fmt.Errorf("cannot delete raft log entries %d-%d of group %x: only a prefix or a suffix of %d-%d can be deleted", lo, hi, s.group, g.first, g.last())
		}
		return nil
	}
	err := s.w.writeOne(appendDelete(nil, s.group, lo, hi), record{kind: kindDelete, group: s.group, lo: lo, hi: hi}, check)
	if err != nil {
		return err
	}
	s.w.mu.Lock()
	s.w.compactLocked()
	s.w.mu.Unlock()
	return nil
}

// Set writes a stable value. The value the group already has is not
// written again, only waited for until durable: hashicorp/raft sets the
// current term it has just read whenever a group starts, and a broker
// starting thousands of groups waited for as many WAL writes.
func (s *Store) Set(key, val []byte) error {
	s.w.mu.Lock()
	if g := s.w.mu.groups[s.group]; g != nil && s.w.usableLocked() == nil {
		if v, ok := g.stable[string(key)]; ok && bytes.Equal(v, val) {
			// Durable once the write that set it is (none: Open
			// replayed it and made the replayed records durable). A
			// group starting waits for no fsync of other groups'
			// writes.
			seq := g.setAt[string(key)]
			s.w.mu.Unlock()
			return s.w.syncTo(seq)
		}
	}
	s.w.mu.Unlock()
	return s.w.writeOne(appendSet(nil, s.group, key, val), record{kind: kindSet, group: s.group, key: key, val: val}, nil)
}

// errKeyNotFound: raft compares the message of Get's error with "not
// found" for a key never set.
var errKeyNotFound = errors.New("not found")

func (s *Store) Get(key []byte) ([]byte, error) {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if err := s.w.usableLocked(); err != nil {
		return nil, err
	}
	g := s.w.mu.groups[s.group]
	if g == nil {
		return nil, errKeyNotFound
	}
	v, ok := g.stable[string(key)]
	if !ok {
		return nil, errKeyNotFound
	}
	return append([]byte(nil), v...), nil
}

func (s *Store) SetUint64(key []byte, val uint64) error {
	return s.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

func (s *Store) GetUint64(key []byte) (uint64, error) {
	v, err := s.Get(key)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("stable value %q of raft group %x has %d bytes, want 8", key, s.group, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}
