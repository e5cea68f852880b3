package spool

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
)

// Append writes recs, in order, to the head segment with one write
// system call and returns once they are in the file (the page cache): from
// then on they survive a crash of the process. Frames are encoded before
// the append lock is taken, so concurrent callers encode in parallel and
// only the write itself is serialized. The records of one call are stored
// contiguously (no other call's records come between them). A call whose
// frames exceed what one segment holds is written in several chunks, one
// write and one segment each; then, if a later chunk fails, the earlier
// ones stay stored (a retry duplicates them).
//
// When the spool holds Config.MaxBytes, the Block policy waits for space
// until ctx ends (then the error wraps ErrFull and ctx.Err(); the waiting
// chunk was not written); DropOldest deletes the oldest segments instead
// and never waits. A ctx that ends while Append waits for a concurrent
// Append to finish returns ctx.Err() (wrapped in ErrFull if that one waits
// for space).
//
// A write failure returns an error wrapping ErrDiskFull (ENOSPC) or
// ErrWrite. The failed chunk is then not visible to Read and the file is
// cut back; the spool stays usable. Only if the process crashes before
// that cut can a part of the failed chunk reappear after recovery.
//
// A record whose key and value exceed a segment's room returns ErrTooLarge
// and nothing of the call is written. Append does not retain recs.
func (s *Spool) Append(ctx context.Context, recs []Record) error {
	if len(recs) == 0 {
		return nil
	}
	e := s.encoders.Get().(*encoder)
	defer func() {
		if cap(e.buf) <= 4<<20 {
			s.encoders.Put(e)
		}
	}()
	if err := e.encode(recs, s.maxFrame); err != nil {
		return err
	}

	select {
	case s.wlock <- struct{}{}:
	default:
		select {
		case s.wlock <- struct{}{}:
		case <-s.closing:
			return ErrClosed
		case <-ctx.Done():
			// Waiting for the lock while another Append waits for
			// space is waiting for space too.
			s.mu.Lock()
			full := s.mu.spaceCh != nil
			s.mu.Unlock()
			if full {
				return fmt.Errorf("%w: %w", ErrFull, ctx.Err())
			}
			return ctx.Err()
		}
	}
	defer func() { <-s.wlock }()
	from := 0
	for _, c := range e.chunks {
		if err := s.appendLocked(ctx, e.buf[from:c.end], c.n); err != nil {
			return err
		}
		from = c.end
	}
	return nil
}

// encoder holds the frames of one Append call, cut into chunks that each
// fit into an empty segment.
type encoder struct {
	buf    []byte
	chunks []chunk
}

type chunk struct {
	end int    // offset in buf where the chunk ends
	n   uint64 // records in the chunk
}

func (e *encoder) encode(recs []Record, maxFrame int) error {
	// Size the buffer once: growing it by doubling while appending costs
	// as much again in allocation and copying.
	total := 0
	for i := range recs {
		r := &recs[i]
		fs := frameSize(len(r.Key), len(r.Value))
		if fs > maxFrame {
			return fmt.Errorf("%w: record %d has %d bytes of key and value, a segment holds %d",
				ErrTooLarge, i, len(r.Key)+len(r.Value), maxFrame-frameHeaderSize)
		}
		total += fs
	}
	e.buf, e.chunks = slices.Grow(e.buf[:0], total), e.chunks[:0]
	start, n := 0, uint64(0)
	for i := range recs {
		r := &recs[i]
		fs := frameSize(len(r.Key), len(r.Value))
		if len(e.buf)-start+fs > maxFrame {
			e.chunks = append(e.chunks, chunk{end: len(e.buf), n: n})
			start, n = len(e.buf), 0
		}
		e.buf = appendFrame(e.buf, r)
		n++
	}
	e.chunks = append(e.chunks, chunk{end: len(e.buf), n: n})
	return nil
}

// appendLocked writes the frames b of n records. The caller holds wlock.
func (s *Spool) appendLocked(ctx context.Context, b []byte, n uint64) error {
	head := s.head
	rotate := head.size+int64(len(b)) > s.cfg.SegmentBytes
	need := int64(len(b))
	if rotate {
		need += segHeaderSize
	}
	blocked := false
	for {
		s.mu.Lock()
		if s.mu.closed {
			s.mu.Unlock()
			return ErrClosed
		}
		if s.mu.bytes+need <= s.cfg.MaxBytes {
			s.mu.Unlock()
			break
		}
		if s.cfg.Policy == DropOldest {
			// MaxBytes >= 2*SegmentBytes guarantees that the head and
			// the new frames fit once every sealed segment is gone.
			g, dropped := s.dropOldestLocked()
			s.mu.Unlock()
			if g == nil {
				return fmt.Errorf("%w: nothing left to drop", ErrFull)
			}
			s.log.Warn("spool full; dropping oldest segment", "segment", g.path, "records", dropped)
			s.deleteSegments([]*segment{g})
			continue
		}
		if !blocked {
			blocked = true
			s.mu.stats.BlockedTotal++
		}
		if s.mu.spaceCh == nil {
			s.mu.spaceCh = make(chan struct{})
		}
		ch := s.mu.spaceCh
		s.mu.Unlock()
		select {
		case <-ch:
		case <-s.closing:
			return ErrClosed
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ErrFull, ctx.Err())
		}
	}

	if rotate {
		if err := s.rotate(); err != nil {
			return s.writeFailed(err)
		}
		head = s.head
	}
	if w, err := s.hooks.writeAt(head.f, b, head.size); err != nil {
		if w > 0 {
			// Cut the partial frames off so a crash cannot revive
			// them; if that fails too, the next write overwrites
			// them (it starts at head.size) and Read never looks
			// past the end.
			if terr := head.f.Truncate(head.size); terr != nil {
				s.log.Error("cannot cut failed write off spool segment", "segment", head.path, "err", terr)
			}
		}
		return s.writeFailed(fmt.Errorf("cannot append %d records to segment %q: %w", n, head.path, err))
	}

	s.mu.Lock()
	head.size += int64(len(b))
	s.mu.bytes += int64(len(b))
	s.mu.end.Offset += uint64(len(b))
	s.mu.end.Seq += n
	s.mu.stats.AppendedTotal += n
	recovered := s.mu.failing
	s.mu.failing = false
	if s.mu.dataCh != nil {
		close(s.mu.dataCh)
		s.mu.dataCh = nil
	}
	s.mu.Unlock()
	if recovered {
		s.log.Info("spool writes succeed again")
	}
	return nil
}

// writeFailed counts a failed write and classifies err.
// Only the first failure of a run is logged: a full disk fails every
// call, and the caller counts them.
func (s *Spool) writeFailed(err error) error {
	s.mu.Lock()
	s.mu.stats.WriteErrors++
	first := !s.mu.failing
	s.mu.failing = true
	s.mu.Unlock()
	if first {
		s.log.Error("spool write failed; appends fail until a write succeeds", "err", err)
	}
	if errors.Is(err, syscall.ENOSPC) {
		return fmt.Errorf("%w: %w", ErrDiskFull, err)
	}
	return fmt.Errorf("%w: %w", ErrWrite, err)
}

// rotate seals the head and starts a new segment right after it. The
// caller holds wlock. If the old head is wholly acknowledged it is deleted
// at once. The flusher is kicked to sync and close the sealed file and to
// sync the directory.
func (s *Spool) rotate() error {
	old := s.head
	s.mu.Lock()
	end := s.mu.end
	s.mu.Unlock()
	g, err := s.createSegment(end.Offset, end.Seq)
	if err != nil {
		return err
	}
	s.mu.Lock()
	old.sealed = true
	s.mu.segs = append(s.mu.segs, g)
	s.head = g
	s.mu.bytes += g.size
	s.mu.dirDirty = true
	s.unlockDeleteAcked()
	s.kickFlusher()
	return nil
}

// dropOldestLocked takes the oldest sealed segment out of the list for
// deletion, counts its unacknowledged records as dropped and moves the ack
// cursor past it (the reader follows at its next Read). It returns nil if
// only the head is left.
func (s *Spool) dropOldestLocked() (g *segment, dropped uint64) {
	if len(s.mu.segs) < 2 {
		return nil, 0
	}
	g, next := s.mu.segs[0], s.mu.segs[1]
	if s.mu.ack.Offset < next.base {
		if from := max(s.mu.ack.Seq, g.seq); next.seq > from {
			dropped = next.seq - from
		}
		s.mu.stats.Dropped += dropped
		s.mu.ack = Pos{Offset: next.base, Seq: next.seq}
	}
	s.mu.segs = s.mu.segs[1:]
	return g, dropped
}
