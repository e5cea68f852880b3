package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/simtel/simtel/internal/fsutil"
)

// tmpPrefix starts the name of every file a Put has not finished yet; List
// skips such files and keys may not use the prefix.
const tmpPrefix = ".tmp-"

// fileStore keeps objects as files under a directory. Put writes a temporary
// file next to the target, syncs it and renames it into place, then syncs
// the directory, so a crash leaves either the old object or the new one.
type fileStore struct {
	root string // absolute, cleaned
}

func openFile(dir string) (*fileStore, error) {
	if dir == "" {
		return nil, errors.New("file lake URL names no directory: use file:///abs/dir")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("cannot resolve lake directory %q: %w", dir, err)
	}
	if fi, err := os.Stat(abs); err == nil && !fi.IsDir() {
		return nil, fmt.Errorf("lake path %s is a file, not a directory", abs)
	}
	return &fileStore{root: abs}, nil
}

func (s *fileStore) String() string { return "file://" + filepath.ToSlash(s.root) }

func (s *fileStore) path(key string) (string, error) {
	if err := checkKey(key); err != nil {
		return "", err
	}
	return filepath.Join(s.root, filepath.FromSlash(key)), nil
}

func (s *fileStore) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	p, tmp, err := s.writeTemp(ctx, "put", key, r, size)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("cannot rename %s into place: %w", key, err)
	}
	if err := fsutil.SyncDir(filepath.Dir(p)); err != nil {
		// The object is in place; only its durability across a power loss
		// is in doubt, which the caller must hear about.
		return fmt.Errorf("cannot sync directory of %s: %w", key, err)
	}
	return nil
}

// writeTemp writes r durably into a temporary file beside key's path
// (size < 0: any length) and returns both paths; on error nothing is left
// behind. Put renames the file into place, Create links it.
func (s *fileStore) writeTemp(ctx context.Context, op, key string, r io.Reader, size int64) (path, tmp string, err error) {
	p, err := s.path(key)
	if err != nil {
		return "", "", fmt.Errorf("cannot %s %q in %s: %w", op, key, s, err)
	}
	if err := ctx.Err(); err != nil {
		return "", "", fmt.Errorf("%s %s: %w", op, key, err)
	}
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", fmt.Errorf("cannot create directory for %s: %w", key, err)
	}
	f, err := os.CreateTemp(dir, tmpPrefix+"*")
	if err != nil {
		return "", "", fmt.Errorf("cannot create temporary file for %s: %w", key, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	n, err := io.Copy(f, ctxReader{ctx, r})
	if err != nil {
		return "", "", fmt.Errorf("cannot write %s: %w", key, err)
	}
	if size >= 0 && n != size {
		return "", "", fmt.Errorf("cannot write %s: reader gave %d bytes, want %d", key, n, size)
	}
	if err = f.Sync(); err != nil {
		return "", "", fmt.Errorf("cannot sync %s: %w", key, err)
	}
	if err = f.Close(); err != nil {
		return "", "", fmt.Errorf("cannot close %s: %w", key, err)
	}
	return p, f.Name(), nil
}

func (s *fileStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	p, err := s.path(key)
	if err != nil {
		return nil, fmt.Errorf("cannot get %q from %s: %w", key, s, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	f, err := os.Open(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("get %s from %s: %w", key, s, ErrNotFound)
		}
		return nil, fmt.Errorf("cannot open %s: %w", key, err)
	}
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		f.Close()
		return nil, fmt.Errorf("get %s from %s: %w (it is a directory)", key, s, ErrNotFound)
	}
	return f, nil
}

func (s *fileStore) Stat(ctx context.Context, key string) (Object, error) {
	p, err := s.path(key)
	if err != nil {
		return Object{}, fmt.Errorf("cannot stat %q in %s: %w", key, s, err)
	}
	if err := ctx.Err(); err != nil {
		return Object{}, fmt.Errorf("stat %s: %w", key, err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Object{}, fmt.Errorf("stat %s in %s: %w", key, s, ErrNotFound)
		}
		return Object{}, fmt.Errorf("cannot stat %s: %w", key, err)
	}
	if fi.IsDir() {
		return Object{}, fmt.Errorf("stat %s in %s: %w (it is a directory)", key, s, ErrNotFound)
	}
	return Object{Key: key, Size: fi.Size(), ModTime: fi.ModTime()}, nil
}

func (s *fileStore) List(ctx context.Context, prefix string) ([]Object, error) {
	if err := checkPrefix(prefix); err != nil {
		return nil, fmt.Errorf("cannot list %s: %w", s, err)
	}
	// Walk the deepest directory the prefix names in full, filtering names
	// by the rest of the prefix.
	start := s.root
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		start = filepath.Join(s.root, filepath.FromSlash(prefix[:i]))
	}
	var out []Object
	err := filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // a prefix with nothing under it, or a file deleted meanwhile
			}
			return err
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if strings.HasPrefix(d.Name(), tmpPrefix) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(s.root, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if d.IsDir() {
			// Skip directories that cannot hold a matching key.
			if key != "." && !strings.HasPrefix(key+"/", prefix) && !strings.HasPrefix(prefix, key+"/") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasPrefix(key, prefix) || !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		out = append(out, Object{Key: key, Size: fi.Size(), ModTime: fi.ModTime()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cannot list %q in %s: %w", prefix, s, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

func (s *fileStore) Delete(ctx context.Context, key string) error {
	p, err := s.path(key)
	if err != nil {
		return fmt.Errorf("cannot delete %q from %s: %w", key, s, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("cannot delete %s: %w", key, err)
	}
	return nil
}

// LocalPath returns the file that holds key when s keeps its objects in a
// local directory, so readers can use it in place; ok is false for remote
// stores and for keys that are not valid. The file may not exist. A store
// that wraps another (an Unwrap() Store method) is looked through.
func LocalPath(s Store, key string) (string, bool) {
	for {
		w, ok := s.(interface{ Unwrap() Store })
		if !ok {
			break
		}
		s = w.Unwrap()
	}
	fs, isFile := s.(*fileStore)
	if !isFile {
		return "", false
	}
	p, err := fs.path(key)
	if err != nil {
		return "", false
	}
	return p, true
}

// ctxReader stops a long copy when its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
