package learner

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/simtel/simtel/internal/fsutil"
)

// Names inside a policy's cache directory.
const (
	latestLink = "latest"
	// tmpPrefix starts every temporary name (blobs being written,
	// manifests, links), each made unique so that two subscribers sharing
	// a directory (two agents of different jobs on one node) never write
	// the same file.
	tmpPrefix = ".tmp-"
	// staleTemp is the age after which load removes a temporary file: the
	// leftover of a crash, not the transfer of a live neighbour.
	staleTemp = 10 * time.Minute
)

// cache is one policy's directory of verified versions:
//
//	<version>       the blob
//	<version>.json  its manifest
//	latest          symlink to <version>, swapped by renaming a new link over it
//	.tmp-<version>-<random>  a version being written (never seen by readers)
//
// A version is installed in an order that a crash at any point leaves
// either the old state or the new one: blob renamed into place, then its
// manifest, then the link. load ignores (and removes) a blob without its
// manifest. The cache is used by one goroutine at a time (the
// Subscriber's Run, or NewSubscriber before it).
type cache struct {
	dir  string
	keep int
	log  *slog.Logger
	// trust, if set, must accept a cached version's manifest before
	// load serves it.
	trust func(Manifest) error
}

func openCache(root, policy string, keep int, log *slog.Logger) (*cache, error) {
	dir := filepath.Join(root, policy)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cannot create policy cache %s: %w", dir, err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("cannot resolve policy cache %s: %w", dir, err)
	}
	return &cache{dir: abs, keep: keep, log: log}, nil
}

func (c *cache) path(v int64) string { return filepath.Join(c.dir, strconv.FormatInt(v, 10)) }

// load returns the newest version whose blob still matches its manifest,
// re-hashing it. Versions that fail are removed, and the next older one
// is tried; so are leftovers of interrupted writes. The latest link is
// made to point at the result.
func (c *cache) load(policy string) (m Manifest, path string, ok bool, err error) {
	ents, err := os.ReadDir(c.dir)
	if err != nil {
		return m, "", false, fmt.Errorf("cannot read policy cache %s: %w", c.dir, err)
	}
	blobs := map[int64]bool{}
	manifests := map[int64]bool{}
	for _, e := range ents {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, tmpPrefix):
			if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > staleTemp {
				c.remove(name)
			}
		case strings.HasSuffix(name, ".json"):
			if v, err := parseDecimal(strings.TrimSuffix(name, ".json"), 1, 1<<62); err == nil {
				manifests[v] = true
			}
		default:
			if v, err := parseDecimal(name, 1, 1<<62); err == nil && e.Type().IsRegular() {
				blobs[v] = true
			}
		}
	}
	var versions []int64
	for v := range blobs {
		if manifests[v] {
			versions = append(versions, v)
		} else {
			c.remove(strconv.FormatInt(v, 10)) // blob whose install was interrupted
		}
	}
	for v := range manifests {
		if !blobs[v] {
			c.remove(strconv.FormatInt(v, 10) + ".json")
		}
	}
	slices.Sort(versions)
	for i := len(versions) - 1; i >= 0; i-- {
		v := versions[i]
		got, err := c.check(policy, v)
		if err == nil {
			if err := c.link(v); err != nil {
				return m, "", false, err
			}
			return got, c.path(v), true, nil
		}
		c.log.Warn("discarding cached policy version", "policy", policy, "version", v, "err", err)
		c.removeVersion(v)
	}
	c.remove(latestLink)
	return m, "", false, nil
}

// check reads version v's manifest and re-hashes its blob.
func (c *cache) check(policy string, v int64) (Manifest, error) {
	var m Manifest
	b, err := os.ReadFile(c.path(v) + ".json")
	if err != nil {
		return m, fmt.Errorf("cannot read manifest: %w", err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%w: manifest is not JSON: %v", ErrCorrupt, err)
	}
	if err := m.Validate(); err != nil {
		return m, fmt.Errorf("%w: manifest: %v", ErrCorrupt, err)
	}
	if m.Policy != policy || m.Version != v {
		return m, fmt.Errorf("%w: manifest is for %s version %d", ErrCorrupt, m.Policy, m.Version)
	}
	if c.trust != nil {
		if err := c.trust(m); err != nil {
			return m, err
		}
	}
	return m, verifyFile(c.path(v), m)
}

// verifyFile checks that the file at path is the blob m describes.
func verifyFile(path string, m Manifest) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("cannot open %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return fmt.Errorf("cannot read %s: %w", path, err)
	}
	if n != m.Size {
		return fmt.Errorf("%w: %s holds %d bytes, the manifest says %d", ErrCorrupt, path, n, m.Size)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != m.SHA256 {
		return fmt.Errorf("%w: %s has sha256 %s, the manifest says %s", ErrCorrupt, path, sum, m.SHA256)
	}
	return nil
}

// create opens a new temporary file for version v.
func (c *cache) create(v int64) (*os.File, error) {
	f, err := os.CreateTemp(c.dir, tmpPrefix+strconv.FormatInt(v, 10)+"-*")
	if err != nil {
		return nil, fmt.Errorf("cannot create a temporary file in %s: %w", c.dir, err)
	}
	if err := f.Chmod(0o644); err != nil {
		c.discard(f)
		return nil, fmt.Errorf("cannot make %s readable: %w", f.Name(), err)
	}
	return f, nil
}

// discard closes and removes a temporary file.
func (c *cache) discard(f *os.File) {
	f.Close()
	if err := os.Remove(f.Name()); err != nil && !errors.Is(err, os.ErrNotExist) {
		c.log.Warn("cannot remove temporary policy file", "path", f.Name(), "err", err)
	}
}

// install makes the verified temporary file f version m: it syncs f,
// renames it into place, writes the manifest, swaps the latest link and
// drops versions beyond keep. It returns the blob's path. f is closed.
func (c *cache) install(m Manifest, f *os.File) (string, error) {
	err := f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("cannot sync %s: %w", f.Name(), err)
	}
	path := c.path(m.Version)
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("cannot install %s: %w", path, err)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return "", fmt.Errorf("cannot encode manifest: %w", err)
	}
	manifest := path + ".json"
	if err := fsutil.WriteFile(manifest, append(b, '\n'), fsutil.WriteOptions{TempPattern: tmpPrefix + filepath.Base(manifest) + "-*"}); err != nil {
		return "", fmt.Errorf("cannot save manifest %s: %w", manifest, err)
	}
	if err := c.link(m.Version); err != nil {
		return "", err
	}
	c.prune(m.Version)
	return path, nil
}

// link points latest at version v: a new symlink is made under a
// temporary name and renamed over the old one, so a reader resolving
// latest sees either the old or the new version, never neither.
func (c *cache) link(v int64) error {
	target := strconv.FormatInt(v, 10)
	if cur, err := os.Readlink(filepath.Join(c.dir, latestLink)); err == nil && cur == target {
		return nil
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	tmp := filepath.Join(c.dir, tmpPrefix+"latest-"+hex.EncodeToString(rnd[:]))
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("cannot create link %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, filepath.Join(c.dir, latestLink)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("cannot swap link %s: %w", filepath.Join(c.dir, latestLink), err)
	}
	return fsutil.SyncDir(c.dir)
}

// prune removes all but the keep newest versions; held always stays.
// Workers that still have an old file open keep reading it.
func (c *cache) prune(held int64) {
	ents, err := os.ReadDir(c.dir)
	if err != nil {
		c.log.Warn("cannot read policy cache", "dir", c.dir, "err", err)
		return
	}
	var versions []int64
	for _, e := range ents {
		if v, err := parseDecimal(e.Name(), 1, 1<<62); err == nil {
			versions = append(versions, v)
		}
	}
	slices.Sort(versions)
	for i, v := range versions {
		if i < len(versions)-c.keep && v != held {
			c.removeVersion(v)
		}
	}
}

func (c *cache) removeVersion(v int64) {
	c.remove(strconv.FormatInt(v, 10))
	c.remove(strconv.FormatInt(v, 10) + ".json")
}

func (c *cache) remove(name string) {
	if err := os.Remove(filepath.Join(c.dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		c.log.Warn("cannot remove policy cache file", "path", filepath.Join(c.dir, name), "err", err)
	}
}

// modTime is when the blob of version v was written (zero if unknown).
func (c *cache) modTime(v int64) time.Time {
	fi, err := os.Stat(c.path(v))
	if err != nil {
		return time.Time{}
	}
	return fi.ModTime()
}
