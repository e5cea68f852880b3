package partition

// Snapshots of a replicated partition that carry its data.
//
// A snapshot persisted locally is only a header: the high watermark at
// the snapshot's raft index (the log itself, fsynced up to there, is the
// state). Copying the whole partition into every snapshot would
// write each byte once more per snapshot, so that is not done.
//
// When raft opens a snapshot to send it to a replica that lags by more
// than the trailing log, or to a new replica added by a reassignment,
// replicaSnapshots.Open turns the header into a data snapshot: a header
// naming the first offset, the end offset and the byte count, followed by
// the log's batches from its start up to the end offset, read from the
// segment files like a Fetch (the files are pinned, so retention and
// compaction can run meanwhile) while the leader keeps appending after the
// end. The receiving replica stores it in its snapshot store and its
// Restore installs the batches with their offsets and leader epochs,
// rebuilds the producer state from them and makes them durable, after
// which raft replays the entries after the snapshot.
//
// Stream format (one JSON line, then the batches):
//
//	{"end_offset":E,"data":true,"start_offset":S,"data_bytes":N}\n
//	N bytes of record batches as stored, offsets in [S, E)
//
// A header-only snapshot has "data" false (or absent, written before data
// snapshots existed) and nothing after the line.
//
// While the group starts, raft restores its newest local snapshot through
// the same Open: until StartReplica marks the store live, Open returns the
// stored bytes unchanged, so a restart only sets the high watermark from
// the header instead of reading the whole log back into itself.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/simtel/simtel/broker/storage"
)

// replicaSnapMeta is the header line of a partition snapshot.
type replicaSnapMeta struct {
	EndOffset   int64 `json:"end_offset"`
	Data        bool  `json:"data,omitempty"`
	StartOffset int64 `json:"start_offset,omitempty"`
	DataBytes   int64 `json:"data_bytes,omitempty"`
}

// maxSnapHeader bounds the header line a snapshot reader accepts, and is
// the buffer of the readers that take it: a broker restarting with
// thousands of dormant partitions opens a snapshot of each two or three
// times, so a larger buffer, allocated and zeroed each time, showed in
// its CPU profile. The header is one short JSON line; the data after it
// is read batch by batch, large batches straight past the buffer.
const maxSnapHeader = 4 << 10

func readSnapHeader(br *bufio.Reader) (replicaSnapMeta, error) {
	var m replicaSnapMeta
	line, err := br.ReadSlice('\n')
	if errors.Is(err, io.EOF) && len(line) > 0 {
		err = nil // a header without its newline
	}
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return m, fmt.Errorf("snapshot header longer than %d bytes", br.Size())
		}
		return m, fmt.Errorf("cannot read snapshot header: %w", err)
	}
	if err := json.Unmarshal(line, &m); err != nil {
		return m, fmt.Errorf("cannot decode snapshot header: %w", err)
	}
	if m.EndOffset < 0 || m.StartOffset < 0 || m.DataBytes < 0 || (m.Data && m.StartOffset > m.EndOffset) {
		return m, fmt.Errorf("snapshot header out of range: %+v", m)
	}
	return m, nil
}

// replicaSnapshots wraps a group's file snapshot store; see the file
// comment.
type replicaSnapshots struct {
	raft.SnapshotStore
	p    *Partition
	live atomic.Bool
	// sent counts data snapshots opened for sending.
	sent atomic.Int64
}

func (s *replicaSnapshots) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	meta, rc, err := s.SnapshotStore.Open(id)
	if err != nil || !s.live.Load() {
		return meta, rc, err
	}
	br := bufio.NewReaderSize(rc, maxSnapHeader)
	m, err := readSnapHeader(br)
	if err != nil {
		rc.Close()
		return nil, nil, fmt.Errorf("snapshot %s of %s: %w", id, s.p, err)
	}
	if m.Data {
		// Received from a leader and not replaced by a local one yet:
		// it already carries the data.
		line, _ := json.Marshal(m)
		return meta, readCloser{io.MultiReader(bytes.NewReader(append(line, '\n')), br), rc.Close}, nil
	}
	rc.Close()
	out, body, err := s.p.openSnapshotData(m.EndOffset)
	if err != nil {
		return nil, nil, fmt.Errorf("snapshot %s of %s: %w", id, s.p, err)
	}
	nm := *meta
	nm.Size = out
	s.sent.Add(1)
	return &nm, body, nil
}

type readCloser struct {
	io.Reader
	close func() error
}

func (r readCloser) Close() error { return r.close() }

// openSnapshotData returns a data snapshot of the log up to end (see the
// file comment) and its size in bytes. The segment files stay pinned until
// the reader is closed.
func (p *Partition) openSnapshotData(end int64) (int64, io.ReadCloser, error) {
	var res *storage.ReadResult
	var start int64
	for try := 0; ; try++ {
		if have := p.log.EndOffset(); have < end {
			return 0, nil, fmt.Errorf("the log ends at %d, before the snapshot's end %d", have, end)
		}
		start = p.log.StartOffset()
		var err error
		res, err = p.log.Read(start, math.MaxInt64, end)
		if err == nil {
			break
		}
		// Retention moved the start between the two calls: read again.
		if !errors.Is(err, storage.ErrOffsetOutOfRange) || try == 5 {
			return 0, nil, fmt.Errorf("cannot read the log for a snapshot: %w", err)
		}
	}
	first := start
	if len(res.Chunks) > 0 {
		first = min(first, res.FirstOffset)
	}
	m := replicaSnapMeta{EndOffset: end, Data: true, StartOffset: first, DataBytes: res.Bytes}
	line, _ := json.Marshal(m)
	line = append(line, '\n')
	readers := []io.Reader{bytes.NewReader(line)}
	for _, c := range res.Chunks {
		readers = append(readers, io.NewSectionReader(c.File, c.Pos, c.Size))
	}
	p.cfg.Logger.Info("sending partition data in a raft snapshot", "partition", p.String(), "start_offset", first, "end_offset", end, "bytes", res.Bytes)
	return int64(len(line)) + res.Bytes, readCloser{io.MultiReader(readers...), func() error { res.Release(); return nil }}, nil
}

// installSnapshotData replaces the local log by the batches of a data
// snapshot (br is positioned after the header) and makes them durable.
func (p *Partition) installSnapshotData(br *bufio.Reader, m replicaSnapMeta) error {
	if err := p.log.Reset(m.StartOffset); err != nil {
		return fmt.Errorf("cannot empty %s to install a snapshot: %w", p, err)
	}
	const chunk = 1 << 20
	buf := make([]byte, 0, chunk)
	var read int64
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		hdrs, err := storage.ParseStoredBatches(buf)
		if err != nil {
			return fmt.Errorf("snapshot of %s holds a bad batch: %w", p, err)
		}
		if _, err := p.log.AppendRaw(buf, hdrs); err != nil {
			return fmt.Errorf("cannot install snapshot batches into %s: %w", p, err)
		}
		buf = buf[:0]
		return nil
	}
	for read < m.DataBytes {
		prefix, err := br.Peek(12)
		if err != nil {
			return fmt.Errorf("snapshot of %s ends after %d of %d bytes: %w", p, read, m.DataBytes, err)
		}
		_, size, err := storage.ReadBatchPrefix(prefix)
		if err != nil {
			return fmt.Errorf("snapshot of %s at byte %d: %w", p, read, err)
		}
		if int64(size) > m.DataBytes-read {
			return fmt.Errorf("snapshot of %s: batch of %d bytes at byte %d passes the announced %d", p, size, read, m.DataBytes)
		}
		if len(buf)+size > chunk {
			if err := flush(); err != nil {
				return err
			}
		}
		n := len(buf)
		buf = append(buf, make([]byte, size)...)
		if _, err := io.ReadFull(br, buf[n:]); err != nil {
			return fmt.Errorf("snapshot of %s ends inside a batch: %w", p, err)
		}
		read += int64(size)
	}
	if err := flush(); err != nil {
		return err
	}
	if err := p.log.SkipTo(m.EndOffset); err != nil {
		return fmt.Errorf("cannot move the end of %s to the snapshot's %d: %w", p, m.EndOffset, err)
	}
	if end := p.log.EndOffset(); end != m.EndOffset {
		return fmt.Errorf("installed snapshot of %s ends at %d, the snapshot says %d", p, end, m.EndOffset)
	}
	if m.EndOffset > m.StartOffset {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		err := p.log.Sync(ctx, m.EndOffset-1)
		cancel()
		if err != nil {
			return fmt.Errorf("cannot sync the installed snapshot of %s: %w", p, err)
		}
	}
	return nil
}

// readLocalSnapshot reads the header of a snapshot in the group's store.
func readLocalSnapshot(ss raft.SnapshotStore, id string) (replicaSnapMeta, error) {
	_, rc, err := ss.Open(id)
	if err != nil {
		return replicaSnapMeta{}, fmt.Errorf("cannot open raft snapshot %s: %w", id, err)
	}
	defer rc.Close()
	m, err := readSnapHeader(bufio.NewReaderSize(rc, maxSnapHeader))
	if err != nil {
		return replicaSnapMeta{}, fmt.Errorf("raft snapshot %s: %w", id, err)
	}
	return m, nil
}
