package learner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A format 2 version is assembled when its manifest arrives, because only
// the manifest says where each chunk goes. Its chunks come from, in order
// of preference:
//
//  1. the spool: this version's chunk records as the followed stream
//     delivered them, kept in a temporary file so that no byte crosses the
//     network twice;
//  2. the versions in the node's cache, by hash (a delta's unchanged
//     chunks on a node that holds the base);
//  3. the peers of the node's pool, when the subscriber has a ChunkSource
//     (peers.go);
//  4. the topic, read by offset (the chunks a node lacks, wherever they
//     are: the base's records or older ones).
//
// Every chunk is checked against its xxh3-128 as it is taken; a local or
// spooled chunk that fails is taken from the topic instead, a topic record
// that fails makes the version corrupt. The assembled file is then checked
// against the manifest's SHA-256 like a format 1 version, and installed
// the same way (temporary file, rename, latest swap).

// spoolAsm holds the chunk records of one format 2 version seen on the
// followed stream.
type spoolAsm struct {
	version int64
	publish string
	f       *os.File
	size    int64
	at      map[int64][2]int64 // record offset -> position and length in f
	hashes  map[int64]string   // record offset -> xxh3-128 of its value (chunkHash)
	// sha is the SHA-256 of f's bytes so far, in the order written: when
	// the spool is the whole version in order (a full version streamed
	// from its first chunk), it is the version's, and the spool is the
	// version's file, so its bytes are written once and never read back.
	sha hash.Hash
}

// spoolChunk keeps a format 2 chunk record of the stream.
func (s *Subscriber) spoolChunk(r *kgo.Record, h recordHeader) {
	if h.index == 0 {
		s.dropSpool()
		f, err := s.cache.create(h.version)
		if err != nil {
			s.log.Warn("cannot spool policy version", "version", h.version, "err", err)
			return
		}
		s.spool = &spoolAsm{version: h.version, publish: h.publish, f: f, at: map[int64][2]int64{}, hashes: map[int64]string{}, sha: sha256.New()}
	}
	sp := s.spool
	if sp == nil || sp.version != h.version || sp.publish != h.publish || len(r.Value) > MaxChunkSize {
		return
	}
	if _, err := sp.f.WriteAt(r.Value, sp.size); err != nil {
		s.log.Warn("cannot spool policy version", "version", h.version, "err", err)
		s.dropSpool()
		return
	}
	sp.at[r.Offset] = [2]int64{sp.size, int64(len(r.Value))}
	sp.hashes[r.Offset] = chunkHash(r.Value)
	sp.sha.Write(r.Value)
	sp.size += int64(len(r.Value))
}

// whole reports whether sp holds exactly m's chunks, in order, each at its
// place in the version and matching its hash: then sp.f is the version.
func (sp *spoolAsm) whole(m Manifest) bool {
	if sp == nil || sp.size != m.Size {
		return false
	}
	var pos int64
	for _, c := range m.ChunkList {
		if at, ok := sp.at[c.Offset]; !ok || at != [2]int64{pos, int64(c.Size)} || sp.hashes[c.Offset] != c.Hash {
			return false
		}
		pos += int64(c.Size)
	}
	return true
}

// takeSpool returns the spool of m's records, if any, and forgets it.
func (s *Subscriber) takeSpool(m Manifest) *spoolAsm {
	sp := s.spool
	if sp == nil || sp.version > m.Version {
		return nil
	}
	s.spool = nil
	if sp.version == m.Version && sp.publish == m.PublishID {
		return sp
	}
	s.cache.discard(sp.f)
	return nil
}

func (s *Subscriber) dropSpool() {
	if s.spool != nil {
		s.cache.discard(s.spool.f)
		s.spool = nil
	}
}

// CachedChunk is a chunk of an installed format 2 version: Size bytes at
// Pos in the version's file Path.
type CachedChunk struct {
	Path string
	Pos  int64
	Size int
}

// CachedChunks indexes by hash the chunks of the installed format 2
// versions of policy in the cache under root (SubscriberConfig.Dir), and
// lists those versions. A version counts as installed once its manifest
// is in place (the cache renames the verified file into place before it).
// The files were verified when installed; whoever reads a chunk from them
// checks it again, or leaves that to its receiver.
func CachedChunks(root, policy string) (map[string]CachedChunk, []int64) {
	return chunksIn(filepath.Join(root, policy), policy)
}

// localChunks is CachedChunks of the cache's policy.
func (c *cache) localChunks(policy string) map[string]CachedChunk {
	idx, _ := chunksIn(c.dir, policy)
	return idx
}

func chunksIn(dir, policy string) (map[string]CachedChunk, []int64) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil
	}
	idx := map[string]CachedChunk{}
	var versions []int64
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		v, err := parseDecimal(name, 1, 1<<62)
		if err != nil {
			continue
		}
		path := filepath.Join(dir, name)
		b, err := os.ReadFile(path + ".json")
		if err != nil {
			continue
		}
		var m Manifest
		if json.Unmarshal(b, &m) != nil || m.Format < Format2 || m.Policy != policy || m.Validate() != nil {
			continue
		}
		versions = append(versions, v)
		var pos int64
		for _, ch := range m.ChunkList {
			if _, dup := idx[ch.Hash]; !dup {
				idx[ch.Hash] = CachedChunk{Path: path, Pos: pos, Size: ch.Size}
			}
			pos += int64(ch.Size)
		}
	}
	return idx, versions
}

// assemble2 builds format 2 version m in a new temporary file and checks
// it; sp is its spooled records (nil: none). The file is returned for
// install; on error it is already discarded.
func (s *Subscriber) assemble2(ctx context.Context, cl *kgo.Client, m Manifest, sp *spoolAsm) (_ *os.File, err error) {
	if sp.whole(m) {
		if sum := hex.EncodeToString(sp.sha.Sum(nil)); sum != m.SHA256 {
			s.cache.discard(sp.f)
			return nil, fmt.Errorf("%w: streamed %d bytes with sha256 %s, the manifest says %s", ErrCorrupt, sp.size, sum, m.SHA256)
		}
		var pos int64
		for i, c := range m.ChunkList {
			s.wrote(m, i, sp.f, pos)
			pos += int64(c.Size)
		}
		return sp.f, nil
	}
	if sp != nil {
		defer s.cache.discard(sp.f)
	}
	f, err := s.cache.create(m.Version)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.cache.discard(f)
		}
	}()
	if err := f.Truncate(m.Size); err != nil {
		return nil, fmt.Errorf("cannot size %s: %w", f.Name(), err)
	}
	local := s.cache.localChunks(s.cfg.Policy)
	files := map[string]*os.File{}
	defer func() {
		for _, lf := range files {
			lf.Close()
		}
	}()
	buf := make([]byte, MaxChunkSize)
	// take reads a chunk from r at pos into buf and checks it.
	take := func(r io.ReaderAt, pos int64, c ChunkRef) []byte {
		b := buf[:c.Size]
		if _, err := r.ReadAt(b, pos); err != nil || chunkHash(b) != c.Hash {
			return nil
		}
		return b
	}
	positions := make([]int64, len(m.ChunkList))
	missing := map[int64][]int{} // record offset -> chunks it holds
	var pos, reused int64
	for i, c := range m.ChunkList {
		positions[i] = pos
		pos += int64(c.Size)
		var b []byte
		if at, ok := sp.lookup(c.Offset); ok && at[1] == int64(c.Size) {
			b = take(sp.f, at[0], c)
		}
		if lc, ok := local[c.Hash]; ok && b == nil {
			lf := files[lc.Path]
			if lf == nil {
				if lf, err = os.Open(lc.Path); err == nil {
					files[lc.Path] = lf
				}
			}
			if lf != nil {
				if b = take(lf, lc.Pos, c); b != nil {
					reused += int64(c.Size)
				}
			}
		}
		if b == nil {
			missing[c.Offset] = append(missing[c.Offset], i)
			continue
		}
		if _, err := f.WriteAt(b, positions[i]); err != nil {
			return nil, fmt.Errorf("cannot write chunk %d: %w", i, err)
		}
		s.wrote(m, i, f, positions[i])
	}
	s.addStats(0, reused)
	if len(missing) > 0 && s.cfg.Peers != nil {
		if missing, err = s.fromPeers(ctx, m, missing, f, positions); err != nil {
			return nil, err
		}
	}
	if len(missing) > 0 {
		err := s.fetchRecords(ctx, cl, m, missing, func(off int64, value []byte) error {
			for _, i := range missing[off] {
				c := m.ChunkList[i]
				if len(value) != c.Size || chunkHash(value) != c.Hash {
					return fmt.Errorf("%w: the record at offset %d holds %d bytes that do not match chunk %d (%d bytes, xxh3 %s)", ErrCorrupt, off, len(value), i, c.Size, c.Hash)
				}
				if _, err := f.WriteAt(value, positions[i]); err != nil {
					return fmt.Errorf("cannot write chunk %d: %w", i, err)
				}
				s.wrote(m, i, f, positions[i])
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	// The chunks matched their hashes; the whole must match the
	// manifest's SHA-256, which is what a signature vouches for.
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return nil, fmt.Errorf("cannot read back %s: %w", f.Name(), err)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); n != m.Size || sum != m.SHA256 {
		return nil, fmt.Errorf("%w: assembled %d bytes with sha256 %s, the manifest says %d bytes, %s", ErrCorrupt, n, sum, m.Size, m.SHA256)
	}
	return f, nil
}

func (sp *spoolAsm) lookup(off int64) ([2]int64, bool) {
	if sp == nil {
		return [2]int64{}, false
	}
	at, ok := sp.at[off]
	return at, ok
}

// recordGap is how many unwanted records a read of wanted records crosses
// before it is split in two reads: skipping a few chunks costs less than
// a new consume session, skipping many does not.
const recordGap = 16

// fetchRecords reads the records at the offsets of want from the topic
// and hands each value to fn once.
func (s *Subscriber) fetchRecords(ctx context.Context, cl *kgo.Client, m Manifest, want map[int64][]int, fn func(off int64, value []byte) error) error {
	offs := make([]int64, 0, len(want))
	for o := range want {
		offs = append(offs, o)
	}
	slices.Sort(offs)
	start, end, exists, err := logRange(ctx, cl, s.topic)
	switch {
	case err != nil:
		return err
	case !exists:
		return fmt.Errorf("cannot fetch %s version %d: the topic does not exist", s.topic, m.Version)
	case offs[0] < start:
		return fmt.Errorf("%w: %s version %d needs the record at offset %d, the log starts at %d (its base was deleted; publish a full version)", ErrMissing, s.topic, m.Version, offs[0], start)
	case offs[len(offs)-1] >= end:
		return fmt.Errorf("%w: %s version %d: a chunk at offset %d is beyond the log end %d", ErrCorrupt, s.topic, m.Version, offs[len(offs)-1], end)
	}
	for len(offs) > 0 {
		n := 1
		for n < len(offs) && offs[n]-offs[n-1] <= recordGap {
			n++
		}
		if err := s.readRun(ctx, cl, m, offs[:n], fn); err != nil {
			return err
		}
		offs = offs[n:]
	}
	return nil
}

// readRun reads the sorted offsets offs with one consume session.
func (s *Subscriber) readRun(ctx context.Context, cl *kgo.Client, m Manifest, offs []int64, fn func(off int64, value []byte) error) error {
	c, err := derive(cl, consumeOpts(s.topic, offs[0], sessionFetchBytes)...)
	if err != nil {
		return err
	}
	defer c.Close()
	next := 0
	for next < len(offs) {
		fs := c.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fetchErr(fs); err != nil {
			if errors.Is(err, kerr.OffsetOutOfRange) {
				return fmt.Errorf("%w: %s version %d: %v", ErrMissing, s.topic, m.Version, err)
			}
			return fmt.Errorf("cannot fetch %s version %d: %w", s.topic, m.Version, err)
		}
		var ferr error
		fs.EachRecord(func(r *kgo.Record) {
			if ferr != nil || next >= len(offs) {
				return
			}
			s.addStats(int64(len(r.Value)), 0)
			if offs[next] < r.Offset {
				ferr = fmt.Errorf("%w: %s version %d: no record at offset %d", ErrCorrupt, s.topic, m.Version, offs[next])
				return
			}
			if r.Offset == offs[next] {
				ferr = fn(r.Offset, r.Value)
				next++
			}
		})
		if ferr != nil {
			return ferr
		}
	}
	return nil
}
