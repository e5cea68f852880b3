package storage

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
)

// Chunk is a byte range of a segment file holding whole batches, ready
// for sendfile.
type Chunk struct {
	File *os.File
	Pos  int64
	Size int64
}

// ReadResult is the answer of Read. It holds references on the files of
// its chunks; Release must be called once the bytes were sent.
type ReadResult struct {
	Chunks []Chunk
	// Bytes is the total size of all chunks.
	Bytes int64
	// FirstOffset is the base offset of the first batch returned (it can
	// be below the requested offset) and LastOffset the last offset of the
	// last batch. For an empty result LastOffset = FirstOffset-1.
	FirstOffset, LastOffset int64

	refs []*segFile
}

// Release drops the file references. It is safe to call more than once.
func (r *ReadResult) Release() {
	for _, f := range r.refs {
		f.release()
	}
	r.refs = nil
}

// segView is a segment pinned for reading outside the lock: its file
// reference is held and size is the byte count published when it was
// taken, so only whole, written batches are visible.
type segView struct {
	file *segFile
	base int64
	size int64
	pos  int64
}

// segmentIndexLocked returns the index of the segment that would contain
// offset: the last one whose base is <= offset (0 if none is).
func (l *Log) segmentIndexLocked(offset int64) int {
	segs := l.mu.segs
	i := sort.Search(len(segs), func(i int) bool { return segs[i].base > offset })
	return max(i-1, 0)
}

func (l *Log) viewLocked(s *segment, pos int64) segView {
	s.file.acquire()
	return segView{file: s.file, base: s.base, size: s.size, pos: pos}
}

// nextView pins the first segment whose base is above base.
func (l *Log) nextView(base int64) (segView, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.closed {
		return segView{}, false
	}
	segs := l.mu.segs
	i := sort.Search(len(segs), func(i int) bool { return segs[i].base > base })
	if i == len(segs) {
		return segView{}, false
	}
	return l.viewLocked(segs[i], 0), true
}

func (l *Log) headerBuf() *[]byte { return l.hdrBufs.Get().(*[]byte) }

// Read returns file ranges holding whole batches, starting with the batch
// that contains offset, up to maxBytes but always at least one batch if one
// exists (KIP-74), and only batches whose last offset is below maxOffset
// (the high watermark). Only batch headers are read; the bodies are left
// for sendfile. offset below StartOffset or above EndOffset is
// ErrOffsetOutOfRange; offset == EndOffset gives an empty result.
func (l *Log) Read(offset int64, maxBytes int64, maxOffset int64) (*ReadResult, error) {
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return nil, ErrClosed
	}
	if offset < l.mu.start || offset > l.mu.end {
		start, end := l.mu.start, l.mu.end
		l.mu.Unlock()
		return nil, fmt.Errorf("read at %d outside [%d, %d]: %w", offset, start, end, ErrOffsetOutOfRange)
	}
	res := &ReadResult{FirstOffset: offset, LastOffset: offset - 1}
	if offset == l.mu.end || offset >= maxOffset {
		l.mu.Unlock()
		return res, nil
	}
	s := l.mu.segs[l.segmentIndexLocked(offset)]
	v := l.viewLocked(s, s.idx.lookup(offset-s.base))
	l.mu.Unlock()

	bp := l.headerBuf()
	defer l.hdrBufs.Put(bp)
	for {
		full := l.readView(res, v, *bp, offset, maxBytes, maxOffset)
		if full {
			break
		}
		next, ok := l.nextView(v.base)
		if !ok {
			break
		}
		v = next
	}
	return res, nil
}

// readView appends to res the batches of one pinned segment and consumes
// the view's reference (kept in res if a chunk uses it). It reports
// whether the read is complete.
func (l *Log) readView(res *ReadResult, v segView, buf []byte, offset, maxBytes, maxOffset int64) bool {
	hr := newHeaderReader(v.file.f, v.size, buf)
	pos, chunkStart := v.pos, int64(-1)
	full := false
	for {
		h, err := hr.at(pos)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				// The segment was truncated or replaced under us;
				// what was collected so far is still whole batches.
				l.logger.Debug("read stopped early", "position", pos, "err", err)
				full = true
			}
			break
		}
		if h.LastOffset() < offset {
			pos += int64(h.Length)
			continue
		}
		if h.LastOffset() >= maxOffset || (res.Bytes > 0 && res.Bytes+int64(h.Length) > maxBytes) {
			full = true
			break
		}
		if chunkStart < 0 {
			chunkStart = pos
			if res.Bytes == 0 {
				res.FirstOffset = h.BaseOffset
			}
		}
		res.Bytes += int64(h.Length)
		res.LastOffset = h.LastOffset()
		pos += int64(h.Length)
	}
	if chunkStart >= 0 {
		res.Chunks = append(res.Chunks, Chunk{File: v.file.f, Pos: chunkStart, Size: pos - chunkStart})
		res.refs = append(res.refs, v.file)
	} else {
		v.file.release()
	}
	return full || res.Bytes >= maxBytes
}

// ScanBatches calls fn with the header of every batch whose last offset is
// at or after from, in order, reading headers only. It sees the batches
// appended before it reached their segment. An error from fn stops the
// scan and is returned.
func (l *Log) ScanBatches(from int64, fn func(h BatchHeader) error) error {
	return l.scanBatches(from, false, func(h BatchHeader, _ []byte) error { return fn(h) })
}

// ScanBatchesControl is ScanBatches that also hands fn the whole batch of
// each control batch (transaction markers, whose record the producer
// state needs); control is nil for other batches and only valid during
// the call.
func (l *Log) ScanBatchesControl(from int64, fn func(h BatchHeader, control []byte) error) error {
	return l.scanBatches(from, true, fn)
}

func (l *Log) scanBatches(from int64, withControl bool, fn func(h BatchHeader, control []byte) error) error {
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	s := l.mu.segs[l.segmentIndexLocked(from)]
	v := l.viewLocked(s, s.idx.lookup(from-s.base))
	l.mu.Unlock()

	bp := l.headerBuf()
	defer l.hdrBufs.Put(bp)
	var body []byte
	for {
		err := scanView(v, *bp, func(h BatchHeader, pos int64) (bool, error) {
			if h.LastOffset() < from {
				return true, nil
			}
			if !withControl || !h.IsControl() {
				return true, fn(h, nil)
			}
			if int(h.Length) > cap(body) {
				body = make([]byte, h.Length)
			}
			body = body[:h.Length]
			if _, err := v.file.f.ReadAt(body, pos); err != nil {
				return false, fmt.Errorf("cannot read control batch at offset %d: %w", h.BaseOffset, err)
			}
			return true, fn(h, body)
		})
		v.file.release()
		if err != nil {
			return err
		}
		next, ok := l.nextView(v.base)
		if !ok {
			return nil
		}
		v = next
	}
}

// scanView walks the headers of a pinned segment from v.pos. fn returns
// false to stop. A damaged header ends the walk silently: it can only be
// a segment concurrently truncated or replaced.
func scanView(v segView, buf []byte, fn func(h BatchHeader, pos int64) (bool, error)) error {
	hr := newHeaderReader(v.file.f, v.size, buf)
	for pos := v.pos; ; {
		h, err := hr.at(pos)
		if err != nil {
			return nil
		}
		more, err := fn(h, pos)
		if err != nil || !more {
			return err
		}
		pos += int64(h.Length)
	}
}

// OffsetForTimestamp implements ListOffsets by timestamp: it finds the
// first batch (at or after the log start offset) whose maxTimestamp is >=
// ts, using segment max timestamps and the time index to skip data, and
// then the first record in it with a timestamp >= ts. It returns that
// record's offset and timestamp, or ok=false if no batch qualifies.
func (l *Log) OffsetForTimestamp(ts int64) (offset int64, batchTs int64, ok bool) {
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return 0, 0, false
	}
	start := l.mu.start
	l.mu.Unlock()
	return l.findTimestamp(start, ts)
}

// findTimestamp searches the segments from the one holding start on.
// Segments are pinned one at a time and the walk continues by base offset,
// since the list may change between them.
func (l *Log) findTimestamp(start, ts int64) (int64, int64, bool) {
	bp := l.headerBuf()
	defer l.hdrBufs.Put(bp)
	lastBase := int64(-1)
	for {
		l.mu.Lock()
		if l.mu.closed {
			l.mu.Unlock()
			return 0, 0, false
		}
		segs := l.mu.segs
		i := sort.Search(len(segs), func(j int) bool { return segs[j].base > lastBase })
		if lastBase < 0 {
			i = l.segmentIndexLocked(start)
		}
		for i < len(segs) && segs[i].idx.maxTs < ts {
			i++
		}
		if i == len(segs) {
			l.mu.Unlock()
			return 0, 0, false
		}
		s := segs[i]
		v := l.viewLocked(s, s.idx.lookupTime(ts))
		l.mu.Unlock()
		lastBase = v.base

		var found BatchHeader
		var foundPos int64 = -1
		_ = scanView(v, *bp, func(h BatchHeader, pos int64) (bool, error) {
			if h.LastOffset() < start || h.MaxTimestamp < ts {
				return true, nil
			}
			found, foundPos = h, pos
			return false, nil
		})
		if foundPos >= 0 {
			off, rts := l.refineTimestamp(v, found, foundPos, start, ts)
			v.file.release()
			return off, rts, true
		}
		v.file.release()
	}
}

// refineTimestamp finds, inside a batch whose maxTimestamp >= ts, the
// first record at or after start with a timestamp >= ts. Kafka answers
// ListOffsets with a record, not a batch. If the batch cannot be decoded
// the batch's first usable offset and its max timestamp are returned.
func (l *Log) refineTimestamp(v segView, h BatchHeader, pos, start, ts int64) (int64, int64) {
	fallbackOff, fallbackTs := max(h.BaseOffset, start), h.MaxTimestamp
	if h.NumRecords == 0 {
		return fallbackOff, fallbackTs
	}
	if h.Attributes&attrTimestampType != 0 {
		// LogAppendTime: every record carries the batch max timestamp.
		return fallbackOff, fallbackTs
	}
	batch := make([]byte, h.Length)
	if _, err := v.file.f.ReadAt(batch, pos); err != nil {
		return fallbackOff, fallbackTs
	}
	var c codecs
	defer c.close()
	recs, err := c.decompress(h.Compression(), batch[batchHeaderSize:], maxDecompressed(l.config()))
	if err != nil {
		return fallbackOff, fallbackTs
	}
	for len(recs) > 0 {
		r, n, err := nextRecord(recs)
		if err != nil {
			break
		}
		recs = recs[n:]
		off := h.BaseOffset + int64(r.offsetDelta)
		rts := h.FirstTimestamp + r.timestampDelta
		if off >= start && rts >= ts {
			return off, rts
		}
	}
	return fallbackOff, fallbackTs
}

// MaxTimestamp returns the record with the largest timestamp in the log
// (ListOffsets -3), the earliest one on ties, or (-1, -1) for an empty log.
func (l *Log) MaxTimestamp() (offset int64, ts int64) {
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return -1, -1
	}
	start := l.mu.start
	best := int64(math.MinInt64)
	for _, s := range l.mu.segs {
		if s.size > 0 && s.idx.maxTs > best {
			best = s.idx.maxTs
		}
	}
	l.mu.Unlock()
	if best == math.MinInt64 {
		return -1, -1
	}
	off, rts, ok := l.findTimestamp(start, best)
	if !ok {
		return -1, -1
	}
	return off, rts
}

// ErrNotIntact: ReadExact found other bytes at the offsets than the ones
// asked for (retention deleted them, compaction rewrote them, or the log
// was truncated).
var ErrNotIntact = errors.New("the batches are no longer in the log as written")

// ReadExact returns the n bytes of the whole batches holding offsets base
// to last, as stored: the first batch must start at base and the last
// end at last. Anything else (deleted, compacted or truncated since) is
// ErrNotIntact.
func (l *Log) ReadExact(base, last int64, n int) ([]byte, error) {
	res, err := l.Read(base, int64(n), last+1)
	if err != nil {
		if errors.Is(err, ErrOffsetOutOfRange) {
			return nil, fmt.Errorf("offsets %d-%d: %w (%v)", base, last, ErrNotIntact, err)
		}
		return nil, err
	}
	defer res.Release()
	if res.FirstOffset != base || res.LastOffset != last || res.Bytes != int64(n) {
		return nil, fmt.Errorf("offsets %d-%d (%d bytes) read as %d-%d (%d bytes): %w", base, last, n, res.FirstOffset, res.LastOffset, res.Bytes, ErrNotIntact)
	}
	buf := make([]byte, n)
	pos := 0
	for _, c := range res.Chunks {
		if _, err := c.File.ReadAt(buf[pos:pos+int(c.Size)], c.Pos); err != nil {
			return nil, fmt.Errorf("cannot read offsets %d-%d: %w", base, last, err)
		}
		pos += int(c.Size)
	}
	return buf, nil
}
