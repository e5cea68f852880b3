package tune

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ReleaseExecPages drops the executable's start-up pages (see
// execpages.go) and returns the kibibytes of the executable that were
// resident before and after.
func ReleaseExecPages() (before, after int64, err error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, 0, fmt.Errorf("cannot find the executable: %w", err)
	}
	maps, err := readExecMappings(exe)
	if err != nil {
		return 0, 0, err
	}
	for _, m := range maps {
		before += m.rssKiB
		if !m.releasable() {
			continue
		}
		// MADV_PAGEOUT is a hint (Linux 5.4 and later): without it only
		// the page-table entries are dropped.
		if err := madvise(m, unix.MADV_PAGEOUT); err != nil && !errors.Is(err, unix.EINVAL) {
			return before, 0, fmt.Errorf("cannot page out %x-%x of %s: %w", m.start, m.end, exe, err)
		}
		if err := madvise(m, unix.MADV_DONTNEED); err != nil {
			return before, 0, fmt.Errorf("cannot release %x-%x of %s: %w", m.start, m.end, exe, err)
		}
	}
	maps, err = readExecMappings(exe)
	if err != nil {
		return before, 0, err
	}
	for _, m := range maps {
		after += m.rssKiB
	}
	return before, after, nil
}

// madvise advises on a mapping found in smaps. The raw system call takes
// the address as a number: the mapping is not Go memory.
func madvise(m execMapping, advice int) error {
	if _, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(m.start), uintptr(m.end-m.start), uintptr(advice)); errno != 0 {
		return errno
	}
	return nil
}

func readExecMappings(exe string) ([]execMapping, error) {
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return nil, fmt.Errorf("cannot read the process's mappings: %w", err)
	}
	maps, err := parseExecMappings(smaps, exe)
	if err != nil {
		return nil, fmt.Errorf("cannot parse /proc/self/smaps: %w", err)
	}
	return maps, nil
}
