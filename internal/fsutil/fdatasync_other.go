//go:build !linux

package fsutil

import "os"

// Fdatasync flushes f to the device. Systems without fdatasync (macOS,
// the BSDs) sync the file's metadata too.
func Fdatasync(f *os.File) error { return f.Sync() }
