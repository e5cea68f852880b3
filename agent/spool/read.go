package spool

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
)

// DefaultReadBytes is Read's byte budget when maxBytes <= 0.
const DefaultReadBytes = 1 << 20

const (
	maxOutstanding = 1024 // batches tracked for reuse; older ones go to the GC
	// maxFreeBatches released batches are kept for reuse: as many as a
	// consumer typically has in flight (the agent's shipper: 8), so a
	// burst of Acks does not drop buffers that the next Reads allocate
	// again.
	maxFreeBatches = 8
)

// batch is the memory behind the records of one Read: they alias buf.
type batch struct {
	buf  []byte
	recs []Record
	end  Pos
}

// Read returns up to maxRecords records (<= 0: no limit) totalling at most
// maxBytes of frames (<= 0: DefaultReadBytes; at least one record is
// returned even if it alone is larger), starting at the read cursor, and
// the position right after the last one. It waits until at least one
// record is available, ctx ends (ctx.Err() is returned) or the spool is
// closed (ErrClosed). One call returns records of one segment only.
//
// The records alias an internal buffer that is reused once an Ack covers
// the batch: Key and Value stay valid until Ack(p) with p at or after the
// returned position returns (or forever if no Ack comes). Copy them to
// keep them longer.
//
// The CRCs of frames written before Open, outside the head that Open
// scanned, are checked. A corrupt frame in a sealed segment (or a
// segment file cut short by a power loss) makes Read skip the rest of
// that segment, log it and count the bytes in Stats.CorruptBytes; it
// never returns garbage.
func (s *Spool) Read(ctx context.Context, maxRecords, maxBytes int) ([]Record, Pos, error) {
	if maxRecords <= 0 {
		maxRecords = math.MaxInt
	}
	if maxBytes <= 0 {
		maxBytes = DefaultReadBytes
	}
	s.readMu.Lock()
	defer s.readMu.Unlock()
	for {
		v, err := s.waitReadable(ctx)
		if err != nil {
			return nil, Pos{}, err
		}
		recs, end, err := s.readFrom(v, maxRecords, maxBytes)
		if err != nil || len(recs) > 0 {
			return recs, end, err
		}
		// Nothing returned: the reader skipped damaged data. Look again.
	}
}

// readView is what Read needs of the segment at the read cursor, captured
// under mu.
type readView struct {
	base   uint64
	path   string
	limit  uint64 // stream offset where readable data of the segment ends
	next   Pos    // where the reader goes after limit
	sealed bool
}

// waitReadable waits until a record is available at the read cursor and
// returns its segment. The caller holds readMu; it is released while
// waiting and held again on return.
func (s *Spool) waitReadable(ctx context.Context) (readView, error) {
	for {
		s.mu.Lock()
		if s.mu.closed {
			s.mu.Unlock()
			return readView{}, ErrClosed
		}
		if s.rd.pos.Offset < s.mu.ack.Offset {
			// Ack or DropOldest moved past the reader.
			s.rd.pos = s.mu.ack
		}
		if pos := s.rd.pos; pos.Offset < s.mu.end.Offset {
			segs := s.mu.segs
			i := sort.Search(len(segs), func(i int) bool { return segs[i].base > pos.Offset }) - 1
			if i < 0 {
				// Cannot happen: segs[0].base <= ack <= pos.
				s.rd.pos = Pos{Offset: segs[0].base, Seq: segs[0].seq}
				s.mu.Unlock()
				continue
			}
			g := segs[i]
			v := readView{base: g.base, path: g.path}
			if i+1 < len(segs) {
				next := segs[i+1]
				v.sealed = true
				v.next = Pos{Offset: next.base, Seq: next.seq}
				v.limit = min(next.base, g.base+g.payload())
				if pos.Offset >= v.limit {
					missing := next.base - pos.Offset
					s.mu.stats.CorruptBytes += missing
					s.rd.pos = v.next
					s.mu.Unlock()
					if missing > 0 {
						// The file is shorter than the stream says:
						// its tail was lost (power loss).
						s.log.Error("spool segment shorter than expected; skipping to the next",
							"segment", g.path, "missing_bytes", missing)
					}
					continue
				}
			} else {
				v.limit = s.mu.end.Offset
				v.next = s.mu.end
			}
			s.mu.Unlock()
			return v, nil
		}
		if s.mu.dataCh == nil {
			s.mu.dataCh = make(chan struct{})
		}
		ch := s.mu.dataCh
		s.mu.Unlock()

		s.readMu.Unlock()
		var err error
		select {
		case <-ch:
		case <-s.closing:
			err = ErrClosed
		case <-ctx.Done():
			err = ctx.Err()
		}
		s.readMu.Lock()
		if err != nil {
			return readView{}, err
		}
	}
}

// readFrom reads whole frames of segment v from the read cursor. It
// returns no records (and no error) if it skipped damaged data instead.
func (s *Spool) readFrom(v readView, maxRecords, maxBytes int) ([]Record, Pos, error) {
	pos := s.rd.pos
	if s.rd.f == nil || s.rd.fbase != v.base {
		if s.rd.f != nil {
			s.rd.f.Close()
			s.rd.f = nil
		}
		f, err := os.Open(v.path)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				// Dropped after waitReadable looked: the next look
				// moves the cursor past it. If it is still listed,
				// someone else removed the file.
				if s.listed(v.base) {
					s.skip(v, pos, "segment file missing")
				}
				return nil, Pos{}, nil
			}
			return nil, Pos{}, fmt.Errorf("cannot open segment %q for reading: %w", v.path, err)
		}
		s.rd.f, s.rd.fbase = f, v.base
	}

	avail := v.limit - pos.Offset
	want := int(min(avail, uint64(max(maxBytes, frameHeaderSize))))
	b := s.getBatch()
	data, err := s.pread(b, want, pos.Offset-v.base)
	if err != nil {
		s.putBatch(b)
		return nil, Pos{}, err
	}
	recs := b.recs[:0]
	off := 0
	// Frames this process wrote (or recovery checked) come back from the
	// page cache as written: checking their CRCs again would cost CPU per
	// sample and find nothing. Segments of an earlier life are checked.
	check := v.base < s.trustFrom
	for len(recs) < maxRecords && len(data)-off >= framePrefixSize {
		fl := frameLen(data[off:])
		if fl == 0 || uint64(off+fl) > avail {
			break // corrupt length
		}
		if off+fl > len(data) {
			if len(recs) > 0 || len(data) < want {
				break // budget used up, or the file is short
			}
			// The first frame alone exceeds maxBytes: read it whole.
			if data, err = s.pread(b, fl, pos.Offset-v.base); err != nil {
				s.putBatch(b)
				return nil, Pos{}, err
			}
			if len(data) < fl {
				break
			}
		}
		r, ok := decodeFrame(data[off:off+fl], check)
		if !ok {
			break
		}
		recs = append(recs, r)
		off += fl
	}
	b.recs = recs
	if len(recs) == 0 {
		s.putBatch(b)
		s.skip(v, pos, "corrupt frame")
		return nil, Pos{}, nil
	}
	end := Pos{Offset: pos.Offset + uint64(off), Seq: pos.Seq + uint64(len(recs))}
	s.rd.pos = end
	b.end = end
	if len(s.rd.out) >= maxOutstanding {
		s.rd.out[0] = nil
		s.rd.out = s.rd.out[1:]
	}
	s.rd.out = append(s.rd.out, b)
	return recs, end, nil
}

// pread reads up to n bytes at payload offset off of the reader's segment
// into b.buf. A short result means the file ends early.
func (s *Spool) pread(b *batch, n int, off uint64) ([]byte, error) {
	b.buf = slices.Grow(b.buf[:0], n)[:n]
	got, err := s.rd.f.ReadAt(b.buf, int64(segHeaderSize+off))
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("cannot read segment %q: %w", s.rd.f.Name(), err)
	}
	return b.buf[:got], nil
}

// skip moves the read cursor from pos past the damaged rest of segment v
// (for the head: to the end of what is appended).
func (s *Spool) skip(v readView, pos Pos, why string) {
	s.log.Error("skipping damaged spool data", "why", why, "segment", v.path,
		"offset", pos.Offset, "bytes", v.next.Offset-pos.Offset)
	s.mu.Lock()
	s.mu.stats.CorruptBytes += v.next.Offset - pos.Offset
	s.mu.Unlock()
	s.rd.pos = v.next
}

// listed reports whether the segment with base is still in the list.
func (s *Spool) listed(base uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := slices.BinarySearchFunc(s.mu.segs, base, func(g *segment, b uint64) int {
		return cmp.Compare(g.base, b)
	})
	return ok
}

func (s *Spool) getBatch() *batch {
	if n := len(s.rd.free); n > 0 {
		b := s.rd.free[n-1]
		s.rd.free = s.rd.free[:n-1]
		return b
	}
	return &batch{}
}

func (s *Spool) putBatch(b *batch) {
	if len(s.rd.free) < maxFreeBatches {
		s.rd.free = append(s.rd.free, b)
	}
}

// Ack acknowledges every record before pos (a position returned by Read):
// they are delivered and need not be kept. Segments holding only
// acknowledged records are deleted at once, which frees space for a
// blocked Append. The cursor itself is persisted at most every
// Config.CheckpointInterval (by Ack itself when the last write is that
// old, otherwise by the flusher once it is) and by Close, so after a
// crash the records acknowledged since the last checkpoint are delivered
// again. Ack with a
// position at or before the current one does nothing but release read
// buffers; it returns ErrBadPos for a position past the appended data.
//
// Acknowledge in order: Ack(p) means everything before p, so a consumer
// with several batches in flight must wait for the earlier ones.
func (s *Spool) Ack(pos Pos) error {
	s.readMu.Lock()
	defer s.readMu.Unlock()
	for len(s.rd.out) > 0 && s.rd.out[0].end.Offset <= pos.Offset {
		s.putBatch(s.rd.out[0])
		s.rd.out[0] = nil
		s.rd.out = s.rd.out[1:]
	}
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	if pos.Offset > s.mu.end.Offset || pos.Seq > s.mu.end.Seq {
		end := s.mu.end
		s.mu.Unlock()
		return fmt.Errorf("%w: ack at offset %d (seq %d), appended up to %d (seq %d)",
			ErrBadPos, pos.Offset, pos.Seq, end.Offset, end.Seq)
	}
	if pos.Offset <= s.mu.ack.Offset {
		s.mu.Unlock()
		return nil
	}
	if pos.Seq > s.mu.ack.Seq {
		s.mu.stats.AckedTotal += pos.Seq - s.mu.ack.Seq
	}
	s.mu.ack = pos
	if s.rd.pos.Offset < pos.Offset {
		s.rd.pos = pos
	}
	s.unlockDeleteAcked()
	s.checkpointAfterAck()
	return nil
}

// Rewind moves the read cursor back to the ack cursor: the next Read
// returns again every record read but not acknowledged. Use it when the
// records handed to a producer may not have arrived. Buffers of batches
// read before stay valid until acknowledged, as usual.
func (s *Spool) Rewind() {
	s.readMu.Lock()
	defer s.readMu.Unlock()
	s.mu.Lock()
	s.rd.pos = s.mu.ack
	s.mu.Unlock()
}
