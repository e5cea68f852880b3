package storage

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/simtel/simtel/internal/fsutil"
)

// Open opens (creating if needed) the partition log in cfg.Dir and
// recovers it: segments with trustworthy index files are checked cheaply,
// every other segment (always the tail, which may have been torn by a
// crash) is scanned batch by batch with CRC checks. At the first invalid
// batch the segment is truncated there and all later segments are removed.
func Open(cfg Config) (*Log, error) {
	c := cfg.withDefaults()
	if c.Dir == "" {
		return nil, errors.New("cannot open log: empty directory")
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("cannot create log directory %q: %w", c.Dir, err)
	}
	l := &Log{
		dir:      c.Dir,
		logger:   c.Logger,
		now:      c.Now,
		syncFile: syncFileData,
		kick:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	l.cfg.Store(&c)
	l.hdrBufs.New = func() any { b := make([]byte, headerWindow); return &b }
	l.mu.flushed = make(chan struct{})
	l.maint.cleaned = map[int64]cleanState{}
	l.mu.txn = newTxnIndex()

	// A log that fails to open lets go of the segment files it opened.
	release := func() {
		l.mu.Lock()
		for _, s := range l.mu.segs {
			s.file.release()
		}
		l.mu.segs = nil
		l.mu.Unlock()
	}
	if err := l.load(); err != nil {
		release()
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(c.Dir, txnMarkFile)); err == nil {
		l.hasTxn.Store(true)
	}
	if err := l.rebuildTxnIndex(); err != nil {
		release()
		return nil, fmt.Errorf("cannot rebuild transaction index of %q: %w", c.Dir, err)
	}
	go l.flushLoop()
	return l, nil
}

// load reads the directory and builds the segment list. It runs before
// any other goroutine can see the Log, but takes the locks anyway so the
// helpers it shares with the running log keep their contracts.
func (l *Log) load() error {
	cfg := l.config()
	entries, err := os.ReadDir(l.dir)
	if err != nil {
		return fmt.Errorf("cannot read log directory %q: %w", l.dir, err)
	}
	var bases []int64
	// changed: this open removed or created a file, so the directory
	// needs an fsync even when the caller made it durable (cfg.Durable).
	changed := false
	for _, e := range entries {
		name := e.Name()
		if base, ok := parseSegmentName(name); ok && e.Type().IsRegular() {
			bases = append(bases, base)
			continue
		}
		if strings.HasSuffix(name, cleanedSuffix) || strings.HasSuffix(name, tmpSuffix) {
			// Leftover of an interrupted compaction or atomic write;
			// the file it was meant to replace is still intact.
			l.logger.Info("removing leftover temporary file", "file", name)
			if err := removeIfExists(filepath.Join(l.dir, name)); err != nil {
				return err
			}
			changed = true
		}
	}
	slices.Sort(bases)

	ckStart, err := l.readStartCheckpoint()
	if err != nil {
		return err
	}

	now := l.now()
	var segs []*segment
	buf := make([]byte, headerWindow)
	for i := 0; i < len(bases); i++ {
		base := bases[i]
		upper := int64(math.MaxInt64)
		if i+1 < len(bases) {
			upper = bases[i+1]
		}
		tail := i == len(bases)-1
		seg, truncated, err := l.loadSegment(base, upper, tail, int64(cfg.IndexIntervalBytes), buf, &changed)
		if err != nil {
			for _, s := range segs {
				s.file.release()
			}
			return err
		}
		segs = append(segs, seg)
		if truncated && !tail {
			for _, later := range bases[i+1:] {
				p := segmentPath(l.dir, later)
				l.logger.Warn("removing segment after corruption", "segment", filepath.Base(p))
				changed = true
				if err := removeSegmentFiles(p); err != nil {
					for _, s := range segs {
						s.file.release()
					}
					return err
				}
			}
			break
		}
	}
	if len(segs) == 0 {
		base := max(ckStart, 0)
		path := segmentPath(l.dir, base)
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return fmt.Errorf("cannot create segment %q: %w", path, err)
		}
		changed = true
		segs = append(segs, &segment{base: base, path: path, file: newSegFile(f), next: base, idx: newSegIndex()})
	}
	tail := segs[len(segs)-1]
	tail.rollBase = now
	removed, err := l.removeOrphanIndexes(segs)
	if err != nil {
		for _, s := range segs {
			s.file.release()
		}
		return err
	}
	if changed || removed || !cfg.Durable {
		if err := fsutil.SyncDir(l.dir); err != nil {
			for _, s := range segs {
				s.file.release()
			}
			return err
		}
	}

	l.mu.Lock()
	l.mu.segs = segs
	l.mu.end = tail.next
	l.mu.synced = tail.next
	l.mu.start = min(max(ckStart, segs[0].base), tail.next)
	l.mu.Unlock()

	l.maint.Lock()
	defer l.maint.Unlock()
	if err := l.loadCleanerCheckpointLocked(); err != nil {
		return err
	}
	// Segments recovered by scanning are synced now; give them index
	// files so the next Open is fast.
	if err := l.persistIndexesLocked(); err != nil {
		l.logger.Warn("cannot persist segment index", "err", err)
	}
	return nil
}

// loadSegment opens one segment. A non-tail segment with consistent index
// files is trusted (those files are only written once the segment was
// closed and fully synced); anything else is scanned and, if damaged,
// truncated at the first bad batch. The result is synced to disk.
func (l *Log) loadSegment(base, upper int64, tail bool, interval int64, buf []byte, changed *bool) (*segment, bool, error) {
	path := segmentPath(l.dir, base)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, false, fmt.Errorf("cannot open segment %q: %w", path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, false, fmt.Errorf("cannot stat segment %q: %w", path, err)
	}
	size := fi.Size()
	seg := &segment{base: base, path: path, file: newSegFile(f), idx: newSegIndex()}
	if !tail {
		idx, next, err := loadIndexFiles(seg, f, size, upper, buf)
		if err == nil {
			seg.idx, seg.next, seg.size, seg.synced, seg.indexOnDisk = idx, next, size, size, true
			return seg, false, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			l.logger.Info("rebuilding segment index", "segment", filepath.Base(path), "reason", err)
		}
	}
	for _, p := range []string{seg.indexPath(), seg.timeIndexPath()} {
		removed, err := removeExisting(p)
		if err != nil {
			seg.file.release()
			return nil, false, err
		}
		*changed = *changed || removed
	}
	res, err := recoverScan(f, base, upper, size, interval)
	if err != nil {
		seg.file.release()
		return nil, false, fmt.Errorf("cannot recover segment %q: %w", path, err)
	}
	seg.idx, seg.next, seg.size = res.idx, res.next, res.end
	truncated := false
	if res.end < size {
		truncated = true
		l.logger.Warn("truncating damaged segment",
			"segment", filepath.Base(path), "position", res.end, "dropped_bytes", size-res.end,
			"valid_batches", res.count, "reason", res.bad)
		if err := f.Truncate(res.end); err != nil {
			seg.file.release()
			return nil, false, fmt.Errorf("cannot truncate segment %q: %w", path, err)
		}
	}
	// The data may only have been in the page cache of a crashed process:
	// make it durable before SyncedOffset claims it (done already if the
	// caller synced the file system and nothing was truncated).
	if truncated || !l.config().Durable {
		l.fsyncs.Add(1)
		if err := l.syncFile(f); err != nil {
			seg.file.release()
			return nil, false, fmt.Errorf("cannot fsync segment %q: %w", path, err)
		}
	}
	seg.synced = seg.size
	return seg, truncated, nil
}

// loadIndexFiles reads and validates a segment's persisted indexes. On top
// of the internal checks in decodeIndexes it verifies that the first and
// last index points hold the batches they claim and walks the headers
// after the last index point to the end of the file, which yields the
// segment's next offset and max timestamp.
func loadIndexFiles(seg *segment, f *os.File, size, upper int64, buf []byte) (segIndex, int64, error) {
	readSmall := func(p string, limit int64) ([]byte, error) {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if fi.Size() > limit {
			return nil, fmt.Errorf("index file %q too large (%d bytes)", filepath.Base(p), fi.Size())
		}
		return os.ReadFile(p)
	}
	maxEntries := size/batchHeaderSize + 1
	offs, err := readSmall(seg.indexPath(), maxEntries*offsetEntrySize)
	if err != nil {
		return segIndex{}, 0, err
	}
	times, err := readSmall(seg.timeIndexPath(), maxEntries*timeEntrySize)
	if err != nil {
		return segIndex{}, 0, err
	}
	idx, err := decodeIndexes(offs, times, size)
	if err != nil {
		return segIndex{}, 0, err
	}
	if len(idx.offsets) > 0 {
		hr := newHeaderReader(f, size, buf)
		e := idx.offsets[0]
		h, err := hr.at(int64(e.pos))
		if err != nil {
			return segIndex{}, 0, err
		}
		if h.BaseOffset != seg.base+int64(e.rel) {
			return segIndex{}, 0, fmt.Errorf("first index point holds offset %d, want %d", h.BaseOffset, seg.base+int64(e.rel))
		}
	}
	next, err := resumeIndex(f, seg.base, &idx, size, buf)
	if err != nil {
		return segIndex{}, 0, err
	}
	if next > upper {
		return segIndex{}, 0, fmt.Errorf("segment reaches offset %d past next segment %d", next, upper)
	}
	return idx, next, nil
}

// removeSegmentFiles deletes a segment's index files, then its log file,
// so that a crash in between leaves a log without index (rebuilt at Open)
// rather than an index without log.
func removeSegmentFiles(logPath string) error {
	stem := trimLog(logPath)
	if err := removeIfExists(stem + indexSuffix); err != nil {
		return err
	}
	if err := removeIfExists(stem + timeIndexSuffix); err != nil {
		return err
	}
	return removeIfExists(logPath)
}

// removeOrphanIndexes deletes index files without a segment, which a
// crash during segment deletion can leave behind; removed: it deleted one.
func (l *Log) removeOrphanIndexes(segs []*segment) (removed bool, err error) {
	entries, err := os.ReadDir(l.dir)
	if err != nil {
		return false, fmt.Errorf("cannot read log directory %q: %w", l.dir, err)
	}
	have := make(map[string]bool, len(segs))
	for _, s := range segs {
		have[trimLog(filepath.Base(s.path))] = true
	}
	for _, e := range entries {
		name := e.Name()
		stem, ok := strings.CutSuffix(name, indexSuffix)
		if !ok {
			stem, ok = strings.CutSuffix(name, timeIndexSuffix)
		}
		if !ok || len(stem) != 20 || have[stem] {
			continue
		}
		if _, err := strconv.ParseUint(stem, 10, 64); err != nil {
			continue
		}
		if err := removeIfExists(filepath.Join(l.dir, name)); err != nil {
			return removed, err
		}
		removed = true
	}
	return removed, nil
}

// readStartCheckpoint returns the persisted log start offset, or -1.
func (l *Log) readStartCheckpoint() (int64, error) {
	p := filepath.Join(l.dir, logStartFile)
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return -1, nil
	}
	if err != nil {
		return 0, fmt.Errorf("cannot read %q: %w", p, err)
	}
	v, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil || v < 0 {
		// Written atomically, so this is outside interference; losing it
		// only means deleted records may be readable again.
		l.logger.Warn("ignoring invalid log start offset checkpoint", "content", string(b))
		return -1, nil
	}
	return v, nil
}

func (l *Log) writeStartCheckpoint(v int64) error {
	p := filepath.Join(l.dir, logStartFile)
	if err := fsutil.WriteFile(p, []byte(strconv.FormatInt(v, 10)+"\n"), fsutil.WriteOptions{SyncDir: true}); err != nil {
		return fmt.Errorf("cannot write log start offset checkpoint: %w", err)
	}
	return nil
}
