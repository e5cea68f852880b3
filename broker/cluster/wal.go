package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/simtel/simtel/broker/wal"
	"github.com/simtel/simtel/internal/fsutil"
)

// walDirName is the broker-wide raft log of the partition groups, under
// the data directory.
const walDirName = "raft-wal"

// walMarker, in a group's directory, says that the group's raft log and
// stable store are in the broker's WAL. A group directory without it is
// new (or was deleted by hand): whatever the WAL still holds for that
// group id belongs to an older incarnation and is dropped first, so that
// deleting a partition directory resets its replica as it did when the
// raft log lived inside it.
const walMarker = "raft-wal-group"

// sharedWAL is the WAL of this broker's partition groups: opened by the
// first group that starts, closed when the last one closes (the broker
// closes its partitions after the Node).
type sharedWAL struct {
	mu   sync.Mutex
	w    *wal.WAL
	refs int
	// closed sums the counters of WALs opened and closed before.
	closed   wal.Stats
	register sync.Once
}

func (s *sharedWAL) acquire(dir string, log *slog.Logger) (*wal.WAL, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w == nil {
		w, err := wal.Open(dir, wal.Options{Logger: log})
		if err != nil {
			return nil, fmt.Errorf("cannot open the raft wal of the replicated partitions: %w", err)
		}
		s.w = w
	}
	s.refs++
	return s.w, nil
}

func (s *sharedWAL) release() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refs--
	if s.refs > 0 || s.w == nil {
		return nil
	}
	st := s.w.Stats()
	s.closed.Appends += st.Appends
	s.closed.Syncs += st.Syncs
	s.closed.Bytes += st.Bytes
	s.closed.SyncTime += st.SyncTime
	err := s.w.Close()
	s.w = nil
	return err
}

// stats: counters since the broker started, segments now.
func (s *sharedWAL) stats() wal.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.closed
	st.Segments = 0
	if s.w != nil {
		now := s.w.Stats()
		st.Appends += now.Appends
		st.Syncs += now.Syncs
		st.Bytes += now.Bytes
		st.SyncTime += now.SyncTime
		st.Segments = now.Segments
	}
	return st
}

func (n *Node) registerWALMetrics() {
	r := n.cfg.Registerer
	if r == nil {
		return
	}
	stat := func(f func(wal.Stats) uint64) func() float64 {
		return func() float64 { return float64(f(n.wal.stats())) }
	}
	r.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "simtel_broker_raft_wal_appends_total", Help: "Writes to the partition groups' raft WAL (one group's entries, a deletion or a vote each)."},
			stat(func(s wal.Stats) uint64 { return s.Appends })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "simtel_broker_raft_wal_syncs_total", Help: "Fsyncs of the raft WAL; appends/syncs is the group-commit factor."},
			stat(func(s wal.Stats) uint64 { return s.Syncs })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "simtel_broker_raft_wal_sync_seconds_total", Help: "Time spent in fsyncs of the raft WAL; divided by the syncs, the mean fsync latency."},
			func() float64 { return n.wal.stats().SyncTime.Seconds() }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "simtel_broker_raft_wal_written_bytes_total", Help: "Bytes written to the raft WAL's segments."},
			stat(func(s wal.Stats) uint64 { return s.Bytes })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "simtel_broker_raft_wal_segments", Help: "Segment files of the raft WAL on disk."},
			func() float64 { return float64(n.wal.stats().Segments) }),
	)
}

// openGroupWAL gives group cfg.Group its stores in the broker's WAL,
// dropping the state of an older group with the same id when cfg.Dir
// has no marker yet.
func (n *Node) openGroupWAL(cfg GroupConfig) (*wal.WAL, error) {
	n.wal.register.Do(n.registerWALMetrics)
	w, err := n.wal.acquire(filepath.Join(n.cfg.DataDir, walDirName), n.log.With("part", "raft-wal"))
	if err != nil {
		return nil, err
	}
	if err := claimGroupWAL(w, cfg.Dir, cfg.Group); err != nil {
		return nil, errors.Join(err, n.wal.release())
	}
	return w, nil
}

// claimGroupWAL makes dir the owner of group's state in w: if dir has no
// marker yet, whatever w holds for the group is an older incarnation's
// and is dropped before the marker is written.
func claimGroupWAL(w *wal.WAL, dir string, group uint64) error {
	marker := filepath.Join(dir, walMarker)
	if _, err := os.Stat(marker); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cannot check %s: %w", marker, err)
	}
	if err := w.DropGroup(group); err != nil {
		return err
	}
	return writeMarker(marker)
}

func writeMarker(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("cannot create %s: %w", path, err)
	}
	_, err = f.WriteString("this raft group's log is in the broker's " + walDirName + " directory\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	return fsutil.SyncDir(filepath.Dir(path))
}

// DropGroupLog removes what the broker's WAL holds for a raft group that
// no longer runs here (a partition deleted while the broker was down), so
// its segments can be reclaimed. The group must not be running.
func (n *Node) DropGroupLog(group uint64) error {
	w, err := n.wal.acquire(filepath.Join(n.cfg.DataDir, walDirName), n.log.With("part", "raft-wal"))
	if err != nil {
		return err
	}
	return errors.Join(w.DropGroup(group), n.wal.release())
}
