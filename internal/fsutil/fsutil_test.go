package fsutil

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func TestWriteFile(t *testing.T) {
	for _, opts := range []WriteOptions{{}, {SyncDir: true}, {TempPattern: ".tmp-x-*"}} {
		dir := t.TempDir()
		path := filepath.Join(dir, "x")
		for _, content := range []string{"old\n", "new\n"} {
			if err := WriteFile(path, []byte(content), opts); err != nil {
				t.Fatalf("%+v: WriteFile: %v", opts, err)
			}
			got, err := os.ReadFile(path)
			if err != nil || string(got) != content {
				t.Fatalf("%+v: got %q, %v; want %q", opts, got, err, content)
			}
		}
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm()&0o600 != 0o600 {
			t.Errorf("%+v: mode %v, %v; want the owner to read and write", opts, fi.Mode(), err)
		}
		if opts.TempPattern != "" {
			if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
				t.Errorf("%+v: mode %v, want 0644", opts, fi.Mode().Perm())
			}
		}
		ents, _ := os.ReadDir(dir)
		if len(ents) != 1 {
			t.Errorf("%+v: directory holds %d entries, want only x", opts, len(ents))
		}
	}
}

// TestWriteFileFailureLeavesNothing: a rename that fails (path is a
// non-empty directory) leaves the old content and no temporary file.
func TestWriteFileFailureLeavesNothing(t *testing.T) {
	for _, opts := range []WriteOptions{{}, {TempPattern: ".tmp-x-*"}} {
		dir := t.TempDir()
		path := filepath.Join(dir, "x")
		if err := os.MkdirAll(filepath.Join(path, "keep"), 0o755); err != nil {
			t.Fatal(err)
		}
		err := WriteFile(path, []byte("data"), opts)
		if err == nil || !strings.Contains(err.Error(), "rename") {
			t.Fatalf("%+v: WriteFile over a directory: %v, want a rename error", opts, err)
		}
		ents, _ := os.ReadDir(dir)
		if len(ents) != 1 || ents[0].Name() != "x" {
			t.Errorf("%+v: directory holds %v, want only x", opts, ents)
		}
	}
}

func TestSyncFS(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := SyncFS(dir)
	if runtime.GOOS == "linux" && err != nil {
		t.Fatalf("SyncFS: %v", err)
	}
	if runtime.GOOS != "linux" && !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("SyncFS off linux: %v", err)
	}
	if err := SyncFS(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("SyncFS of a missing directory succeeded")
	}
}

// TestRemoveAllMany: many trees removed at once, more than run at a time,
// are all gone; a missing one is no error.
func TestRemoveAllMany(t *testing.T) {
	dir := t.TempDir()
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 100 {
		tree := filepath.Join(dir, strconv.Itoa(i))
		if err := os.MkdirAll(filepath.Join(tree, "raft", "snapshots"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tree, "raft", "snapshots", "meta.json"), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { errs <- RemoveAll(tree) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("%d trees left", len(left))
	}
	if err := RemoveAll(filepath.Join(dir, "missing")); err != nil {
		t.Fatalf("missing tree: %v", err)
	}
}
