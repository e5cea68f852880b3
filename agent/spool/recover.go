package spool

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// recover builds the in-memory state from the directory. It runs inside
// Open before any other goroutine can see the spool; it takes mu only to
// keep the field contracts simple.
//
// Steps:
//  1. Remove leftover temporary files (an interrupted cursor write).
//  2. Read every segment header. A segment with a bad header or a base
//     that disagrees with its name is removed: if it is the last one it
//     was torn while being created and holds nothing; otherwise it is
//     corruption, logged and counted.
//  3. Scan the last segment (the head) frame by frame and truncate it at
//     the first torn or corrupt frame. Earlier segments were sealed; their
//     unacknowledged records were synced within two SyncIntervals, and
//     Read checks their CRCs anyway.
//  4. Load the cursor and clamp it into [first segment, end]; delete
//     segments it wholly covers.
func (s *Spool) recover() error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("cannot read spool directory %q: %w", s.dir, err)
	}
	var bases []uint64
	for _, e := range entries {
		name := e.Name()
		if base, ok := parseSegmentName(name); ok && e.Type().IsRegular() {
			bases = append(bases, base)
		} else if strings.HasSuffix(name, tmpSuffix) {
			if err := os.Remove(filepath.Join(s.dir, name)); err != nil {
				return fmt.Errorf("cannot remove leftover %q: %w", name, err)
			}
		}
	}
	slices.Sort(bases)

	var segs []*segment
	var stats Stats
	for _, base := range bases {
		g, err := s.loadHeader(base)
		if err != nil {
			return err
		}
		if g == nil || (len(segs) > 0 && (g.base < segs[len(segs)-1].base || g.seq < segs[len(segs)-1].seq)) {
			p := segmentPath(s.dir, base)
			if fi, err := os.Stat(p); err == nil {
				stats.CorruptBytes += uint64(fi.Size())
			}
			s.log.Warn("removing spool segment with invalid header", "segment", p)
			if err := os.Remove(p); err != nil {
				return fmt.Errorf("cannot remove invalid segment %q: %w", p, err)
			}
			continue
		}
		segs = append(segs, g)
	}

	cursor, cursorOK := s.readCursor()

	var end Pos
	if len(segs) == 0 {
		g, err := s.createSegment(cursor.Offset, cursor.Seq)
		if err != nil {
			return err
		}
		segs = append(segs, g)
		end = cursor
	} else {
		head := segs[len(segs)-1]
		valid, n, err := scanSegment(head)
		if err != nil {
			return err
		}
		if valid < head.size {
			s.log.Warn("truncating torn spool segment tail", "segment", head.path,
				"size", head.size, "valid", valid, "dropped_bytes", head.size-valid)
			stats.CorruptBytes += uint64(head.size - valid)
			if err := os.Truncate(head.path, valid); err != nil {
				return fmt.Errorf("cannot truncate torn segment %q: %w", head.path, err)
			}
			head.size = valid
		}
		f, err := os.OpenFile(head.path, os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("cannot open segment %q: %w", head.path, err)
		}
		head.f = f
		end = Pos{Offset: head.base + head.payload(), Seq: head.seq + n}
	}
	for _, g := range segs[:len(segs)-1] {
		g.sealed = true
		g.synced = g.size
	}

	ack := cursor
	first := segs[0]
	if !cursorOK || ack.Offset < first.base {
		ack = Pos{Offset: first.base, Seq: first.seq}
	}
	if ack.Offset > end.Offset || ack.Seq > end.Seq {
		s.log.Warn("spool cursor beyond recovered data; records after it were lost",
			"cursor_offset", ack.Offset, "end_offset", end.Offset)
		ack = end
	}

	s.mu.Lock()
	s.mu.segs = segs
	s.head = segs[len(segs)-1]
	s.trustFrom = s.head.base
	s.mu.end = end
	s.mu.ack = ack
	s.mu.ckpt = cursor
	s.mu.stats = stats
	s.mu.dirDirty = true
	for _, g := range segs {
		s.mu.bytes += g.size
	}
	deleted := s.unlockDeleteAcked()
	s.rd.pos = ack
	if (deleted > 0 || stats.CorruptBytes > 0) && s.cfg.SyncInterval > 0 {
		// Make removals and truncations durable now, not at the
		// first flush.
		return s.syncDir()
	}
	return nil
}

// loadHeader reads the header of the segment named by base. It returns
// nil (and no error) if the header is invalid.
func (s *Spool) loadHeader(base uint64) (*segment, error) {
	p := segmentPath(s.dir, base)
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("cannot open segment %q: %w", p, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("cannot stat segment %q: %w", p, err)
	}
	h := make([]byte, segHeaderSize)
	if _, err := io.ReadFull(f, h); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, nil
		}
		return nil, fmt.Errorf("cannot read segment header %q: %w", p, err)
	}
	hb, seq, ok := decodeHeader(segMagic, h)
	if !ok || hb != base {
		return nil, nil
	}
	return &segment{base: base, seq: seq, path: p, size: fi.Size()}, nil
}

// scanSegment reads g's frames and returns the file size up to the end of
// the last valid frame and the number of valid frames.
func scanSegment(g *segment) (valid int64, n uint64, err error) {
	f, err := os.Open(g.path)
	if err != nil {
		return 0, 0, fmt.Errorf("cannot open segment %q: %w", g.path, err)
	}
	defer f.Close()
	remaining := g.size - segHeaderSize
	r := bufio.NewReaderSize(io.NewSectionReader(f, segHeaderSize, remaining), 1<<20)
	valid = segHeaderSize
	var buf []byte
	for remaining >= frameHeaderSize {
		buf = slices.Grow(buf[:0], framePrefixSize)[:framePrefixSize]
		if _, err := io.ReadFull(r, buf); err != nil {
			return 0, 0, fmt.Errorf("cannot scan segment %q: %w", g.path, err)
		}
		fl := frameLen(buf)
		if fl == 0 || int64(fl) > remaining {
			break
		}
		buf = slices.Grow(buf, fl-framePrefixSize)[:fl]
		if _, err := io.ReadFull(r, buf[framePrefixSize:]); err != nil {
			return 0, 0, fmt.Errorf("cannot scan segment %q: %w", g.path, err)
		}
		if _, ok := decodeFrame(buf, true); !ok {
			break
		}
		valid += int64(fl)
		remaining -= int64(fl)
		n++
	}
	return valid, n, nil
}

// readCursor loads the persisted ack cursor. A missing or invalid cursor
// file yields the zero Pos and false: delivery then restarts at the
// oldest segment, which is safe (at least once).
func (s *Spool) readCursor() (Pos, bool) {
	p := filepath.Join(s.dir, cursorName)
	b, err := os.ReadFile(p)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("cannot read spool cursor; delivering from the oldest segment", "file", p, "err", err)
		}
		return Pos{}, false
	}
	off, seq, ok := decodeHeader(cursorMagic, b)
	if !ok || len(b) != cursorSize {
		s.log.Warn("invalid spool cursor; delivering from the oldest segment", "file", p)
		return Pos{}, false
	}
	return Pos{Offset: off, Seq: seq}, true
}

// createSegment creates the segment file starting at base/seq and writes
// its header. On failure no file is left behind.
func (s *Spool) createSegment(base, seq uint64) (*segment, error) {
	p := segmentPath(s.dir, base)
	f, err := s.hooks.create(p)
	if err != nil {
		return nil, fmt.Errorf("cannot create segment %q: %w", p, err)
	}
	if _, err := s.hooks.writeAt(f, encodeHeader(segMagic, base, seq), 0); err != nil {
		f.Close()
		os.Remove(p)
		return nil, fmt.Errorf("cannot write segment header %q: %w", p, err)
	}
	return &segment{base: base, seq: seq, path: p, size: segHeaderSize, f: f}, nil
}
