// Package fsutil holds small file-system helpers shared by the packages
// that write durable files (partition logs, the raft WAL, the policy cache,
// the lake's local store).
package fsutil

import (
	"fmt"
	"os"
)

// SyncDir makes the entries of directory dir (files created, renamed or
// removed in it) durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("cannot open directory %s to sync it: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("cannot sync directory %s: %w", dir, err)
	}
	return nil
}
