package partition

// The raft log of a replicated partition keeps its data in the partition
// log: one write per replica.
//
// dataLogStore sits between raft (and its log cache) and the group's raft
// log store (the broker's WAL). When raft stores a command entry (one
// produce request's batches for this partition), the store runs the
// idempotent-producer and marker checks against the state of the log up
// to that entry, assigns the next offsets, stamps the batches with the
// entry's term as partition leader epoch and appends them to the
// partition log; the WAL gets only a reference to them (type
// logTypeData: the offsets and byte count). On a follower both are
// fsynced before StoreLogs returns, so its answer to the leader means
// its disk; on the leader the fsyncs run while raft sends the entries,
// and the state machine waits for them (leaderSync). What
// the checks decided travels with the entry in raft.Log.Extensions; the
// state machine (replicaFSM.Apply) then only moves the high watermark to
// the entry's end and answers the producer.
//
// The outcome is a function of the log's prefix, the same on every
// replica (raft's log matching), so every replica assigns the same
// offsets and refuses the same duplicates. Entries the checks refuse (a
// duplicate, an out-of-order sequence, a fenced epoch) take no offsets;
// the WAL keeps their bytes, so a follower that asks for them decides the
// same.
//
// The partition log therefore holds entries raft has not committed: the
// high watermark (the applied end) is where Fetch, ListOffsets, retention
// and compaction stop. When raft deletes a suffix of its log (a follower
// whose uncommitted entries conflict with a new leader's) the partition
// log is truncated where the first of them began and the producer state
// is rebuilt. A prefix deleted after a snapshot leaves the data alone:
// retention owns it. A follower that needs an entry whose batches were
// deleted or compacted since is told it is gone (raft.ErrLogNotFound),
// and raft sends it a snapshot instead.
//
// Crash consistency: the partition data and the WAL references are
// written, then both fsynced. After a crash one may be ahead of the
// other; StartReplica's reconcile cuts whichever is ahead (data past the
// last reference, references past the data): on a follower entries raft
// was never told were stored, on a leader entries not acknowledged.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/simtel/simtel/broker/storage"
	"github.com/simtel/simtel/broker/wal"
)

// logTypeData marks, in the inner store, a command entry kept as a
// reference (entryRef). Raft never sees it: GetLog turns it back into a
// raft.LogCommand.
const logTypeData raft.LogType = 0xD0

// What the checks decided for a command entry.
const (
	refWritten   byte = 1 // appended at offsets base..last, size bytes
	refDuplicate byte = 2 // a retry of the batches at base
	refRefused   byte = 3 // refused with Kafka error code
)

// entryRef is what the store decided for a command entry: in the inner
// store it is the entry's data (followed by the entry's own bytes unless
// they were written), in raft's copy of the entry its Extensions.
type entryRef struct {
	kind       byte
	base, last int64
	size       uint32
	code       int16
	msg        string
}

func (r entryRef) appendTo(b []byte) []byte {
	b = append(b, r.kind)
	switch r.kind {
	case refWritten:
		b = binary.BigEndian.AppendUint64(b, uint64(r.base))
		b = binary.BigEndian.AppendUint64(b, uint64(r.last))
		b = binary.BigEndian.AppendUint32(b, r.size)
	case refDuplicate:
		b = binary.BigEndian.AppendUint64(b, uint64(r.base))
	case refRefused:
		b = binary.BigEndian.AppendUint16(b, uint16(r.code))
		msg := r.msg
		if len(msg) > math.MaxUint16 {
			msg = msg[:math.MaxUint16]
		}
		b = binary.BigEndian.AppendUint16(b, uint16(len(msg)))
		b = append(b, msg...)
	}
	return b
}

// parseRef decodes an entryRef and returns the bytes after it.
func parseRef(b []byte) (entryRef, []byte, error) {
	bad := func() (entryRef, []byte, error) {
		return entryRef{}, nil, fmt.Errorf("bad raft entry reference (%d bytes)", len(b))
	}
	if len(b) < 1 {
		return bad()
	}
	r := entryRef{kind: b[0]}
	rest := b[1:]
	switch r.kind {
	case refWritten:
		if len(rest) < 20 {
			return bad()
		}
		r.base = int64(binary.BigEndian.Uint64(rest))
		r.last = int64(binary.BigEndian.Uint64(rest[8:]))
		r.size = binary.BigEndian.Uint32(rest[16:])
		rest = rest[20:]
	case refDuplicate:
		if len(rest) < 8 {
			return bad()
		}
		r.base = int64(binary.BigEndian.Uint64(rest))
		rest = rest[8:]
	case refRefused:
		if len(rest) < 4 {
			return bad()
		}
		r.code = int16(binary.BigEndian.Uint16(rest))
		n := int(binary.BigEndian.Uint16(rest[2:]))
		if len(rest) < 4+n {
			return bad()
		}
		r.msg = string(rest[4 : 4+n])
		rest = rest[4+n:]
	default:
		return bad()
	}
	return r, rest, nil
}

// result is the answer a producer gets for the entry.
func (r entryRef) result() AppendResult {
	switch r.kind {
	case refWritten:
		return AppendResult{Base: r.base, Last: r.last}
	case refDuplicate:
		return AppendResult{Base: r.base, Duplicate: true}
	default:
		err := kerr.ErrorForCode(r.code)
		if err == nil {
			err = kerr.UnknownServerError
		}
		return AppendResult{Err: fmt.Errorf("%w: %s", err, r.msg)}
	}
}

// dataLogStore is a replicated partition's raft log store; see the file
// comment.
type dataLogStore struct {
	inner raft.LogStore
	p     *Partition
	// leading reports whether the group's raft leads: StoreLogs then
	// returns before the fsyncs (see leaderSync). Nil: never.
	leading func() bool

	syncMu sync.Mutex
	// pending are the leader's stored entries whose fsyncs have not
	// ended, and those whose fsyncs failed.
	pending []*leaderSync
	// failed is the first failed fsync of a leader's entries: the
	// replica's storage is unusable until the broker restarts.
	failed atomic.Pointer[error]
}

// deferredLogStore is an inner store that can write entries and make
// them durable later (the broker's WAL).
type deferredLogStore interface {
	StoreLogsDeferred(logs []*raft.Log) (wait func() error, err error)
}

// leaderSync is the fsync of entries lo..hi stored by the leader.
//
// hashicorp/raft's leader stores new entries before it sends them to its
// followers, and each follower stores them before it answers; with
// StoreLogs returning after the fsync both wait, one after the other.
// On the leader StoreLogs returns once the entries are written (the
// page cache holds them, which a crashed process does not lose), and
// their fsyncs run while raft sends them. Raft may then count the leader
// for an entry that is not yet on its disk, so the state machine waits
// for the leader's fsync before it moves the high watermark or answers
// the producer (replicaFSM.Apply): an acknowledged record is on the
// disk of the leader and of a majority counting it, as before. Followers
// store synchronously: a follower's answer still means its disk.
type leaderSync struct {
	lo, hi uint64
	done   chan struct{}
	err    error
}

var (
	_ raft.LogStore          = (*dataLogStore)(nil)
	_ raft.MonotonicLogStore = (*dataLogStore)(nil)
)

func (s *dataLogStore) IsMonotonic() bool {
	m, ok := s.inner.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

func (s *dataLogStore) FirstIndex() (uint64, error) { return s.inner.FirstIndex() }
func (s *dataLogStore) LastIndex() (uint64, error)  { return s.inner.LastIndex() }

func (s *dataLogStore) GetLog(index uint64, out *raft.Log) error {
	if err := s.inner.GetLog(index, out); err != nil {
		return err
	}
	if out.Type != logTypeData {
		return nil
	}
	ref, rest, err := parseRef(out.Data)
	if err != nil {
		return fmt.Errorf("raft entry %d of %s: %w", index, s.p, err)
	}
	out.Type = raft.LogCommand
	out.Extensions = out.Data[: len(out.Data)-len(rest) : len(out.Data)-len(rest)]
	if ref.kind != refWritten {
		out.Data = rest
		return nil
	}
	data, err := s.p.log.ReadExact(ref.base, ref.last, int(ref.size))
	if errors.Is(err, storage.ErrNotIntact) {
		// Retention or compaction went past it: raft sends a snapshot.
		return raft.ErrLogNotFound
	}
	if err != nil {
		return fmt.Errorf("cannot read raft entry %d of %s from its log: %w", index, s.p, err)
	}
	out.Data = data
	return nil
}

func (s *dataLogStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs writes the command entries' batches to the partition log and
// references to them to the inner store, and returns once both are
// durable. It sets each command entry's Extensions (and, if written, its
// Data to the stamped batches) in place: raft's log cache and the
// leader's pending futures hold these entries.
func (s *dataLogStore) StoreLogs(logs []*raft.Log) error {
	p := s.p
	if err := s.failed.Load(); err != nil {
		return fmt.Errorf("cannot store raft entries of %s: an earlier fsync failed, restart the broker: %w", p, *err)
	}
	out := make([]*raft.Log, len(logs))
	syncTo := int64(-1)
	p.mu.Lock()
	rollback := p.log.EndOffset()
	for i, l := range logs {
		if l.Type != raft.LogCommand {
			out[i] = l
			continue
		}
		ref, data, err := p.storeEntryLocked(l)
		if err != nil {
			s.rollbackLocked(rollback)
			p.mu.Unlock()
			return err
		}
		st := *l
		st.Type = logTypeData
		st.Data = ref.appendTo(nil)
		st.Extensions = nil
		l.Extensions = st.Data
		if ref.kind == refWritten {
			l.Data = data
			syncTo = ref.last
		} else {
			st.Data = append(st.Data[:len(st.Data):len(st.Data)], l.Data...)
		}
		out[i] = &st
	}
	p.mu.Unlock()
	if d, ok := s.inner.(deferredLogStore); ok && syncTo >= 0 && len(logs) > 0 && s.leading != nil && s.leading() {
		return s.storeDeferred(d, logs, out, syncTo, rollback)
	}
	var syncErr error
	var wg sync.WaitGroup
	if syncTo >= 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			syncErr = p.log.Sync(context.Background(), syncTo)
		}()
	}
	err := s.inner.StoreLogs(out)
	wg.Wait()
	if err == nil && syncErr != nil && len(logs) > 0 {
		// The references are stored but the batches may not be on disk:
		// take the references back too, or raft, sent these entries
		// again, would find them stored and count them.
		if derr := s.inner.DeleteRange(logs[0].Index, logs[len(logs)-1].Index); derr != nil {
			syncErr = errors.Join(syncErr, derr)
		}
	}
	if err = errors.Join(err, syncErr); err != nil {
		p.mu.Lock()
		s.rollbackLocked(rollback)
		p.mu.Unlock()
		return fmt.Errorf("cannot store raft entries of %s: %w", p, err)
	}
	return nil
}

// storeDeferred stores the leader's entries, whose batches are written
// to the partition log up to offset syncTo, and returns before they are
// durable: see leaderSync.
func (s *dataLogStore) storeDeferred(d deferredLogStore, logs, out []*raft.Log, syncTo, rollback int64) error {
	p := s.p
	wait, err := d.StoreLogsDeferred(out)
	if err != nil {
		p.mu.Lock()
		s.rollbackLocked(rollback)
		p.mu.Unlock()
		return fmt.Errorf("cannot store raft entries of %s: %w", p, err)
	}
	ls := &leaderSync{lo: logs[0].Index, hi: logs[len(logs)-1].Index, done: make(chan struct{})}
	s.syncMu.Lock()
	s.pending = append(s.pending, ls)
	s.syncMu.Unlock()
	go func() {
		var dataErr error
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			dataErr = p.log.Sync(context.Background(), syncTo)
		}()
		err := wait()
		wg.Wait()
		ls.err = errors.Join(err, dataErr)
		if ls.err == nil {
			s.syncMu.Lock()
			s.pending = slices.DeleteFunc(s.pending, func(q *leaderSync) bool { return q == ls })
			s.syncMu.Unlock()
		} else if !errors.Is(ls.err, storage.ErrClosed) && !errors.Is(ls.err, wal.ErrClosed) {
			ls.err = fmt.Errorf("cannot sync raft entries %d-%d of %s: %w", ls.lo, ls.hi, p, ls.err)
			if s.failed.CompareAndSwap(nil, &ls.err) {
				p.cfg.Logger.Error("a leader's fsync failed: its entries are not acknowledged and this replica stores no more; restart the broker", "partition", p.String(), "err", ls.err)
			}
		}
		close(ls.done)
	}()
	return nil
}

// durable waits until entry i, if the leader stored it, is on its disk.
func (s *dataLogStore) durable(i uint64) error {
	s.syncMu.Lock()
	var ls *leaderSync
	for _, q := range s.pending {
		if q.lo <= i && i <= q.hi {
			ls = q
			break
		}
	}
	s.syncMu.Unlock()
	if ls == nil {
		return nil
	}
	<-ls.done
	return ls.err
}

// dropPending forgets the fsyncs of entries lo..hi, which raft deleted:
// entries stored there later are waited for on their own.
func (s *dataLogStore) dropPending(lo, hi uint64) {
	s.syncMu.Lock()
	s.pending = slices.DeleteFunc(s.pending, func(q *leaderSync) bool { return q.lo <= hi && q.hi >= lo })
	s.syncMu.Unlock()
}

// rollbackLocked undoes the appends of a StoreLogs that failed: raft
// stores the same entries again, and they must land at the same offsets.
func (s *dataLogStore) rollbackLocked(end int64) {
	p := s.p
	if p.log.EndOffset() <= end {
		return
	}
	if err := p.log.Truncate(end); err != nil {
		p.cfg.Logger.Error("cannot take back the batches of raft entries that were not stored; restart the broker", "partition", p.String(), "err", err)
		return
	}
	if err := p.rebuildProducersLocked(); err != nil {
		p.cfg.Logger.Error("cannot rebuild the producer state; restart the broker", "partition", p.String(), "err", err)
	}
}

// storeEntryLocked decides a command entry's fate and, if it is written,
// appends its batches. An error is a failed write: raft must not count
// the entry.
func (p *Partition) storeEntryLocked(l *raft.Log) (entryRef, []byte, error) {
	refuse := func(err error) (entryRef, []byte, error) {
		err = KafkaError(err)
		code := int16(kerr.UnknownServerError.Code)
		var ke *kerr.Error
		if errors.As(err, &ke) {
			code = ke.Code
		}
		return entryRef{kind: refRefused, code: code, msg: err.Error()}, nil, nil
	}
	hdrs, err := storage.ParseBatches(l.Data, 0)
	if err != nil {
		// The leader validated it; it fails the same way everywhere.
		return refuse(err)
	}
	if err := p.checkMarkersLocked(l.Data, hdrs); err != nil {
		return refuse(err)
	}
	dup, err := p.checkSequencesLocked(hdrs)
	if err != nil {
		return refuse(err)
	}
	if dup >= 0 {
		return entryRef{kind: refDuplicate, base: dup}, nil, nil
	}
	epoch := int32(min(l.Term, math.MaxInt32))
	data := l.Data
	if !stamped(data, p.log.EndOffset(), epoch) {
		// Append stamps offsets and epoch in place; the leader's entry
		// still holds the producer's request bytes, so stamp a copy.
		data = append([]byte(nil), data...)
	}
	base, last, err := p.log.Append(data, hdrs, epoch)
	if err != nil {
		return entryRef{}, nil, fmt.Errorf("cannot append raft entry %d to %s: %w", l.Index, p, err)
	}
	p.recordSequencesLocked(data, hdrs, base)
	return entryRef{kind: refWritten, base: base, last: last, size: uint32(len(data))}, data, nil
}

// stamped reports whether the first batch of b already carries base as
// its base offset and epoch as its leader epoch: a follower receives the
// batches as the leader stamped them, and Append's in-place stamp then
// changes nothing.
func stamped(b []byte, base int64, epoch int32) bool {
	return len(b) >= 16 && int64(binary.BigEndian.Uint64(b)) == base && int32(binary.BigEndian.Uint32(b[12:])) == epoch
}

// DeleteRange deletes entries lo..hi. A suffix holding batches above the
// high watermark (uncommitted entries that conflict with a new leader's)
// also truncates the partition log where the first of them began; a
// prefix (after a snapshot) leaves the data to retention.
func (s *dataLogStore) DeleteRange(lo, hi uint64) error {
	p := s.p
	hw := p.hw.Load()
	cut := int64(-1)
	first, err := s.inner.FirstIndex()
	if err != nil {
		return err
	}
	var l raft.Log
	for i := hi; i >= max(lo, first) && i > 0; i-- {
		if err := s.inner.GetLog(i, &l); err != nil {
			if errors.Is(err, raft.ErrLogNotFound) {
				continue
			}
			return err
		}
		if l.Type == raft.LogCommand {
			break // stored before references: applied long ago
		}
		if l.Type != logTypeData {
			continue
		}
		ref, _, err := parseRef(l.Data)
		if err != nil {
			return fmt.Errorf("raft entry %d of %s: %w", i, p, err)
		}
		if ref.kind != refWritten {
			continue
		}
		if ref.base < hw {
			break
		}
		cut = ref.base
	}
	if err := s.inner.DeleteRange(lo, hi); err != nil {
		return err
	}
	s.dropPending(lo, hi)
	if cut < 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if cut >= p.log.EndOffset() {
		return nil
	}
	if err := p.log.Truncate(cut); err != nil {
		return fmt.Errorf("cannot truncate %s to offset %d after raft deleted entries %d-%d: %w", p, cut, lo, hi, err)
	}
	p.cfg.Logger.Info("uncommitted batches removed: a new raft leader has other entries there", "partition", p.String(), "from_offset", cut, "raft_entries", fmt.Sprintf("%d-%d", lo, hi))
	return p.rebuildProducersLocked()
}

// reconcile brings the partition log and the raft log back in step
// before raft starts: see the file comment. snapIdx and snapEnd are the
// raft index and end offset of the snapshot raft will restore (0 if
// none). Command entries stored by a broker version that kept the data
// in the WAL (raft.LogCommand in the inner store) after the snapshot are
// stored again the new way, at the offsets the old state machine would
// have given them.
func (s *dataLogStore) reconcile(snapIdx uint64, snapEnd int64) error {
	p := s.p
	first, err := s.inner.FirstIndex()
	if err != nil {
		return err
	}
	last, err := s.inner.LastIndex()
	if err != nil {
		return err
	}
	from := max(first, snapIdx+1)
	if last == 0 || from > last {
		if err := s.settle(snapEnd); err != nil {
			return err
		}
		p.hw.Store(min(snapEnd, p.log.EndOffset()))
		return nil
	}
	var old []*raft.Log
	want := snapEnd
	found := false
	for i := last; i >= from; i-- {
		l := new(raft.Log)
		if err := s.inner.GetLog(i, l); err != nil {
			return fmt.Errorf("cannot read raft entry %d of %s: %w", i, p, err)
		}
		if l.Type == raft.LogCommand {
			old = nil
			for j := from; j <= last; j++ {
				e := new(raft.Log)
				if err := s.inner.GetLog(j, e); err != nil {
					return fmt.Errorf("cannot read raft entry %d of %s: %w", j, p, err)
				}
				old = append(old, e)
			}
			break
		}
		if l.Type != logTypeData || found {
			continue
		}
		ref, _, err := parseRef(l.Data)
		if err != nil {
			return fmt.Errorf("raft entry %d of %s: %w", i, p, err)
		}
		if ref.kind == refWritten {
			want, found = ref.last+1, true
		}
	}
	if old != nil {
		if err := s.settle(snapEnd); err != nil {
			return err
		}
		if err := s.inner.DeleteRange(from, last); err != nil {
			return err
		}
		if err := s.StoreLogs(old); err != nil {
			return err
		}
		p.cfg.Logger.Info("raft entries stored again with their data in the partition log", "partition", p.String(), "entries", len(old))
		p.hw.Store(min(snapEnd, p.log.EndOffset()))
		return nil
	}
	if end := p.log.EndOffset(); end < want {
		// The WAL references batches a crash kept from the disk:
		// drop those entries (raft was never told they were stored).
		var l raft.Log
		for i := from; i <= last; i++ {
			if err := s.inner.GetLog(i, &l); err != nil {
				return fmt.Errorf("cannot read raft entry %d of %s: %w", i, p, err)
			}
			if l.Type != logTypeData {
				continue
			}
			ref, _, err := parseRef(l.Data)
			if err != nil {
				return fmt.Errorf("raft entry %d of %s: %w", i, p, err)
			}
			if ref.kind == refWritten && ref.last >= end {
				p.cfg.Logger.Warn("raft entries whose batches were not on disk after a crash are dropped (never acknowledged)", "partition", p.String(), "raft_entries", fmt.Sprintf("%d-%d", i, last), "log_end", end)
				if err := s.inner.DeleteRange(i, last); err != nil {
					return err
				}
				want = min(ref.base, end)
				break
			}
		}
	}
	if err := s.settle(want); err != nil {
		return err
	}
	p.hw.Store(min(snapEnd, p.log.EndOffset()))
	return nil
}

// settle truncates the partition log to end if it holds more and
// rebuilds the producer state. The caller sets the high watermark to the
// snapshot's end: Restore and Apply move it from there.
func (s *dataLogStore) settle(end int64) error {
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.log.EndOffset() > end {
		p.cfg.Logger.Info("partition log cut back to its last raft entry", "partition", p.String(), "from", p.log.EndOffset(), "to", end)
		if err := p.log.Truncate(end); err != nil {
			return fmt.Errorf("cannot truncate %s to offset %d: %w", p, end, err)
		}
	}
	return p.rebuildProducersLocked()
}
