package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// Cache gives readers (DuckDB) local files for lake objects. For a local
// lake it returns the object's own file; for a remote one it downloads a
// copy into its directory, reuses it while its size matches the object's,
// and removes the least recently used copies when they exceed the byte
// limit. Safe for concurrent use; concurrent requests for one key download
// it once. Several processes may share a directory: files appear by rename
// only.
//
// A path stays valid until it is evicted, so maxBytes should exceed what
// one reader uses at a time (a query's working set); files already open
// survive eviction.
type Cache struct {
	s        Store
	dir      string // this store's subdirectory of the cache directory
	maxBytes int64

	mu struct {
		sync.Mutex
		scanned  bool
		files    map[string]*cacheFile // by file name in dir
		total    int64
		inflight map[string]*download // by key
		stats    CacheStats
	}
}

type cacheFile struct {
	size    int64
	lastUse time.Time
}

type download struct {
	done chan struct{}
	path string
	err  error
}

// CacheStats counts what a Cache did.
type CacheStats struct {
	Hits            int64 // a cached copy was reused
	Downloads       int64 // objects downloaded
	DownloadedBytes int64
	Evictions       int64 // copies removed to stay under the limit
	Bytes           int64 // held now
}

// NewCache caches objects of s under dir (a subdirectory per lake, so one
// directory can serve several lakes), keeping at most maxBytes of copies
// (0 or less: no limit).
func NewCache(s Store, dir string, maxBytes int64) *Cache {
	sum := sha256.Sum256([]byte(s.String()))
	c := &Cache{s: s, dir: filepath.Join(dir, "objects-"+hex.EncodeToString(sum[:8])), maxBytes: maxBytes}
	c.mu.files = map[string]*cacheFile{}
	c.mu.inflight = map[string]*download{}
	return c
}

// Stats returns the counters so far.
func (c *Cache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.mu.stats
	st.Bytes = c.mu.total
	return st
}

// fileName is the copy's name: a hash of the key (unique, flat) plus the
// key's base name, so readers that look at extensions see ".parquet".
func fileName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:12]) + "-" + path.Base(key)
}

// Path returns a local file holding the object key. A missing object gives
// an error wrapping ErrNotFound.
func (c *Cache) Path(ctx context.Context, key string) (string, error) {
	if p, ok := LocalPath(c.s, key); ok {
		fi, err := os.Stat(p)
		if err != nil || fi.IsDir() {
			if err == nil || errors.Is(err, fs.ErrNotExist) {
				return "", fmt.Errorf("object %s in %s: %w", key, c.s, ErrNotFound)
			}
			return "", fmt.Errorf("cannot stat %s: %w", key, err)
		}
		return p, nil
	}
	if err := checkKey(key); err != nil {
		return "", fmt.Errorf("cannot cache %q: %w", key, err)
	}
	obj, err := c.s.Stat(ctx, key)
	if err != nil {
		return "", err
	}
	name := fileName(key)
	p := filepath.Join(c.dir, name)

	c.mu.Lock()
	c.scanLocked()
	if f, ok := c.mu.files[name]; ok && f.size == obj.Size {
		if _, err := os.Stat(p); err == nil {
			f.lastUse = time.Now()
			c.mu.stats.Hits++
			c.mu.Unlock()
			_ = os.Chtimes(p, time.Time{}, f.lastUse) // remembered across processes
			return p, nil
		}
		c.forgetLocked(name) // removed behind our back
	}
	if d, ok := c.mu.inflight[key]; ok {
		c.mu.Unlock()
		select {
		case <-d.done:
			return d.path, d.err
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	d := &download{done: make(chan struct{})}
	c.mu.inflight[key] = d
	c.mu.Unlock()

	// The download runs under this caller's context; callers waiting on it
	// see its error and may retry.
	d.path, d.err = c.download(ctx, key, p, obj.Size)

	c.mu.Lock()
	delete(c.mu.inflight, key)
	if d.err == nil {
		c.forgetLocked(name)
		c.mu.files[name] = &cacheFile{size: obj.Size, lastUse: time.Now()}
		c.mu.total += obj.Size
		c.mu.stats.Downloads++
		c.mu.stats.DownloadedBytes += obj.Size
		c.evictLocked(name)
	}
	c.mu.Unlock()
	close(d.done)
	return d.path, d.err
}

func (c *Cache) download(ctx context.Context, key, p string, size int64) (string, error) {
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return "", fmt.Errorf("cannot create cache directory %s: %w", c.dir, err)
	}
	rc, err := c.s.Get(ctx, key)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	f, err := os.CreateTemp(c.dir, tmpPrefix+"*")
	if err != nil {
		return "", fmt.Errorf("cannot create a file in cache directory %s: %w", c.dir, err)
	}
	n, err := io.Copy(f, ctxReader{ctx, rc})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != size {
		err = fmt.Errorf("got %d bytes, want %d (object changed while downloading?)", n, size)
	}
	if err == nil {
		err = os.Rename(f.Name(), p)
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("cannot download %s from %s into the cache: %w", key, c.s, err)
	}
	return p, nil
}

// scanLocked indexes the copies an earlier process left, once, using file
// modification times as last use, and removes abandoned temporary files.
func (c *Cache) scanLocked() {
	if c.mu.scanned {
		return
	}
	c.mu.scanned = true
	ents, err := os.ReadDir(c.dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			if time.Since(fi.ModTime()) > time.Hour {
				os.Remove(filepath.Join(c.dir, e.Name()))
			}
			continue
		}
		c.mu.files[e.Name()] = &cacheFile{size: fi.Size(), lastUse: fi.ModTime()}
		c.mu.total += fi.Size()
	}
	c.evictLocked("")
}

func (c *Cache) forgetLocked(name string) {
	if f, ok := c.mu.files[name]; ok {
		c.mu.total -= f.size
		delete(c.mu.files, name)
	}
}

// evictLocked removes least recently used copies until the total is within
// the limit, sparing keep (the copy about to be returned).
func (c *Cache) evictLocked(keep string) {
	if c.maxBytes <= 0 || c.mu.total <= c.maxBytes {
		return
	}
	names := make([]string, 0, len(c.mu.files))
	for n := range c.mu.files {
		if n != keep {
			names = append(names, n)
		}
	}
	sort.Slice(names, func(i, j int) bool { return c.mu.files[names[i]].lastUse.Before(c.mu.files[names[j]].lastUse) })
	for _, n := range names {
		if c.mu.total <= c.maxBytes {
			break
		}
		if err := os.Remove(filepath.Join(c.dir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		c.forgetLocked(n)
		c.mu.stats.Evictions++
	}
}
