//go:build !linux

package spool

import (
	"fmt"
	"os"
)

// fdatasync flushes f to the device. Systems without fdatasync (macOS,
// the BSDs) sync the file's metadata too.
func fdatasync(f *os.File) error {
	if err := f.Sync(); err != nil {
		return fmt.Errorf("cannot sync %q: %w", f.Name(), err)
	}
	return nil
}
