package storage

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
)

const (
	logSuffix       = ".log"
	indexSuffix     = ".index"
	timeIndexSuffix = ".timeindex"
	cleanedSuffix   = ".cleaned"
	tmpSuffix       = ".tmp" // fsutil.WriteFile's temporary files

	logStartFile = "log-start-offset"
	cleanerFile  = "cleaner-checkpoint"
)

func segmentName(base int64, suffix string) string {
	return fmt.Sprintf("%020d%s", base, suffix)
}

// parseSegmentName returns the base offset of a "<20 digits>.log" name.
func parseSegmentName(name string) (int64, bool) {
	stem, ok := strings.CutSuffix(name, logSuffix)
	if !ok || len(stem) != 20 {
		return 0, false
	}
	base, err := strconv.ParseInt(stem, 10, 64)
	if err != nil || base < 0 {
		return 0, false
	}
	return base, true
}

// segFile is a segment's open file with a reference count. The Log holds
// one reference while the segment is part of the log; every reader holds
// one more. Deleting a segment unlinks its name at once but the descriptor
// is only closed on the last release, so a reader (or a sendfile in
// flight) never sees its file vanish under it.
type segFile struct {
	f    *os.File
	refs atomic.Int64
}

func newSegFile(f *os.File) *segFile {
	s := &segFile{f: f}
	s.refs.Store(1)
	return s
}

// acquire must only be called while the caller already holds a reference
// or while the Log's mu is held and the segment is still in the log.
func (s *segFile) acquire() { s.refs.Add(1) }

func (s *segFile) release() {
	if s.refs.Add(-1) == 0 {
		// Nothing useful can be done with a close error of a file whose
		// data was already synced or discarded.
		_ = s.f.Close()
	}
}

// removeIfExists removes path, treating "already gone" as success.
func removeIfExists(path string) error {
	_, err := removeExisting(path)
	return err
}

// removeExisting is removeIfExists that reports whether it removed a file.
func removeExisting(path string) (bool, error) {
	err := os.Remove(path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("cannot remove %q: %w", path, err)
}
