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

// SyncFS makes everything written to the file system that holds dir
// durable (syncfs(2)): one call instead of an fsync of each of its files.
func SyncFS(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	for {
		if err := unix.Syncfs(int(f.Fd())); err != unix.EINTR {
			return err
		}
	}
}
