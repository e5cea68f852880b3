package fsutil

import (
	"os"

	"golang.org/x/sys/unix"
)

// Fdatasync flushes f's data, and the metadata needed to read it such as
// its size, to the device, without forcing an inode timestamp update. It
// holds f's descriptor for the call, so a concurrent Close makes it fail
// instead of syncing whatever file reused the descriptor number.
func Fdatasync(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			if serr = unix.Fdatasync(int(fd)); serr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	return serr
}
