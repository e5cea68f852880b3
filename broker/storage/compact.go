package storage

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/maphash"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/simtel/simtel/internal/fsutil"
)

// CompactStats describes one Compact run.
type CompactStats struct {
	// SegmentsCleaned counts segments rewritten.
	SegmentsCleaned int
	// BytesBefore and BytesAfter are the sizes of the rewritten segments.
	BytesBefore, BytesAfter int64
	// RecordsRemoved counts records dropped (superseded, null key, or
	// expired tombstones); TombstonesRemoved counts the latter alone.
	RecordsRemoved    int64
	TombstonesRemoved int64
	// BatchesRemoved counts batches left with no record and dropped.
	BatchesRemoved int64
}

// cleanState is compaction bookkeeping for one segment, persisted in the
// cleaner-checkpoint file.
type cleanState struct {
	// atMs is when the segment was first compacted; tombstones in it
	// expire DeleteRetentionMs later.
	atMs int64
	// tombstones is whether the last compaction kept any tombstone.
	tombstones bool
}

// keyHash identifies a record key in the compaction map. 128 bits from two
// independently seeded hashes make a collision, which would drop a live
// record, practically impossible while keeping memory per key fixed.
type keyHash [2]uint64

type keyHasher struct{ a, b maphash.Seed }

func (k keyHasher) sum(key []byte) keyHash {
	return keyHash{maphash.Bytes(k.a, key), maphash.Bytes(k.b, key)}
}

// Compact runs Kafka-style log compaction over the closed segments (the
// active segment and segments younger than MinCompactionLagMs are never
// touched):
//
//   - Of the records sharing a key only the one with the highest offset is
//     kept. The key map is built from the segments not compacted before
//     (the dirty part); the rest already holds at most one record per key.
//   - Records with a null key are dropped.
//   - A tombstone (null value) that is the latest for its key is kept until
//     DeleteRetentionMs after its segment was first compacted, then dropped.
//   - Control batches and transactional batches are kept verbatim: without
//     transaction state the log cannot tell committed from aborted data,
//     so it never lets a transactional record supersede another.
//   - Offsets never change. A batch that loses records keeps its base
//     offset, first timestamp, max timestamp, lastOffsetDelta, producer
//     id/epoch and base sequence; the surviving records are copied
//     verbatim (their deltas stay valid) and re-compressed with the
//     batch's codec, and the CRC is recomputed. A batch that loses all
//     records is dropped, except the last batch of an idempotent producer,
//     which is kept as an empty batch so the producer's sequence state can
//     still be rebuilt from the log.
//   - A batch that cannot be decoded is kept as it is.
//
// Each changed segment is written to "<name>.log.cleaned", fsynced and
// renamed over the original; the index files are removed before the
// rename, so a crash at any point leaves either segment with its index
// rebuilt at Open. Readers of the old file keep their descriptors. Nothing
// is done when no segment is dirty and no tombstone has expired.
func (l *Log) Compact() (CompactStats, error) { return l.CompactBelow(math.MaxInt64) }

// CompactBelow is Compact limited to the segments that end at or below
// limit: a replicated partition's log holds entries raft has not
// committed yet above its high watermark, and a key's newer value there
// may still be truncated away, so older values it supersedes must stay.
func (l *Log) CompactBelow(limit int64) (CompactStats, error) {
	var st CompactStats
	cfg := l.config()
	if !cfg.Compact {
		return st, nil
	}
	l.maint.Lock()
	defer l.maint.Unlock()
	if l.isClosed() {
		return st, ErrClosed
	}
	defer func() {
		if err := l.persistIndexesLocked(); err != nil {
			l.logger.Warn("cannot persist segment index", "err", err)
		}
	}()
	nowMs := l.now().UnixMilli()

	l.mu.Lock()
	var segs []*segment
	var views []segView
	for i := 0; i < len(l.mu.segs)-1; i++ {
		s := l.mu.segs[i]
		if cfg.MinCompactionLagMs > 0 && s.idx.maxTs > nowMs-cfg.MinCompactionLagMs {
			break
		}
		if l.mu.segs[i+1].base > limit {
			break
		}
		segs = append(segs, s)
		views = append(views, l.viewLocked(s, 0))
	}
	l.mu.Unlock()
	defer func() {
		for _, v := range views {
			v.file.release()
		}
	}()

	dirty, due := false, false
	for _, s := range segs {
		cs, ok := l.maint.cleaned[s.base]
		dirty = dirty || !ok
		due = due || (ok && cs.tombstones && nowMs >= cs.atMs+cfg.DeleteRetentionMs)
	}
	if !dirty && !due {
		return st, nil
	}

	cl := &cleaner{
		log:     l,
		cfg:     cfg,
		hasher:  keyHasher{a: maphash.MakeSeed(), b: maphash.MakeSeed()},
		keys:    map[keyHash]int64{},
		lastPID: map[int64]int64{},
		limit:   maxDecompressed(cfg),
	}
	defer cl.codecs.close()

	// Pass 1: latest offset per key in the dirty part, last batch per
	// producer everywhere.
	for i, v := range views {
		_, clean := l.maint.cleaned[segs[i].base]
		if err := cl.eachBatch(v, func(h BatchHeader, batch []byte) error {
			if h.ProducerID >= 0 {
				cl.lastPID[h.ProducerID] = h.BaseOffset
			}
			if clean || h.IsControl() || h.IsTransactional() || h.NumRecords == 0 {
				return nil
			}
			recs, err := cl.records(h, batch)
			if err != nil {
				return nil
			}
			for _, r := range recs {
				if r.key != nil {
					cl.keys[cl.hasher.sum(r.key)] = h.BaseOffset + int64(r.offsetDelta)
				}
			}
			return nil
		}); err != nil {
			return st, err
		}
	}

	// Pass 2: rewrite.
	for i, v := range views {
		cs, wasClean := l.maint.cleaned[segs[i].base]
		dropTombstones := wasClean && nowMs >= cs.atMs+cfg.DeleteRetentionMs
		hasTomb, err := cl.cleanSegment(segs[i], v, dropTombstones, &st)
		if err != nil {
			return st, err
		}
		if !wasClean {
			cs.atMs = nowMs
		}
		cs.tombstones = hasTomb
		l.maint.cleaned[segs[i].base] = cs
	}
	if err := l.writeCleanerCheckpointLocked(); err != nil {
		return st, err
	}
	if st.SegmentsCleaned > 0 {
		l.logger.Info("compacted log", "segments", st.SegmentsCleaned, "bytes_before", st.BytesBefore,
			"bytes_after", st.BytesAfter, "records_removed", st.RecordsRemoved, "tombstones_removed", st.TombstonesRemoved)
	}
	return st, nil
}

// cleaner carries the state of one Compact run.
type cleaner struct {
	log     *Log
	cfg     *Config
	hasher  keyHasher
	keys    map[keyHash]int64
	lastPID map[int64]int64
	limit   int
	codecs  codecs

	batchBuf []byte
	recs     []record
	plain    []byte
	out      []byte
}

// eachBatch reads the whole batches of a pinned segment in order and
// verifies their CRC; compaction never rewrites data it cannot vouch for.
func (cl *cleaner) eachBatch(v segView, fn func(h BatchHeader, batch []byte) error) error {
	br := bufio.NewReaderSize(io.NewSectionReader(v.file.f, 0, v.size), 1<<20)
	var pos int64
	for pos < v.size {
		if cl.log.isClosed() {
			return ErrClosed
		}
		hdr, err := br.Peek(batchHeaderSize)
		if err != nil {
			return fmt.Errorf("cannot read segment at %d for compaction: %w", pos, err)
		}
		h, err := ParseBatchHeader(hdr)
		if err != nil {
			return fmt.Errorf("cannot compact segment at %d: %w", pos, err)
		}
		if int64(h.Length) > v.size-pos {
			return fmt.Errorf("cannot compact segment at %d: batch overruns segment: %w", pos, ErrCorruptBatch)
		}
		if cap(cl.batchBuf) < int(h.Length) {
			cl.batchBuf = make([]byte, h.Length)
		}
		batch := cl.batchBuf[:h.Length]
		if _, err := io.ReadFull(br, batch); err != nil {
			return fmt.Errorf("cannot read segment at %d for compaction: %w", pos, err)
		}
		if crc := crc32.Checksum(batch[crcStart:], castagnoli); crc != h.CRC {
			return fmt.Errorf("cannot compact segment at %d: crc mismatch: %w", pos, ErrCorruptBatch)
		}
		if err := fn(h, batch); err != nil {
			return err
		}
		pos += int64(h.Length)
	}
	return nil
}

// records decodes a batch's records; the result aliases cleaner buffers
// and is valid until the next call.
func (cl *cleaner) records(h BatchHeader, batch []byte) ([]record, error) {
	plain, err := cl.codecs.decompress(h.Compression(), batch[batchHeaderSize:], cl.limit)
	if err != nil {
		cl.log.logger.Debug("keeping undecodable batch", "offset", h.BaseOffset, "err", err)
		return nil, err
	}
	recs, err := parseRecords(h, plain, cl.recs)
	if err != nil {
		cl.log.logger.Debug("keeping undecodable batch", "offset", h.BaseOffset, "err", err)
		return nil, err
	}
	cl.recs = recs
	return recs, nil
}

// cleanBatch returns the batch to write in place of batch: batch itself if
// nothing changes, a rewritten batch (in cl.out), or nil to drop it.
func (cl *cleaner) cleanBatch(h BatchHeader, batch []byte, dropTombstones bool, st *CompactStats) ([]byte, bool) {
	if h.IsControl() || h.IsTransactional() {
		return batch, false
	}
	if h.NumRecords == 0 {
		// An empty batch left by an earlier compaction is only worth
		// keeping while it is still its producer's last batch.
		if h.ProducerID >= 0 && cl.lastPID[h.ProducerID] == h.BaseOffset {
			return batch, false
		}
		st.BatchesRemoved++
		return nil, false
	}
	recs, err := cl.records(h, batch)
	if err != nil {
		return batch, false
	}
	var removed, tombRemoved int64
	hasTomb := false
	kept := recs[:0]
	for _, r := range recs {
		off := h.BaseOffset + int64(r.offsetDelta)
		drop := false
		switch {
		case r.key == nil:
			drop = true
		case cl.superseded(r.key, off):
			drop = true
		case r.valueNull && dropTombstones:
			drop = true
			tombRemoved++
		case r.valueNull:
			hasTomb = true
		}
		if drop {
			removed++
			continue
		}
		kept = append(kept, r)
	}
	if removed == 0 {
		return batch, hasTomb
	}
	st.RecordsRemoved += removed
	st.TombstonesRemoved += tombRemoved

	if len(kept) == 0 {
		if h.ProducerID < 0 || cl.lastPID[h.ProducerID] != h.BaseOffset {
			st.BatchesRemoved++
			return nil, false
		}
		out := append(cl.out[:0], batch[:batchHeaderSize]...)
		attrs := binary.BigEndian.Uint16(out[offAttributes:]) &^ attrCompressionMask
		binary.BigEndian.PutUint16(out[offAttributes:], attrs)
		cl.out = finishBatch(out, 0)
		return cl.out, false
	}

	plain := cl.plain[:0]
	for _, r := range kept {
		plain = append(plain, r.raw...)
	}
	cl.plain = plain
	out := append(cl.out[:0], batch[:batchHeaderSize]...)
	out, err = cl.codecs.compress(h.Compression(), out, plain)
	if err != nil {
		cl.log.logger.Warn("cannot recompress batch, keeping it", "offset", h.BaseOffset, "err", err)
		st.RecordsRemoved -= removed
		st.TombstonesRemoved -= tombRemoved
		return batch, hasTomb
	}
	cl.out = finishBatch(out, int32(len(kept)))
	return cl.out, hasTomb
}

// superseded reports whether a later record with the same key exists in
// the compaction map.
func (cl *cleaner) superseded(key []byte, off int64) bool {
	latest, ok := cl.keys[cl.hasher.sum(key)]
	return ok && latest > off
}

// finishBatch fixes the length, record count and CRC of a rewritten batch.
func finishBatch(b []byte, numRecords int32) []byte {
	binary.BigEndian.PutUint32(b[offBatchLength:], uint32(len(b)-batchPrefixSize))
	binary.BigEndian.PutUint32(b[offNumRecords:], uint32(numRecords))
	binary.BigEndian.PutUint32(b[offCRC:], crc32.Checksum(b[crcStart:], castagnoli))
	return b
}

// cleanSegment rewrites one segment if compaction changes it, swapping
// the result in atomically. It reports whether tombstones remain.
func (cl *cleaner) cleanSegment(seg *segment, v segView, dropTombstones bool, st *CompactStats) (bool, error) {
	l := cl.log
	tmp := seg.path + cleanedSuffix
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o644)
	if err != nil {
		return false, fmt.Errorf("cannot create %q: %w", tmp, err)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	w := bufio.NewWriterSize(f, 1<<20)
	idx := newSegIndex()
	interval := int64(cl.cfg.IndexIntervalBytes)
	var pos int64
	changed, hasTomb := false, false
	err = cl.eachBatch(v, func(h BatchHeader, batch []byte) error {
		out, tomb := cl.cleanBatch(h, batch, dropTombstones, st)
		hasTomb = hasTomb || tomb
		if out == nil {
			changed = true
			return nil
		}
		if len(out) != len(batch) || &out[0] != &batch[0] {
			changed = true
		}
		if _, err := w.Write(out); err != nil {
			return fmt.Errorf("cannot write %q: %w", tmp, err)
		}
		idx.add(seg.base, h.BaseOffset, pos, int32(len(out)), h.MaxTimestamp, interval)
		pos += int64(len(out))
		return nil
	})
	if err != nil || !changed {
		return hasTomb, err
	}
	if err := w.Flush(); err != nil {
		return false, fmt.Errorf("cannot write %q: %w", tmp, err)
	}
	l.fsyncs.Add(1)
	if err := l.syncFile(f); err != nil {
		return false, fmt.Errorf("cannot fsync %q: %w", tmp, err)
	}
	// Index files first: from here until the new ones are written the
	// segment has none and Open would rebuild it by scanning.
	if err := removeIfExists(seg.indexPath()); err != nil {
		return false, err
	}
	if err := removeIfExists(seg.timeIndexPath()); err != nil {
		return false, err
	}
	if err := os.Rename(tmp, seg.path); err != nil {
		return false, fmt.Errorf("cannot replace segment %q: %w", seg.path, err)
	}
	ok = true
	nseg := &segment{base: seg.base, path: seg.path, file: newSegFile(f), size: pos, synced: pos, idx: idx}
	l.mu.Lock()
	j := slices.Index(l.mu.segs, seg)
	if j < 0 {
		// Cannot happen while maint is held; keep the log consistent
		// with what is on disk anyway.
		l.mu.Unlock()
		nseg.file.release()
		return false, fmt.Errorf("segment %q vanished during compaction", seg.path)
	}
	nseg.next, nseg.rollBase = seg.next, seg.rollBase
	l.mu.segs[j] = nseg
	l.mu.Unlock()
	seg.file.release()
	l.fsyncs.Add(1)
	if err := fsutil.SyncDir(l.dir); err != nil {
		return hasTomb, err
	}
	st.SegmentsCleaned++
	st.BytesBefore += v.size
	st.BytesAfter += pos
	return hasTomb, nil
}

// loadCleanerCheckpointLocked reads compaction bookkeeping, keeping only
// entries of existing segments. Requires maint.
func (l *Log) loadCleanerCheckpointLocked() error {
	p := filepath.Join(l.dir, cleanerFile)
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cannot read %q: %w", p, err)
	}
	l.mu.Lock()
	have := make(map[int64]bool, len(l.mu.segs))
	for _, s := range l.mu.segs[:len(l.mu.segs)-1] {
		have[s.base] = true
	}
	l.mu.Unlock()
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 3 {
			l.logger.Warn("ignoring bad cleaner checkpoint line", "line", line)
			continue
		}
		base, err1 := strconv.ParseInt(f[0], 10, 64)
		at, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil || (f[2] != "0" && f[2] != "1") {
			l.logger.Warn("ignoring bad cleaner checkpoint line", "line", line)
			continue
		}
		if have[base] {
			l.maint.cleaned[base] = cleanState{atMs: at, tombstones: f[2] == "1"}
		}
	}
	return nil
}

// writeCleanerCheckpointLocked persists compaction bookkeeping. Losing it
// is safe: segments are then treated as dirty and tombstones kept longer.
// Requires maint.
func (l *Log) writeCleanerCheckpointLocked() error {
	var buf bytes.Buffer
	for _, b := range slices.Sorted(maps.Keys(l.maint.cleaned)) {
		cs := l.maint.cleaned[b]
		t := 0
		if cs.tombstones {
			t = 1
		}
		fmt.Fprintf(&buf, "%d %d %d\n", b, cs.atMs, t)
	}
	p := filepath.Join(l.dir, cleanerFile)
	if buf.Len() == 0 {
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			return nil
		}
	}
	if err := fsutil.WriteFile(p, buf.Bytes(), fsutil.WriteOptions{SyncDir: true}); err != nil {
		return fmt.Errorf("cannot write cleaner checkpoint: %w", err)
	}
	return nil
}
