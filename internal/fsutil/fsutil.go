// Package fsutil holds small file-system helpers shared by the packages
// that write durable files (partition logs, the raft WAL, the agent's
// spool, the policy cache, the lake's local store).
package fsutil

import (
	"fmt"
	"os"
	"path/filepath"
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

// WriteOptions say how WriteFile names its temporary file and whether it
// syncs the directory.
type WriteOptions struct {
	// TempPattern, when set, names the temporary file by os.CreateTemp's
	// pattern in path's directory, so that processes sharing the
	// directory never write the same one; the file is then made readable
	// by all (0o644) whatever the umask, for those other processes.
	// Leftovers of a crash are the caller's to remove. Default:
	// path+".tmp" (mode 0o644 less the umask), which the next write
	// reuses.
	TempPattern string
	// SyncDir fsyncs path's directory after the rename, so that the
	// replacement survives a power loss and not only a crash of the
	// process.
	SyncDir bool
}

// WriteFile replaces the file at path with data so that a crash leaves
// either the old content or the new, never a mix: data goes to a
// temporary file in path's directory, which is fsynced and renamed over
// path. The temporary file is removed when a step fails.
func WriteFile(path string, data []byte, opts WriteOptions) error {
	var f *os.File
	var err error
	if opts.TempPattern != "" {
		f, err = os.CreateTemp(filepath.Dir(path), opts.TempPattern)
		if err == nil {
			if err = f.Chmod(0o644); err != nil {
				f.Close()
				os.Remove(f.Name())
				return fmt.Errorf("cannot make %s readable: %w", f.Name(), err)
			}
		}
	} else {
		f, err = os.OpenFile(path+".tmp", os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	}
	if err != nil {
		return fmt.Errorf("cannot create a temporary file for %s: %w", path, err)
	}
	tmp := f.Name()
	fail := func(what string, err error) error {
		os.Remove(tmp)
		return fmt.Errorf("cannot %s %s: %w", what, tmp, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fail("write", err)
	}
	if err := Fdatasync(f); err != nil {
		f.Close()
		return fail("sync", err)
	}
	if err := f.Close(); err != nil {
		return fail("close", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail("rename into place", err)
	}
	if opts.SyncDir {
		return SyncDir(filepath.Dir(path))
	}
	return nil
}

// removeSlots bounds the RemoveAll calls running at once in the process.
// Each blocked unlink holds an OS thread and each directory level a file
// descriptor: a broker deleting a topic of 10,000 partitions, all at
// once, ran to nearly 5,000 threads and out of descriptors, and left
// hundreds of partition directories behind.
var removeSlots = make(chan struct{}, 8)

// RemoveAll is os.RemoveAll, at most a few at a time in the process
// (callers beyond that wait their turn without holding a thread).
func RemoveAll(path string) error {
	removeSlots <- struct{}{}
	defer func() { <-removeSlots }()
	return os.RemoveAll(path)
}
