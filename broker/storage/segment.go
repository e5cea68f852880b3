package storage

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// segment is one "<base>.log" file of a partition.
//
// base, path and file never change; compaction replaces a segment by a new
// segment value rather than mutating it. Every other field is guarded by
// the owning Log's mu; the appender additionally holds appendMu while
// changing them, so code holding appendMu may read them without mu.
type segment struct {
	base int64
	path string
	file *segFile

	// size is the number of bytes of whole batches in the file.
	size int64
	// next is one past the last offset of the last batch, or base when
	// the segment holds no batch.
	next int64
	// synced is how many bytes of the file are known to be fdatasync'ed.
	synced int64
	// idx is the in-memory sparse index; idx.maxTs is the segment's
	// largest batch maxTimestamp (math.MinInt64 when empty).
	idx segIndex
	// rollBase is when the segment received its first batch (or when the
	// log was opened, for the tail segment); SegmentMs counts from it.
	rollBase time.Time
	// indexOnDisk is set once the index files on disk describe the whole
	// (closed, fully synced) segment. Index files exist only for such
	// segments, which is what lets Open trust them without a CRC scan.
	indexOnDisk bool
}

func (s *segment) indexPath() string     { return trimLog(s.path) + indexSuffix }
func (s *segment) timeIndexPath() string { return trimLog(s.path) + timeIndexSuffix }

func trimLog(p string) string { return p[:len(p)-len(logSuffix)] }

func segmentPath(dir string, base int64) string {
	return filepath.Join(dir, segmentName(base, logSuffix))
}

// headerWindow is how many bytes one header read fetches. Reading a small
// window instead of exactly one header turns a scan over many small batches
// into few preads; for large batches it still touches only a page of each.
const headerWindow = 4096

// headerReader reads batch headers at arbitrary positions of a file with
// pread, never reading whole batch bodies. It does no CRC checks; it only
// validates what is needed to walk from one batch to the next safely.
type headerReader struct {
	f     *os.File
	limit int64 // bytes of the file that hold whole batches
	buf   []byte
	start int64 // file position of buf[0]
	n     int   // valid bytes in buf
}

func newHeaderReader(f *os.File, limit int64, buf []byte) *headerReader {
	return &headerReader{f: f, limit: limit, buf: buf[:cap(buf)]}
}

var errShortFile = errors.New("segment ends inside a batch")

// at returns the header of the batch starting at pos. It fails with
// io.EOF exactly at limit, errShortFile if the batch does not fit before
// limit, and an ErrCorruptBatch-wrapped error for impossible fields.
func (r *headerReader) at(pos int64) (BatchHeader, error) {
	if pos >= r.limit {
		return BatchHeader{}, io.EOF
	}
	if r.limit-pos < batchHeaderSize {
		return BatchHeader{}, errShortFile
	}
	if pos < r.start || pos+batchHeaderSize > r.start+int64(r.n) {
		want := min(int64(len(r.buf)), r.limit-pos)
		n, err := r.f.ReadAt(r.buf[:want], pos)
		r.start, r.n = pos, n
		if n < batchHeaderSize {
			if err == nil || errors.Is(err, io.EOF) {
				return BatchHeader{}, errShortFile
			}
			return BatchHeader{}, fmt.Errorf("cannot read batch header at %d: %w", pos, err)
		}
	}
	b := r.buf[pos-r.start:]
	bl := int32(binary.BigEndian.Uint32(b[offBatchLength:]))
	if bl < minBatchLength || bl > math.MaxInt32-batchPrefixSize || int8(b[offMagic]) != 2 {
		return BatchHeader{}, fmt.Errorf("bad batch header at %d: %w", pos, ErrCorruptBatch)
	}
	h := decodeHeader(b, bl)
	if pos+int64(h.Length) > r.limit {
		return BatchHeader{}, errShortFile
	}
	if h.LastOffsetDelta < 0 || h.BaseOffset < 0 || h.BaseOffset > math.MaxInt64-int64(h.LastOffsetDelta) {
		return BatchHeader{}, fmt.Errorf("bad batch offsets at %d: %w", pos, ErrCorruptBatch)
	}
	return h, nil
}

// scanResult is what a scan of a segment file learned.
type scanResult struct {
	idx   segIndex
	end   int64 // bytes of valid whole batches
	next  int64 // offset after the last valid batch
	bad   error // why the scan stopped before the end of the file, or nil
	count int   // valid batches
}

// scanBufferSize is the read buffer of a scan of a segment at least that
// large; scanReaders keeps such readers for the next scan.
const scanBufferSize = 1 << 20

var scanReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, scanBufferSize) }}

// recoverScan reads a whole segment file sequentially, validating every
// batch (length, magic, CRC, header fields, offsets strictly increasing
// and inside [base, upper)) and building its index. It stops at the first
// invalid or torn batch and reports where. The CRC is computed while
// streaming through a fixed buffer, so a garbage length never causes an
// allocation of that size.
func recoverScan(f *os.File, base, upper int64, fileSize int64, interval int64) (scanResult, error) {
	res := scanResult{idx: newSegIndex(), next: base}
	src := io.NewSectionReader(f, 0, fileSize)
	var br *bufio.Reader
	if fileSize < scanBufferSize {
		// A broker opening thousands of partitions at once reads mostly
		// small or empty segments: a full-size buffer each was most of
		// its start-up CPU, in zeroing them.
		br = bufio.NewReaderSize(src, int(max(fileSize, 16)))
	} else {
		br = scanReaders.Get().(*bufio.Reader)
		br.Reset(src)
		defer func() {
			br.Reset(nil)
			scanReaders.Put(br)
		}()
	}
	var hdr [batchHeaderSize]byte
	pos := int64(0)
	for {
		n, err := io.ReadFull(br, hdr[:])
		if n == 0 && errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				res.bad = errShortFile
				break
			}
			return res, fmt.Errorf("cannot read segment at %d: %w", pos, err)
		}
		bl := int32(binary.BigEndian.Uint32(hdr[offBatchLength:]))
		if bl < minBatchLength || bl > math.MaxInt32-batchPrefixSize {
			res.bad = fmt.Errorf("batch length %d out of range: %w", bl, ErrCorruptBatch)
			break
		}
		if int8(hdr[offMagic]) != 2 {
			res.bad = fmt.Errorf("magic %d: %w", int8(hdr[offMagic]), ErrUnsupportedMagic)
			break
		}
		h := decodeHeader(hdr[:], bl)
		if pos+int64(h.Length) > fileSize {
			res.bad = errShortFile
			break
		}
		if err := checkStoredHeader(h, res.next, base, upper, pos); err != nil {
			res.bad = err
			break
		}
		crc := crc32.Update(0, castagnoli, hdr[crcStart:])
		for rem := int(h.Length) - batchHeaderSize; rem > 0; {
			p, err := br.Peek(min(rem, br.Size()))
			crc = crc32.Update(crc, castagnoli, p)
			_, _ = br.Discard(len(p))
			rem -= len(p)
			if err != nil && rem > 0 {
				if !errors.Is(err, io.EOF) {
					return res, fmt.Errorf("cannot read segment at %d: %w", pos, err)
				}
				res.bad = errShortFile
				break
			}
		}
		if res.bad != nil {
			break
		}
		if crc != h.CRC {
			res.bad = fmt.Errorf("crc %08x, header says %08x: %w", crc, h.CRC, ErrCorruptBatch)
			break
		}
		res.idx.add(base, h.BaseOffset, pos, h.Length, h.MaxTimestamp, interval)
		res.next = h.LastOffset() + 1
		res.count++
		pos += int64(h.Length)
	}
	res.end = pos
	return res, nil
}

// checkStoredHeader validates a stored batch header against its place in
// the log: offsets strictly after the previous batch (gaps are legal after
// compaction), below the next segment's base, relative offsets and byte
// positions representable in the uint32 index fields.
func checkStoredHeader(h BatchHeader, next, base, upper, pos int64) error {
	if err := checkHeaderFields(h, false); err != nil {
		return err
	}
	if h.BaseOffset < next {
		return fmt.Errorf("base offset %d below expected %d: %w", h.BaseOffset, next, ErrCorruptBatch)
	}
	if h.BaseOffset > math.MaxInt64-int64(h.LastOffsetDelta) {
		return fmt.Errorf("base offset %d overflows: %w", h.BaseOffset, ErrCorruptBatch)
	}
	if h.LastOffset() >= upper {
		return fmt.Errorf("last offset %d reaches next segment %d: %w", h.LastOffset(), upper, ErrCorruptBatch)
	}
	if h.LastOffset()-base > math.MaxUint32 || pos > math.MaxUint32 {
		return fmt.Errorf("batch at %d does not fit the segment index: %w", pos, ErrCorruptBatch)
	}
	return nil
}

// resumeIndex walks batch headers from the last index point of idx to
// limit, bringing idx.maxTs and idx.sinceEntry up to date and returning
// the offset after the last batch. It is used after loading a persisted
// index and after truncating one; the headers must be structurally sound
// and follow each other, otherwise an error is returned.
func resumeIndex(f *os.File, base int64, idx *segIndex, limit int64, buf []byte) (int64, error) {
	var pos int64
	next := base
	if n := len(idx.offsets); n > 0 {
		pos = int64(idx.offsets[n-1].pos)
		next = base + int64(idx.offsets[n-1].rel)
	}
	first := true
	hr := newHeaderReader(f, limit, buf)
	idx.sinceEntry = 0
	for {
		h, err := hr.at(pos)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, err
		}
		if first && len(idx.offsets) > 0 && h.BaseOffset != next {
			return 0, fmt.Errorf("index point %d holds offset %d: %w", next, h.BaseOffset, ErrCorruptBatch)
		}
		if h.BaseOffset < next || h.LastOffset()-base > math.MaxUint32 {
			return 0, fmt.Errorf("batch offset %d out of order at %d: %w", h.BaseOffset, pos, ErrCorruptBatch)
		}
		first = false
		idx.sinceEntry += int64(h.Length)
		if h.MaxTimestamp > idx.maxTs {
			idx.maxTs = h.MaxTimestamp
		}
		next = h.LastOffset() + 1
		pos += int64(h.Length)
	}
	return next, nil
}
