package spool

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// fdatasync flushes f's data (not its timestamps) to the device.
func fdatasync(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("cannot sync %q: %w", f.Name(), err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			if serr = unix.Fdatasync(int(fd)); serr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return fmt.Errorf("cannot sync %q: %w", f.Name(), err)
	}
	if serr != nil {
		return fmt.Errorf("cannot sync %q: %w", f.Name(), serr)
	}
	return nil
}
