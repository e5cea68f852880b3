package wal

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"golang.org/x/sys/unix"

	"github.com/simtel/simtel/internal/fsutil"
)

// Options configure a WAL. The zero value is usable.
type Options struct {
	// SegmentBytes is the size at which the active segment is closed and
	// a new one started; segments are the unit of deletion. Default 64 MiB.
	SegmentBytes int64
	// Logger gets recovery and failure messages. Default: discard.
	Logger *slog.Logger
}

const segmentSuffix = ".wal"

// ErrClosed is returned by every call on a closed WAL.
var ErrClosed = errors.New("wal is closed")

// WAL is one broker's shared raft log; see the package comment. Its
// methods are safe for concurrent use.
type WAL struct {
	dir  string
	opts Options
	log  *slog.Logger

	mu struct {
		sync.Mutex
		// synced is the write number known durable: every write up to
		// it was made before an fsync that has returned. syncing is the
		// number of fsyncs in flight (at most maxSyncing) and covering
		// the highest write number one of them will make durable.
		// syncDone is signalled when one returns.
		synced, covering uint64
		syncing          int
		syncDone         *sync.Cond

		groups map[uint64]*groupState
		segs   []*segment // by id; the last one is active
		byID   map[uint64]*segment
		// written counts write calls; a caller waits until synced
		// reaches the number of its own write.
		written uint64
		// err is sticky: after a failed write or fsync nothing is known
		// about what reached the disk, so every later call fails.
		err    error
		closed bool
	}

	stats struct {
		appends, syncs, bytes, deletedSegs, relocated, syncNanos atomic.Uint64
	}
}

type segment struct {
	id   uint64
	f    *os.File
	size int64
	// live is the bytes of entry records in this segment that the index
	// still points at; a segment with none is garbage.
	live int64
}

// loc is where a group's entry record is.
type loc struct {
	seg uint64
	off int64
	n   int64 // whole record, header included
}

// groupState is the in-memory index of one group: entries first ..
// first+len(pos)-1 and the stable store.
type groupState struct {
	first  uint64
	pos    []loc
	stable map[string][]byte
	// setAt is, per stable key, the write sequence number (WAL.mu.written)
	// of the write that set its value; absent for a value Open replayed
	// (durable).
	setAt map[string]uint64
}

func (g *groupState) last() uint64 {
	if len(g.pos) == 0 {
		return 0
	}
	return g.first + uint64(len(g.pos)) - 1
}

// Open opens the WAL in dir (created if missing) and rebuilds its index
// from the segments, truncating a torn tail; see the package comment.
func Open(dir string, opts Options) (*WAL, error) {
	if opts.SegmentBytes <= 0 {
		opts.SegmentBytes = 64 << 20
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cannot create wal directory %s: %w", dir, err)
	}
	w := &WAL{dir: dir, opts: opts, log: opts.Logger}
	w.mu.syncDone = sync.NewCond(&w.mu.Mutex)
	w.mu.groups = map[uint64]*groupState{}
	w.mu.byID = map[uint64]*segment{}
	ids, err := listSegments(dir)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			w.closeFiles()
		}
	}()
	for i, id := range ids {
		if err := w.recoverSegment(id, i == len(ids)-1); err != nil {
			return nil, err
		}
	}
	if err := w.checkHolesLocked(); err != nil {
		return nil, fmt.Errorf("the wal in %s is inconsistent: %w", dir, err)
	}
	if n := len(w.mu.segs); n > 0 {
		// What a crashed process wrote may only be in the page cache:
		// what was replayed is durable from here on (the other segments
		// were fsynced when the next one was started).
		if err := fsutil.Fdatasync(w.mu.segs[n-1].f); err != nil {
			return nil, fmt.Errorf("cannot sync wal segment %s: %w", w.mu.segs[n-1].f.Name(), err)
		}
	}
	if len(w.mu.segs) == 0 {
		if err := w.createSegmentLocked(1); err != nil {
			return nil, err
		}
	}
	ok = true
	return w, nil
}

func listSegments(dir string) ([]uint64, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("cannot list wal directory %s: %w", dir, err)
	}
	var ids []uint64
	for _, de := range des {
		name, ok := strings.CutSuffix(de.Name(), segmentSuffix)
		if !ok {
			continue
		}
		id, err := strconv.ParseUint(name, 16, 64)
		if err != nil {
			continue
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

func (w *WAL) segmentPath(id uint64) string {
	return filepath.Join(w.dir, fmt.Sprintf("%016x%s", id, segmentSuffix))
}

// recoverSegment replays one segment's records into the index.
func (w *WAL) recoverSegment(id uint64, last bool) error {
	path := w.segmentPath(id)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("cannot open wal segment %s: %w", path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("cannot stat wal segment %s: %w", path, err)
	}
	size := fi.Size()
	seg := &segment{id: id, f: f}
	w.mu.segs = append(w.mu.segs, seg)
	w.mu.byID[id] = seg
	// The loop's returns of bad(...) end the scan; seg.size is set by
	// this deferred assignment on every path.
	defer func() { seg.size = size }()
	r := bufio.NewReaderSize(io.NewSectionReader(f, 0, size), 1<<20)
	var off int64
	var hdr [headerSize]byte
	var buf []byte
	for off < size {
		bad := func(err error) error {
			if !last {
				return fmt.Errorf("wal segment %s is corrupt at offset %d (it was fsynced when the next one was started, so this is not a torn write): %w; "+
					"the replicated partitions of this broker cannot be recovered from it: stop the broker, move its data directory away and start it empty, so its replicas are rebuilt from the other brokers", path, off, err)
			}
			w.log.Warn("truncating a torn write at the end of the wal", "segment", path, "offset", off, "dropped_bytes", size-off, "err", err)
			if err := f.Truncate(off); err != nil {
				return fmt.Errorf("cannot truncate the torn end of wal segment %s at offset %d: %w", path, off, err)
			}
			if err := fsutil.Fdatasync(f); err != nil {
				return fmt.Errorf("cannot sync wal segment %s after truncating it: %w", path, err)
			}
			size = off
			return nil
		}
		if size-off < headerSize {
			return bad(fmt.Errorf("%w: %d bytes left, less than a header", errCorrupt, size-off))
		}
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return fmt.Errorf("cannot read wal segment %s at offset %d: %w", path, off, err)
		}
		n, err := parseHeader(hdr[:], size-off-headerSize)
		if err != nil {
			return bad(err)
		}
		if cap(buf) < headerSize+n {
			buf = make([]byte, headerSize+n)
		}
		buf = buf[:headerSize+n]
		copy(buf, hdr[:])
		if _, err := io.ReadFull(r, buf[headerSize:]); err != nil {
			return fmt.Errorf("cannot read wal segment %s at offset %d: %w", path, off, err)
		}
		rec, err := decode(buf)
		if err != nil {
			return bad(err)
		}
		if err := w.applyLocked(rec, loc{seg: id, off: off, n: int64(headerSize + n)}, true); err != nil {
			return fmt.Errorf("wal segment %s at offset %d: %w", path, off, err)
		}
		off += int64(headerSize + n)
	}
	return nil
}

// applyLocked applies one record to the index. Live calls validated it
// with their check first; in recovery (replay) a record that does not
// fit is corruption.
func (w *WAL) applyLocked(rec record, at loc, replay bool) error {
	g := w.mu.groups[rec.group]
	if g == nil && rec.kind != kindDrop {
		g = &groupState{stable: map[string][]byte{}}
		w.mu.groups[rec.group] = g
	}
	switch rec.kind {
	case kindEntry:
		i := rec.log.Index
		if !replay {
			// check made sure it follows the last entry.
			if len(g.pos) == 0 {
				g.first = i
			}
			g.pos = append(g.pos, at)
			w.mu.byID[at.seg].live += at.n
			break
		}
		// In replay the index can differ from the live one before this
		// point, because the segments deleted since held records that
		// are gone: entries above i that this log had deleted (the
		// deletion is gone), or entries below i (dead by the end of the
		// log, since their segment could be deleted). So an entry
		// replaces everything from its index on, and a gap below it is
		// filled with holes, which must all be deleted again by the end
		// of the replay (checkHoles).
		w.placeLocked(g, i, at, true)
	case kindMove:
		// A live entry copied forward out of an old segment (relocate):
		// it replaces the old copy, or stands in for it when the old
		// copy's segment is gone.
		w.placeLocked(g, rec.log.Index, at, false)
	case kindDelete:
		w.deleteRangeLocked(g, rec.lo, rec.hi)
	case kindSet:
		g.stable[string(rec.key)] = slices.Clone(rec.val)
	case kindDrop:
		if g != nil {
			w.deleteRangeLocked(g, 0, ^uint64(0))
		}
		delete(w.mu.groups, rec.group)
	}
	return nil
}

// hole marks, in replay, an entry whose record is in a deleted segment.
var hole = loc{}

// placeLocked puts entry i of g at at. truncate: drop everything from i
// on first (an entry); else replace i in place (a move). Outside the
// current range the gap is filled with holes.
func (w *WAL) placeLocked(g *groupState, i uint64, at loc, truncate bool) {
	switch {
	case len(g.pos) == 0:
		g.first = i
		g.pos = append(g.pos, at)
	case i < g.first:
		if truncate {
			w.deleteRangeLocked(g, 0, ^uint64(0))
			g.first = i
			g.pos = append(g.pos, at)
			break
		}
		holes := make([]loc, g.first-i)
		holes[0] = at
		g.pos = append(holes, g.pos...)
		g.first = i
	case i <= g.last():
		if truncate {
			w.deleteRangeLocked(g, i, ^uint64(0))
			g.pos = append(g.pos, at)
			break
		}
		old := &g.pos[i-g.first]
		if old.seg != 0 {
			w.mu.byID[old.seg].live -= old.n
		}
		*old = at
	default:
		for g.last()+1 < i {
			g.pos = append(g.pos, hole)
		}
		g.pos = append(g.pos, at)
	}
	w.mu.byID[at.seg].live += at.n
}

// checkHolesLocked: after replay, no group may still have a hole.
func (w *WAL) checkHolesLocked() error {
	for id, g := range w.mu.groups {
		for k, l := range g.pos {
			if l.seg == 0 {
				return fmt.Errorf("%w: entry %d of raft group %x is in a segment that was deleted", errCorrupt, g.first+uint64(k), id)
			}
		}
	}
	return nil
}

// deleteRangeLocked removes lo..hi from g: a prefix (compaction after a
// snapshot), a suffix (conflicting entries) or everything. Raft never
// deletes from the middle; middleDelete rejects that before.
func (w *WAL) deleteRangeLocked(g *groupState, lo, hi uint64) {
	if len(g.pos) == 0 || hi < g.first || lo > g.last() {
		return
	}
	gone := func(ls []loc) {
		for _, l := range ls {
			if l.seg != 0 {
				w.mu.byID[l.seg].live -= l.n
			}
		}
	}
	switch {
	case lo <= g.first && hi >= g.last():
		gone(g.pos)
		g.pos = nil
		g.first = 0
	case lo <= g.first:
		k := hi - g.first + 1
		gone(g.pos[:k])
		g.pos = g.pos[k:]
		g.first = hi + 1
	default:
		gone(g.pos[lo-g.first:])
		g.pos = g.pos[:lo-g.first]
	}
}

func middleDelete(g *groupState, lo, hi uint64) bool {
	return len(g.pos) > 0 && lo > g.first && hi < g.last()
}

// createSegmentLocked creates segment id, syncs the directory and makes
// it the active segment.
func (w *WAL) createSegmentLocked(id uint64) error {
	path := w.segmentPath(id)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("cannot create wal segment %s: %w", path, err)
	}
	if err := fsutil.SyncDir(w.dir); err != nil {
		f.Close()
		return err
	}
	seg := &segment{id: id, f: f}
	w.mu.segs = append(w.mu.segs, seg)
	w.mu.byID[id] = seg
	return nil
}

func (w *WAL) activeLocked() *segment { return w.mu.segs[len(w.mu.segs)-1] }

// rollLocked fsyncs the active segment and starts the next one with a
// checkpoint of every group (stable values, first index), fsynced too,
// so that older segments hold nothing the index needs except entries.
func (w *WAL) rollLocked() error {
	old := w.activeLocked()
	if err := fsutil.Fdatasync(old.f); err != nil {
		return fmt.Errorf("cannot sync wal segment %s: %w", old.f.Name(), err)
	}
	if err := w.createSegmentLocked(old.id + 1); err != nil {
		return err
	}
	seg := w.activeLocked()
	var b []byte
	for _, id := range slices.Sorted(mapsKeys(w.mu.groups)) {
		g := w.mu.groups[id]
		for _, k := range slices.Sorted(mapsKeys(g.stable)) {
			b = appendSet(b, id, []byte(k), g.stable[k])
		}
		if len(g.pos) == 0 {
			b = appendDelete(b, id, 0, ^uint64(0))
		} else if g.first > 0 {
			b = appendDelete(b, id, 0, g.first-1)
		}
	}
	if _, err := seg.f.WriteAt(b, 0); err != nil {
		return fmt.Errorf("cannot write the checkpoint of wal segment %s: %w", seg.f.Name(), err)
	}
	if err := fsutil.Fdatasync(seg.f); err != nil {
		return fmt.Errorf("cannot sync wal segment %s: %w", seg.f.Name(), err)
	}
	seg.size = int64(len(b))
	w.stats.bytes.Add(uint64(len(b)))
	return nil
}

func mapsKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// write appends the encoded records of one call to the active segment,
// after check accepted them, and applies them to the index; then it
// waits until they are durable. The records' bytes are the
// concatenation of iov; sizes[i] is the length of record i.
func (w *WAL) write(iov [][]byte, sizes []int64, recs []record, check func() error) error {
	seq, err := w.appendRecords(iov, sizes, recs, check)
	if err != nil {
		return err
	}
	return w.syncTo(seq)
}

// appendRecords is write without the wait: it returns the write's
// number, durable once syncTo of it returns.
func (w *WAL) appendRecords(iov [][]byte, sizes []int64, recs []record, check func() error) (uint64, error) {
	var total int64
	for _, n := range sizes {
		total += n
	}
	w.mu.Lock()
	if err := w.usableLocked(); err != nil {
		w.mu.Unlock()
		return 0, err
	}
	if check != nil {
		if err := check(); err != nil {
			w.mu.Unlock()
			return 0, err
		}
	}
	if seg := w.activeLocked(); seg.size > 0 && seg.size+total > w.opts.SegmentBytes {
		err := w.rollLocked()
		if err == nil {
			err = w.relocateLocked()
		}
		if err != nil {
			w.failLocked(err)
			w.mu.Unlock()
			return 0, err
		}
	}
	seg := w.activeLocked()
	if err := pwritev(seg.f, iov, seg.size); err != nil {
		err = fmt.Errorf("cannot write to wal segment %s: %w", seg.f.Name(), err)
		w.failLocked(err)
		w.mu.Unlock()
		return 0, err
	}
	off := seg.size
	seq := w.mu.written + 1
	for i, rec := range recs {
		n := sizes[i]
		// Cannot fail: check validated the records against this index.
		_ = w.applyLocked(rec, loc{seg: seg.id, off: off, n: n}, false)
		if rec.kind == kindSet {
			g := w.mu.groups[rec.group]
			if g.setAt == nil {
				g.setAt = map[string]uint64{}
			}
			g.setAt[string(rec.key)] = seq
		}
		off += n
	}
	seg.size = off
	w.mu.written = seq
	w.mu.Unlock()
	w.stats.appends.Add(1)
	w.stats.bytes.Add(uint64(total))
	return seq, nil
}

// writeOne is write for a single record in b.
func (w *WAL) writeOne(b []byte, rec record, check func() error) error {
	return w.write([][]byte{b}, []int64{int64(len(b))}, []record{rec}, check)
}

// pwritev writes the concatenation of iov at off in f, in as few system
// calls as the kernel's iovec limit allows, without copying it into one
// buffer first.
func pwritev(f *os.File, iov [][]byte, off int64) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	const maxIov = 1024
	for len(iov) > 0 {
		chunk := iov[:min(len(iov), maxIov)]
		var want int
		for _, b := range chunk {
			want += len(b)
		}
		var n int
		var werr error
		if err := rc.Control(func(fd uintptr) { n, werr = unix.Pwritev(int(fd), chunk, off) }); err != nil {
			return err
		}
		if werr != nil {
			return werr
		}
		off += int64(n)
		if n == want {
			iov = iov[len(chunk):]
			continue
		}
		// Short write: go on with the rest.
		rest := slices.Clone(iov)
		for n > 0 {
			if n >= len(rest[0]) {
				n -= len(rest[0])
				rest = rest[1:]
				continue
			}
			rest[0] = rest[0][n:]
			n = 0
		}
		iov = rest
	}
	return nil
}

func (w *WAL) usableLocked() error {
	if w.mu.closed {
		return ErrClosed
	}
	return w.mu.err
}

func (w *WAL) failLocked(err error) {
	if w.mu.err == nil {
		w.log.Error("the wal failed; every raft group of this broker now fails its writes until the broker is restarted", "err", err)
		w.mu.err = fmt.Errorf("the wal failed earlier, restart the broker: %w", err)
	}
}

// maxSyncing bounds the fsyncs in flight. With one, a write made while an
// fsync runs waits for it to end and then for its own; with two, its own
// starts at once, and the kernel overlaps the two. More would only split
// the writes that one fsync could cover between several.
const maxSyncing = 2

// syncTo returns once write number seq is durable. It waits for an fsync
// in flight that covers it, or else starts one that covers every write
// made so far (group commit), or, if maxSyncing are in flight already,
// waits for one of them to end and looks again.
func (w *WAL) syncTo(seq uint64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		if err := w.usableLocked(); err != nil {
			return err
		}
		if w.mu.synced >= seq {
			return nil
		}
		if w.mu.covering >= seq || w.mu.syncing >= maxSyncing {
			w.mu.syncDone.Wait()
			continue
		}
		if err := w.syncLocked(); err != nil {
			return err
		}
	}
}

// syncLocked fsyncs the active segment with mu released meanwhile, and
// marks the writes made before as durable.
func (w *WAL) syncLocked() error {
	target := w.mu.written
	f := w.activeLocked().f
	w.mu.syncing++
	w.mu.covering = max(w.mu.covering, target)
	w.mu.Unlock()
	// Writes up to target are in f or in older segments, which were
	// fsynced when they were rolled. A segment deleted meanwhile was
	// synced before, so ErrClosed from it is fine (Close waits for the
	// fsyncs in flight, so it is never the active segment's).
	start := time.Now()
	err := fsutil.Fdatasync(f)
	w.stats.syncNanos.Add(uint64(time.Since(start)))
	w.mu.Lock()
	w.mu.syncing--
	w.mu.syncDone.Broadcast()
	if err != nil && !errors.Is(err, os.ErrClosed) {
		err = fmt.Errorf("cannot sync wal segment %s: %w", f.Name(), err)
		w.failLocked(err)
		return err
	}
	w.stats.syncs.Add(1)
	// fsyncs can return out of order: each one makes durable what was
	// written before it started, whatever the others did.
	w.mu.synced = max(w.mu.synced, target)
	return nil
}

// compactLocked deletes the oldest segments that hold no live entry.
// Only a prefix of the segments is deleted, so that replay always
// starts at a checkpoint with everything after it present.
func (w *WAL) compactLocked() {
	for len(w.mu.segs) > 1 && w.mu.segs[0].live <= 0 {
		seg := w.mu.segs[0]
		seg.f.Close()
		if err := os.Remove(seg.f.Name()); err != nil {
			// Left behind, it is replayed again on the next start: only
			// space is lost.
			w.log.Warn("cannot delete a wal segment no group needs; it stays until the next start", "segment", seg.f.Name(), "err", err)
		}
		w.mu.segs = w.mu.segs[1:]
		delete(w.mu.byID, seg.id)
		w.stats.deletedSegs.Add(1)
	}
}

// relocateLocked copies the live entries of the oldest segment to the
// active one when the WAL holds much more than its live data, so that a
// group that writes rarely (and so rarely compacts) does not keep every
// later segment on disk: segments are only deleted oldest first. The
// copies are fsynced before the oldest segment is deleted.
func (w *WAL) relocateLocked() error {
	var total, live int64
	for _, seg := range w.mu.segs {
		total += seg.size
		live += seg.live
	}
	if len(w.mu.segs) < 3 || total <= 2*live+2*w.opts.SegmentBytes {
		return nil
	}
	oldest := w.mu.segs[0]
	type moved struct {
		group uint64
		index uint64
		at    loc
	}
	var todo []moved
	for _, id := range slices.Sorted(mapsKeys(w.mu.groups)) {
		g := w.mu.groups[id]
		// Descending index order: see kindMove in applyLocked.
		for k := len(g.pos) - 1; k >= 0; k-- {
			if g.pos[k].seg == oldest.id {
				todo = append(todo, moved{group: id, index: g.first + uint64(k), at: g.pos[k]})
			}
		}
	}
	if len(todo) == 0 {
		w.compactLocked()
		return nil
	}
	var b []byte
	for _, m := range todo {
		rec := make([]byte, m.at.n)
		if _, err := oldest.f.ReadAt(rec, m.at.off); err != nil {
			return fmt.Errorf("cannot read wal entry %d of group %x to relocate it: %w", m.index, m.group, err)
		}
		if _, err := decode(rec); err != nil {
			return fmt.Errorf("cannot relocate wal entry %d of group %x from %s: %w", m.index, m.group, oldest.f.Name(), err)
		}
		rec[headerSize] = byte(kindMove)
		b = append(b, seal(rec, 0)...)
	}
	seg := w.activeLocked()
	if _, err := seg.f.WriteAt(b, seg.size); err != nil {
		return fmt.Errorf("cannot write relocated entries to wal segment %s: %w", seg.f.Name(), err)
	}
	if err := fsutil.Fdatasync(seg.f); err != nil {
		return fmt.Errorf("cannot sync wal segment %s: %w", seg.f.Name(), err)
	}
	off := seg.size
	for _, m := range todo {
		rec := record{kind: kindMove, group: m.group, log: raft.Log{Index: m.index}}
		if err := w.applyLocked(rec, loc{seg: seg.id, off: off, n: m.at.n}, false); err != nil {
			return err
		}
		off += m.at.n
	}
	seg.size = off
	w.stats.bytes.Add(uint64(len(b)))
	w.stats.relocated.Add(uint64(len(b)))
	w.compactLocked()
	return nil
}

// readEntry reads and decodes the entry record at l.
func (w *WAL) readEntry(group, index uint64) (record, error) {
	for attempt := 0; ; attempt++ {
		w.mu.Lock()
		if err := w.usableLocked(); err != nil {
			w.mu.Unlock()
			return record{}, err
		}
		g := w.mu.groups[group]
		if g == nil || len(g.pos) == 0 || index < g.first || index > g.last() {
			w.mu.Unlock()
			return record{}, errNotFound
		}
		at := g.pos[index-g.first]
		var f *os.File
		for _, s := range w.mu.segs {
			if s.id == at.seg {
				f = s.f
			}
		}
		w.mu.Unlock()
		if f == nil {
			return record{}, fmt.Errorf("wal entry %d of group %x is in segment %d, which is gone", index, group, at.seg)
		}
		buf := make([]byte, at.n)
		if _, err := f.ReadAt(buf, at.off); err != nil {
			if errors.Is(err, os.ErrClosed) && attempt == 0 {
				continue // compacted meanwhile: look again
			}
			return record{}, fmt.Errorf("cannot read wal entry %d of group %x from %s at offset %d: %w", index, group, f.Name(), at.off, err)
		}
		rec, err := decode(buf)
		if err != nil {
			return record{}, fmt.Errorf("wal entry %d of group %x in %s at offset %d: %w", index, group, f.Name(), at.off, err)
		}
		if (rec.kind != kindEntry && rec.kind != kindMove) || rec.group != group || rec.log.Index != index {
			return record{}, fmt.Errorf("wal index points at the wrong record for entry %d of group %x (%s offset %d)", index, group, f.Name(), at.off)
		}
		return rec, nil
	}
}

// errNotFound is what the store methods turn into raft.ErrLogNotFound
// or raft's "not found" for stable keys.
var errNotFound = errors.New("not found")

// Stats are counters since Open.
type Stats struct {
	// Appends is the number of write calls (each one record batch of one
	// group), Syncs the fsyncs that made them durable: Appends/Syncs is
	// the group-commit factor.
	Appends, Syncs uint64
	// SyncTime is the time spent in those fsyncs.
	SyncTime time.Duration
	// Bytes written to segments, checkpoints and relocations included;
	// RelocatedBytes of them are live entries copied out of old segments.
	Bytes, RelocatedBytes uint64
	// LiveBytes: entry records the index points at.
	LiveBytes int64
	// Segments now on disk; DeletedSegments since Open.
	Segments, DeletedSegments int
	// Groups with state in the WAL.
	Groups int
}

func (w *WAL) Stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	var live int64
	for _, seg := range w.mu.segs {
		live += seg.live
	}
	return Stats{
		Appends: w.stats.appends.Load(), Syncs: w.stats.syncs.Load(), Bytes: w.stats.bytes.Load(),
		SyncTime:       time.Duration(w.stats.syncNanos.Load()),
		RelocatedBytes: w.stats.relocated.Load(), LiveBytes: live,
		Segments: len(w.mu.segs), DeletedSegments: int(w.stats.deletedSegs.Load()), Groups: len(w.mu.groups),
	}
}

// Close closes the segment files; later calls return ErrClosed. Pending
// writes are fsynced first.
func (w *WAL) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.mu.syncing > 0 {
		w.mu.syncDone.Wait()
	}
	if w.mu.closed {
		return nil
	}
	var err error
	if w.mu.err == nil && len(w.mu.segs) > 0 {
		if serr := fsutil.Fdatasync(w.activeLocked().f); serr != nil {
			err = fmt.Errorf("cannot sync wal segment %s on close: %w", w.activeLocked().f.Name(), serr)
		}
	}
	w.mu.closed = true
	w.closeFiles()
	return err
}

func (w *WAL) closeFiles() {
	for _, s := range w.mu.segs {
		s.f.Close()
	}
}

// Groups lists the groups that have state in the WAL.
func (w *WAL) Groups() []uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Sorted(mapsKeys(w.mu.groups))
}

// DropGroup forgets a group and everything it stored (durably); its
// space is reclaimed once the segments holding it have no other live
// entry. Dropping an unknown group does nothing.
func (w *WAL) DropGroup(group uint64) error {
	w.mu.Lock()
	_, known := w.mu.groups[group]
	w.mu.Unlock()
	if !known {
		return nil
	}
	err := w.writeOne(appendDrop(nil, group), record{kind: kindDrop, group: group}, nil)
	if err != nil {
		return fmt.Errorf("cannot drop raft group %x from the wal: %w", group, err)
	}
	w.mu.Lock()
	w.compactLocked()
	w.mu.Unlock()
	return nil
}
