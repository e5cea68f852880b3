//go:build !linux

package fsutil

import (
	"errors"
	"os"
)

// Fdatasync flushes f to the device. Systems without fdatasync (macOS,
// the BSDs) sync the file's metadata too.
func Fdatasync(f *os.File) error { return f.Sync() }

// SyncFS is not available here: callers sync each file instead.
func SyncFS(string) error { return errors.ErrUnsupported }
