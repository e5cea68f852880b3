package spool

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Errors returned by the Spool. Write failures wrap the underlying error
// as well (errors.Is(err, syscall.ENOSPC) works too).
var (
	// ErrClosed is returned by every method called during or after Close.
	ErrClosed = errors.New("spool closed")
	// ErrTooLarge is returned by Append when a record does not fit into
	// an empty segment. Nothing of the call was written.
	ErrTooLarge = errors.New("spool: records too large for a segment")
	// ErrFull is returned by Append with the Block policy when its context
	// ends while it waits for space; it wraps the context's error too.
	// The waiting records were not written.
	ErrFull = errors.New("spool full")
	// ErrDiskFull is returned by Append when the file system reported
	// ENOSPC. The failed write is not visible to Read; the spool stays
	// consistent and a later Append may succeed.
	ErrDiskFull = errors.New("spool: disk full")
	// ErrWrite is returned by Append for any other write failure, with the
	// same guarantees as ErrDiskFull.
	ErrWrite = errors.New("spool: write failed")
	// ErrBadPos is returned by Ack for a position beyond the appended data.
	ErrBadPos = errors.New("spool: position beyond the end")
	// ErrLocked is returned by Open when another process holds the
	// directory.
	ErrLocked = errors.New("spool: directory in use by another process")
)

// Record is one spooled record.
type Record struct {
	Key   []byte
	Value []byte
	Time  int64 // unix nanoseconds
}

// Pos is a position in the spool's record stream: the point right after
// some record. Offset counts record bytes (frames, not segment headers)
// since the spool directory was created; Seq counts records. Both grow
// across restarts too.
type Pos struct {
	Offset uint64
	Seq    uint64
}

// Stats is a snapshot of a Spool's counters. Counters ending in Total, and
// Dropped, CorruptBytes, WriteErrors and SyncErrors, count since Open.
type Stats struct {
	Bytes    int64  // bytes of all segment files, headers included
	Segments int    // segment files, the head included
	Pending  uint64 // records appended and not yet acknowledged (or dropped)
	// PendingBytes is the size of the pending records' frames.
	PendingBytes uint64
	// Dropped counts unacknowledged records deleted by DropOldest. Some may
	// have been read (and delivered) before their segment was deleted.
	Dropped uint64
	// CorruptBytes counts bytes skipped because they failed their checks:
	// torn tails truncated by Open, unreadable segments, bad frames met by
	// Read in sealed segments.
	CorruptBytes  uint64
	AppendedTotal uint64 // records appended
	AckedTotal    uint64 // records acknowledged by Ack
	BlockedTotal  uint64 // Append calls that had to wait for space
	WriteErrors   uint64 // failed Append writes (e.g. ENOSPC)
	SyncErrors    uint64 // failed fdatasync / cursor writes
	// DataSyncs counts fdatasyncs of segment files: ticks that found
	// records unacknowledged for a SyncInterval, and Close.
	DataSyncs uint64
}

// Spool is a bounded, crash-safe, disk-backed FIFO of records. Append may
// be called from many goroutines; Read, Ack and Rewind are meant for one
// consumer (they are safe to call concurrently but share one reader
// cursor). See the package documentation for the contract.
type Spool struct {
	cfg      Config
	dir      string
	log      *slog.Logger
	hooks    hooks
	maxFrame int // largest frame, and largest batch, one segment holds
	lockFile *os.File

	// wlock is the append lock, a channel so that waiting for it honours
	// the caller's context. It serializes Append, segment rotation and
	// DropOldest deletions. Close takes it and never gives it back.
	wlock   chan struct{}
	closing chan struct{} // closed when Close starts: wakes every waiter

	// head is the segment being appended to. Written under wlock and mu,
	// read under either.
	head *segment

	encoders sync.Pool // *encoder: frame buffers for Append

	// trustFrom is the base of the head segment at Open: recovery checked
	// its frames, and every later frame was written by this process
	// (a failed write is never published). Read checks the CRCs of the
	// segments before it only. Set by Open.
	trustFrom uint64

	// readMu serializes the consumer's calls (Read, Ack, Rewind) and
	// guards rd. Read releases it while it waits for data.
	readMu sync.Mutex
	rd     struct {
		pos   Pos      // next record to return
		f     *os.File // open segment for reading (the reader's own fd)
		fbase uint64   // base of the segment f belongs to
		// batches handed out by Read and not yet released by Ack, oldest
		// first, and released ones ready for reuse.
		out  []*batch
		free []*batch
	}

	ckptMu sync.Mutex // serializes checkpoint writers (flusher, Close, tests) and guards cur
	// cur is the cursor file, open for in-place writes after the first
	// checkpoint of this life; dirty means written since its last sync.
	cur struct {
		f     *os.File
		dirty bool
	}

	kick chan struct{} // wakes the flusher (capacity 1)
	// ckptKick asks the flusher to write the cursor once
	// CheckpointInterval has passed since the last write (capacity 1).
	ckptKick chan struct{}
	stop     chan struct{} // closed by Close to stop the flusher
	done     chan struct{} // closed by the flusher when it exits

	// syncMark is the end of the appended records at the flusher's
	// previous tick (flusher only; see flush).
	syncMark uint64

	closeOnce sync.Once
	closeErr  error

	mu struct {
		sync.Mutex
		segs []*segment // ordered by base; the last one is the head
		end  Pos        // end of the appended records
		ack  Pos        // acknowledged up to here
		ckpt Pos        // last persisted cursor
		// ckptAt is when the cursor was last written; ckptArmed means
		// the flusher holds a timer to write it (checkpointAfterAck).
		ckptAt    time.Time
		ckptArmed bool
		bytes     int64 // bytes of all segment files
		closed    bool
		dataCh    chan struct{} // made by a waiting reader, closed by Append
		spaceCh   chan struct{} // made by a waiting appender, closed on delete
		// retired segments were deleted; the flusher closes their write fd.
		retired  []*segment
		dirDirty bool // a segment file was created or removed since the last dir fsync
		failing  bool // the last write failed (for logging transitions only)
		stats    Stats
	}
}

// segment is one segment file. base and seq never change. size changes
// under wlock and mu (head only). f is the write fd: it stays open while
// the segment is the head and, once sealed, until the flusher has synced
// and closed it; only the flusher (or Open/Close, when the flusher is not
// running) closes it.
type segment struct {
	base   uint64 // stream offset of the first record byte
	seq    uint64 // records before this segment
	path   string
	size   int64 // file bytes, header included
	sealed bool  // no longer the head (under mu)

	f      *os.File
	synced int64 // bytes of the head known durable; flusher only
}

// payload returns the number of record bytes in the file.
func (g *segment) payload() uint64 { return uint64(g.size - segHeaderSize) }

// Open opens the spool in cfg.Dir, creating it if needed, and recovers it
// after a crash: it drops invalid segment files, scans the head segment
// frame by frame and truncates a torn or corrupt tail, and resumes from
// the persisted ack cursor. Read starts at that cursor.
func Open(cfg Config) (*Spool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("cannot create spool directory %q: %w", cfg.Dir, err)
	}
	lf, err := lockDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	s := &Spool{
		cfg:      cfg,
		dir:      cfg.Dir,
		log:      cfg.Logger,
		hooks:    *cfg.hooks,
		maxFrame: int(cfg.SegmentBytes - segHeaderSize),
		lockFile: lf,
		wlock:    make(chan struct{}, 1),
		closing:  make(chan struct{}),
		kick:     make(chan struct{}, 1),
		ckptKick: make(chan struct{}, 1),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	s.encoders.New = func() any { return &encoder{buf: make([]byte, 0, 64<<10)} }
	// The first checkpoint comes CheckpointInterval after Open at the
	// earliest, like every later one.
	s.mu.ckptAt = time.Now()
	if err := s.recover(); err != nil {
		s.mu.Lock()
		for _, g := range s.mu.segs {
			if g.f != nil {
				g.f.Close()
			}
		}
		s.mu.Unlock()
		lf.Close()
		return nil, err
	}
	go s.flushLoop()
	return s, nil
}

func lockDir(dir string) (*os.File, error) {
	p := filepath.Join(dir, lockName)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cannot open spool lock file %q: %w", p, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %q", ErrLocked, dir)
		}
		return nil, fmt.Errorf("cannot lock spool directory %q: %w", dir, err)
	}
	return f, nil
}

// Stats returns a snapshot of the spool's counters.
func (s *Spool) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.mu.stats
	st.Bytes = s.mu.bytes
	st.Segments = len(s.mu.segs)
	st.Pending = s.mu.end.Seq - s.mu.ack.Seq
	st.PendingBytes = s.mu.end.Offset - s.mu.ack.Offset
	return st
}

// AppendedAfter returns how many records were appended after pos (a
// position returned by Read): 0 means a Read from there would wait.
func (s *Spool) AppendedAfter(pos Pos) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.end.Seq <= pos.Seq {
		return 0
	}
	return s.mu.end.Seq - pos.Seq
}

// Close stops the flusher, syncs every segment (unless SyncInterval is
// NoSync), persists the ack cursor and closes the files. Appends and Reads waiting are woken and return
// ErrClosed; an Append in progress finishes first. Close is idempotent.
// Records returned by Read stay valid after Close.
func (s *Spool) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.close() })
	return s.closeErr
}

func (s *Spool) close() error {
	close(s.closing)
	s.wlock <- struct{}{} // held forever: no Append after this
	s.readMu.Lock()
	defer s.readMu.Unlock()
	s.mu.Lock()
	s.mu.closed = true
	s.mu.Unlock()

	close(s.stop)
	<-s.done

	var errs []error
	if _, err := s.flush(flushAll); err != nil {
		errs = append(errs, err)
	}
	if err := s.checkpoint(); err != nil {
		errs = append(errs, err)
	}
	s.ckptMu.Lock()
	if err := s.closeCursor(); err != nil {
		errs = append(errs, err)
	}
	s.ckptMu.Unlock()
	s.mu.Lock()
	for _, g := range s.mu.segs {
		if g.f != nil {
			if err := g.f.Close(); err != nil {
				errs = append(errs, fmt.Errorf("cannot close segment %q: %w", g.path, err))
			}
			g.f = nil
		}
	}
	s.mu.Unlock()
	if s.rd.f != nil {
		s.rd.f.Close()
		s.rd.f = nil
	}
	s.lockFile.Close()
	return errors.Join(errs...)
}

// kickFlusher wakes the flusher without waiting.
func (s *Spool) kickFlusher() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// unlockDeleteAcked takes the segments acknowledged whole out of the
// spool, releases s.mu, and then deletes their files, which needs no lock.
// It returns how many segments it deleted.
func (s *Spool) unlockDeleteAcked() int {
	dead := s.takeAckedLocked()
	s.mu.Unlock()
	s.deleteSegments(dead)
	return len(dead)
}

// takeAckedLocked removes from the segment list the sealed segments whose
// every record is acknowledged, and returns them for deleteSegments.
func (s *Spool) takeAckedLocked() []*segment {
	var dead []*segment
	for len(s.mu.segs) > 1 && s.mu.segs[1].base <= s.mu.ack.Offset {
		dead = append(dead, s.mu.segs[0])
		s.mu.segs = s.mu.segs[1:]
	}
	return dead
}

// deleteSegments unlinks segments already taken out of the segment list,
// then releases their bytes and wakes appenders waiting for space. The
// write fds are left to the flusher. An unlink failure is logged; the
// file is then deleted by the next Open (it is wholly acknowledged or
// dropped, so the cursor is past it).
func (s *Spool) deleteSegments(dead []*segment) {
	if len(dead) == 0 {
		return
	}
	for _, g := range dead {
		if err := os.Remove(g.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.log.Error("cannot delete spool segment", "segment", g.path, "err", err)
		}
	}
	s.mu.Lock()
	for _, g := range dead {
		s.mu.bytes -= g.size
	}
	s.mu.retired = append(s.mu.retired, dead...)
	s.mu.dirDirty = true
	if s.mu.spaceCh != nil {
		close(s.mu.spaceCh)
		s.mu.spaceCh = nil
	}
	s.mu.Unlock()
	s.kickFlusher()
}
