package bench

import (
	"context"
	"sync"
	"time"

	"github.com/simtel/simtel/agent/spool"
)

// memSpool is an emulated agent's spool: the agent's shipper
// (agent/producer) reads and acknowledges it as it does the agent's
// on-disk spool, but records stay in memory. The run's figures are the
// brokers', so the emulated agents skip the disk; the shipper is the
// real one, with its own connection, producer id and retries.
//
// Positions count records only (Offset and Seq are both the record
// count), which is all the shipper does with them: read after, ack up to.
type memSpool struct {
	mu struct {
		sync.Mutex
		recs     []spool.Record // records from acked on, read or not
		acked    uint64         // records acknowledged
		read     uint64         // records handed to Read
		appended uint64         // records appended
		wake     chan struct{}  // closed on the next Append
		// watch: the first Ack past watch records its time in backAt;
		// the run sets watch at a broker restart or kill to see when
		// the agent delivers samples taken after it.
		watch  uint64
		backAt time.Time
	}
}

func newMemSpool() *memSpool {
	s := &memSpool{}
	s.mu.wake = make(chan struct{})
	return s
}

// append adds n samples made by gen, which gets the sequence number of
// each (0 for the agent's first sample).
func (s *memSpool) append(n int, gen func(seq uint64) spool.Record) {
	if n <= 0 {
		return
	}
	s.mu.Lock()
	for range n {
		s.mu.recs = append(s.mu.recs, gen(s.mu.appended))
		s.mu.appended++
	}
	close(s.mu.wake)
	s.mu.wake = make(chan struct{})
	s.mu.Unlock()
}

// Read waits for records not read yet and returns up to maxRecords of
// them, and about maxBytes of keys and values at most (at least one).
func (s *memSpool) Read(ctx context.Context, maxRecords, maxBytes int) ([]spool.Record, spool.Pos, error) {
	for {
		s.mu.Lock()
		if s.mu.read < s.mu.appended {
			start := int(s.mu.read - s.mu.acked)
			end, size := start, 0
			for end < len(s.mu.recs) && end-start < maxRecords {
				size += len(s.mu.recs[end].Key) + len(s.mu.recs[end].Value)
				if end > start && size > maxBytes {
					break
				}
				end++
			}
			// A copy: Ack reslices recs while the shipper still holds
			// the records of a read it is halving.
			out := append([]spool.Record(nil), s.mu.recs[start:end]...)
			s.mu.read += uint64(end - start)
			pos := spool.Pos{Offset: s.mu.read, Seq: s.mu.read}
			s.mu.Unlock()
			return out, pos, nil
		}
		wake := s.mu.wake
		s.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, spool.Pos{}, ctx.Err()
		}
	}
}

// AppendedAfter reports how many records were appended after pos.
func (s *memSpool) AppendedAfter(pos spool.Pos) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.appended - pos.Seq
}

// Ack drops the records before pos.
func (s *memSpool) Ack(pos spool.Pos) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if pos.Seq <= s.mu.acked {
		return nil
	}
	n := int(pos.Seq - s.mu.acked)
	clear(s.mu.recs[:n]) // let the values go
	s.mu.recs = s.mu.recs[n:]
	s.mu.acked = pos.Seq
	if s.mu.backAt.IsZero() && pos.Seq > s.mu.watch {
		s.mu.backAt = time.Now()
	}
	return nil
}

// watchFrom starts watching for the first ack of a sample appended from
// now on.
func (s *memSpool) watchFrom() {
	s.mu.Lock()
	s.mu.watch, s.mu.backAt = s.mu.appended, time.Time{}
	s.mu.Unlock()
}

// back is when the agent first acknowledged a sample appended after
// watchFrom; zero while it has not.
func (s *memSpool) back() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.backAt
}

// counts are the records appended and acknowledged so far.
func (s *memSpool) counts() (appended, acked uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.appended, s.mu.acked
}
