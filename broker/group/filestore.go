package group

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

const (
	logFileName = "groups.log"
	tmpFileName = "groups.log.tmp"
)

// fileStoreOptions are the knobs of a FileStore; tests shrink them.
type fileStoreOptions struct {
	// compactFactor: the log is rewritten as a snapshot once it is larger
	// than compactFactor times the size of a snapshot of its live state.
	compactFactor int64
	// compactMinBytes: logs smaller than this are never rewritten, so a
	// tiny store does not rewrite itself on every few commits.
	compactMinBytes int64
}

var defaultFileStoreOptions = fileStoreOptions{compactFactor: 4, compactMinBytes: 4 << 20}

// FileStore is a Store backed by one append-only log file of checksummed
// records (see codec.go for the format) in a directory.
//
// All writes go through a single writer goroutine, which takes every
// request queued since its last write and appends them with one write
// and at most one fsync: concurrent Commit callers share an fsync (group
// commit) and none waits for more than the fsync of the batch it is in
// plus, at worst, the one in progress when it arrived.
//
// The writer also owns the live state (to rewrite the log when it has
// grown past compactFactor times the state) and the file; other goroutines
// only touch the queue under mu.
type FileStore struct {
	logger *slog.Logger
	dir    string
	path   string
	opts   fileStoreOptions

	// kick wakes the writer; buffered so that a send never blocks and a
	// wake-up sent while the writer is busy is not lost.
	kick chan struct{}
	// done is closed when the writer goroutine has exited.
	done chan struct{}

	mu struct {
		sync.Mutex
		closed bool
		queue  []*fileReq
	}

	// Owned by the writer goroutine once OpenFileStore returns.
	w struct {
		f     *os.File
		size  int64
		state *storeState
		// err is sticky: after a failed write or fsync the file's
		// content past the last good fsync is unknown (and on Linux
		// the failed pages may be dropped from the cache), so no later
		// write can be trusted to be durable. The store refuses
		// everything until it is reopened, which truncates a torn tail.
		err error
		// nextCheck is the file size at which the writer next
		// considers rewriting the log.
		nextCheck int64
		closeErr  error
	}
}

var _ Store = (*FileStore)(nil)

// fileReq is one queued request to the writer.
type fileReq struct {
	rec   *record // nil for a load
	frame []byte
	sync  bool  // the caller needs the record durable before returning
	state State // result of a load
	err   error // result
	done  chan struct{}
}

// OpenFileStore opens (creating if needed) the group store in dir. A torn
// or corrupt tail, as left by a crash mid-append, is truncated with a
// warning; a file that is not a group log at all is an error rather than
// something to overwrite.
func OpenFileStore(dir string, logger *slog.Logger) (*FileStore, error) {
	return openFileStore(dir, logger, defaultFileStoreOptions)
}

func openFileStore(dir string, logger *slog.Logger, opts fileStoreOptions) (*FileStore, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &FileStore{
		logger: logger,
		dir:    dir,
		path:   filepath.Join(dir, logFileName),
		opts:   opts,
		kick:   make(chan struct{}, 1),
		done:   make(chan struct{}),
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create group store dir: %w", err)
	}
	// A leftover temp file is a rewrite that crashed before its rename:
	// the log it was replacing is still complete, so drop it.
	if err := os.Remove(filepath.Join(dir, tmpFileName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("remove stale group store temp file: %w", err)
	}
	data, err := os.ReadFile(s.path)
	missing := errors.Is(err, fs.ErrNotExist)
	if err != nil && !missing {
		return nil, fmt.Errorf("read group log: %w", err)
	}
	scan, err := scanLog(data)
	if err != nil {
		return nil, fmt.Errorf("open group log %s: %w", s.path, err)
	}
	s.w.state = scan.state

	if missing || scan.needMagic {
		// Create the file through the same temp+rename path as a
		// rewrite, so that a crash never leaves a file without magic
		// that a later open would have to guess about.
		f, size, err := s.writeSnapshotFile(nil)
		if err != nil {
			if f != nil {
				f.Close()
			}
			return nil, fmt.Errorf("create group log: %w", err)
		}
		s.w.f, s.w.size = f, size
	} else {
		f, err := os.OpenFile(s.path, os.O_RDWR, 0)
		if err != nil {
			return nil, fmt.Errorf("open group log: %w", err)
		}
		if scan.valid < len(data) {
			logger.Warn("truncating damaged group log tail",
				"path", s.path,
				"valid_bytes", scan.valid,
				"dropped_bytes", len(data)-scan.valid,
				"records", scan.records,
				"reason", scan.tailErr)
			if err := f.Truncate(int64(scan.valid)); err != nil {
				f.Close()
				return nil, fmt.Errorf("truncate group log: %w", err)
			}
			if err := f.Sync(); err != nil {
				f.Close()
				return nil, fmt.Errorf("sync truncated group log: %w", err)
			}
		}
		if _, err := f.Seek(int64(scan.valid), io.SeekStart); err != nil {
			f.Close()
			return nil, fmt.Errorf("seek group log: %w", err)
		}
		s.w.f, s.w.size = f, int64(scan.valid)
	}
	s.w.nextCheck = max(s.opts.compactMinBytes, s.w.size+1)
	logger.Info("group store opened", "path", s.path, "bytes", s.w.size,
		"groups", len(s.w.state.groups), "records", scan.records)
	go s.run()
	return s, nil
}

// Commit implements Store. It returns once the offsets are fsynced.
func (s *FileStore) Commit(group string, offsets []CommittedOffset) error {
	return s.write(&record{kind: recCommit, group: group, offsets: slices.Clone(offsets)}, true)
}

// DeleteOffsets implements Store. It returns once the deletion is fsynced.
func (s *FileStore) DeleteOffsets(group string, tps []TopicPartition) error {
	return s.write(&record{kind: recDeleteOffsets, group: group, tps: slices.Clone(tps)}, true)
}

// DeleteGroup implements Store. It returns once the deletion is fsynced.
func (s *FileStore) DeleteGroup(group string) error {
	return s.write(&record{kind: recDeleteGroup, group: group}, true)
}

// SaveGroup implements Store. It returns once the record is written but
// does not wait for an fsync of its own: the next Commit's fsync, or
// Close, makes it durable.
func (s *FileStore) SaveGroup(meta GroupMeta) error {
	return s.write(&record{kind: recSaveGroup, group: meta.Group, meta: cloneMeta(meta)}, false)
}

// Load implements Store.
func (s *FileStore) Load() (State, error) {
	r := &fileReq{done: make(chan struct{})}
	if err := s.submit(r); err != nil {
		return State{}, err
	}
	<-r.done
	return r.state, r.err
}

func (s *FileStore) write(rec *record, sync bool) error {
	// Encode in the caller's goroutine: encoding is the only per-record
	// CPU work, and doing it here keeps the writer's critical path to
	// write+fsync.
	r := &fileReq{rec: rec, frame: appendFrame(nil, rec), sync: sync, done: make(chan struct{})}
	if len(r.frame)-frameHeaderLen > maxRecordLen {
		return fmt.Errorf("group store record of %d bytes exceeds the %d byte limit", len(r.frame), maxRecordLen)
	}
	if err := s.submit(r); err != nil {
		return err
	}
	<-r.done
	return r.err
}

func (s *FileStore) submit(r *fileReq) error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return ErrStoreClosed
	}
	s.mu.queue = append(s.mu.queue, r)
	s.mu.Unlock()
	// Sent after the enqueue: either the writer has not yet looked at
	// the queue and will see r, or it is about to block on kick and this
	// send (buffered) wakes it.
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return nil
}

// Close implements Store: it waits for every request queued before it,
// fsyncs and closes the file.
func (s *FileStore) Close() error {
	s.mu.Lock()
	already := s.mu.closed
	s.mu.closed = true
	s.mu.Unlock()
	if !already {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	<-s.done
	// done is closed after the writer's last write to w.closeErr, so
	// reading it here is ordered after that write.
	return s.w.closeErr
}

// run is the writer goroutine.
func (s *FileStore) run() {
	defer close(s.done)
	for {
		s.mu.Lock()
		batch := s.mu.queue
		s.mu.queue = nil
		closed := s.mu.closed
		s.mu.Unlock()
		if len(batch) > 0 {
			s.process(batch)
			// Look at the queue again before sleeping or exiting:
			// requests that arrived during the fsync form the next
			// batch right away.
			continue
		}
		if closed {
			// closed is set before the final kick and no request is
			// queued after it, so the queue is drained for good.
			s.w.closeErr = s.finish()
			return
		}
		<-s.kick
	}
}

func (s *FileStore) process(batch []*fileReq) {
	var buf []byte
	needSync := false
	var writes, loads []*fileReq
	for _, r := range batch {
		if r.rec == nil {
			loads = append(loads, r)
			continue
		}
		writes = append(writes, r)
		buf = append(buf, r.frame...)
		needSync = needSync || r.sync
	}
	err := s.w.err
	if err == nil && len(writes) > 0 {
		err = s.appendToLog(buf, needSync)
	}
	for _, r := range writes {
		if err == nil {
			s.w.state.apply(r.rec)
		}
		r.err = err
		close(r.done)
	}
	// Loads are answered after the writes of the same batch: a Load
	// queued after a write sees it, one queued before may see it too,
	// which is harmless.
	for _, r := range loads {
		r.state = s.w.state.snapshot()
		close(r.done)
	}
	if err == nil && len(writes) > 0 {
		s.maybeRewrite()
	}
}

// appendToLog writes buf at the end of the log and fsyncs it if asked.
// Writer goroutine only.
func (s *FileStore) appendToLog(buf []byte, sync bool) error {
	if _, err := s.w.f.Write(buf); err != nil {
		s.w.err = fmt.Errorf("write group log: %w", err)
		s.logger.Error("group store failed, refusing further writes", "path", s.path, "err", err)
		return s.w.err
	}
	s.w.size += int64(len(buf))
	if sync {
		if err := s.w.f.Sync(); err != nil {
			s.w.err = fmt.Errorf("sync group log: %w", err)
			s.logger.Error("group store failed, refusing further writes", "path", s.path, "err", err)
			return s.w.err
		}
	}
	return nil
}

// maybeRewrite replaces the log with a snapshot of the live state once the
// log has grown past compactFactor times that snapshot. Checking needs a
// snapshot, which costs as much as the state, so it is only done when the
// log crosses nextCheck, itself moved to compactFactor times the live size
// after each check: the amortized cost per appended byte stays constant.
func (s *FileStore) maybeRewrite() {
	if s.w.size < s.w.nextCheck {
		return
	}
	recs := s.w.state.records()
	live := int64(len(fileMagic))
	for i := range recs {
		live += int64(len(appendFrame(nil, &recs[i])))
	}
	if s.w.size <= s.opts.compactFactor*live {
		s.w.nextCheck = max(s.opts.compactMinBytes, s.opts.compactFactor*live+1)
		return
	}
	f, size, err := s.writeSnapshotFile(recs)
	if err != nil {
		if f != nil {
			// The rename happened but its directory entry may not be
			// durable: a crash could bring back the old file, without
			// what we would append to the new one.
			s.w.f.Close()
			s.w.f = f
			s.w.err = fmt.Errorf("rewrite group log: %w", err)
			s.logger.Error("group store failed, refusing further writes", "path", s.path, "err", err)
			return
		}
		// Nothing changed on disk that matters; keep appending to the
		// old log and try again after it has grown some more.
		s.logger.Warn("group log rewrite failed, keeping the old log", "path", s.path, "err", err)
		s.w.nextCheck = s.w.size + s.opts.compactMinBytes
		return
	}
	old := s.w.size
	if err := s.w.f.Close(); err != nil {
		s.logger.Warn("close replaced group log", "path", s.path, "err", err)
	}
	s.w.f, s.w.size = f, size
	s.w.nextCheck = max(s.opts.compactMinBytes, s.opts.compactFactor*size+1)
	s.logger.Info("group log rewritten", "path", s.path, "old_bytes", old, "new_bytes", size)
}

// writeSnapshotFile writes magic + recs to the temp file, fsyncs it,
// renames it over the log and fsyncs the directory, returning the new file
// positioned at its end. If the rename succeeded but a later step failed,
// it returns the file and the error; if it fails before the rename it
// returns no file and the old log is untouched.
func (s *FileStore) writeSnapshotFile(recs []record) (*os.File, int64, error) {
	buf := []byte(fileMagic)
	for i := range recs {
		buf = appendFrame(buf, &recs[i])
	}
	tmp := filepath.Join(s.dir, tmpFileName)
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, 0, fmt.Errorf("create temp group log: %w", err)
	}
	fail := func(err error) (*os.File, int64, error) {
		f.Close()
		os.Remove(tmp)
		return nil, 0, err
	}
	if _, err := f.Write(buf); err != nil {
		return fail(fmt.Errorf("write temp group log: %w", err))
	}
	if err := f.Sync(); err != nil {
		return fail(fmt.Errorf("sync temp group log: %w", err))
	}
	if err := os.Rename(tmp, s.path); err != nil {
		return fail(fmt.Errorf("rename temp group log: %w", err))
	}
	if err := syncDir(s.dir); err != nil {
		return f, int64(len(buf)), err
	}
	return f, int64(len(buf)), nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open group store dir: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync group store dir: %w", err)
	}
	return nil
}

// finish runs in the writer when it exits: it makes SaveGroup records
// written without fsync durable and closes the file.
func (s *FileStore) finish() error {
	var errs []error
	if s.w.err == nil {
		if err := s.w.f.Sync(); err != nil {
			errs = append(errs, fmt.Errorf("sync group log: %w", err))
		}
	}
	if err := s.w.f.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close group log: %w", err))
	}
	return errors.Join(errs...)
}
