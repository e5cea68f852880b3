package learner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ErrCorrupt is returned (wrapped with what differed) by Fetch when the
// chunks of a version do not match its manifest: a missing, duplicated or
// out-of-order chunk, a wrong size or a wrong SHA-256. What Fetch wrote
// before returning it must be discarded.
var ErrCorrupt = errors.New("corrupt policy version")

// ErrConflict is returned by Publish when another publisher completed the
// version number this one picked while it was writing. The chunks written
// are garbage that readers skip; publish again.
var ErrConflict = errors.New("policy version published concurrently")

const (
	// sessionFetchBytes bounds one fetch response of a dedicated session
	// (and so the bytes a session buffers): a few chunks per round trip
	// without letting a thousand subscribers on one host hold gigabytes.
	sessionFetchBytes = 4 << 20
	// maxLatestHops bounds the records Latest reads while stepping back
	// over unfinished versions.
	maxLatestHops = 64
)

// derive makes a new client for a dedicated session from cl's options: the
// connection options (seeds, TLS, SASL, dialer, logger, hooks) stay, the
// producer, consumer and group options are dropped, extra is added.
func derive(cl *kgo.Client, extra ...kgo.Opt) (*kgo.Client, error) {
	return newClient(append(connOpts(cl.Opts()), extra...))
}

// connOpts keeps the options that are not producer, consumer or group
// options.
func connOpts(opts []kgo.Opt) []kgo.Opt {
	var out []kgo.Opt
	for _, o := range opts {
		switch o.(type) {
		case kgo.ProducerOpt, kgo.ConsumerOpt, kgo.GroupOpt:
			continue
		}
		out = append(out, o)
	}
	return out
}

func newClient(opts []kgo.Opt) (*kgo.Client, error) {
	c, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("cannot create kafka client: %w", err)
	}
	return c, nil
}

// consumeOpts consume partition 0 of topic from offset at, failing (not
// resetting) if at is out of range.
func consumeOpts(topic string, at int64, maxBytes int32) []kgo.Opt {
	return []kgo.Opt{
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(at)}}),
		kgo.ConsumeResetOffset(kgo.NoResetOffset()),
		kgo.FetchMaxBytes(maxBytes),
		kgo.FetchMaxPartitionBytes(maxBytes),
	}
}

// logRange returns partition 0's log start and end offsets; exists is
// false if the topic (or its partition 0) does not exist.
func logRange(ctx context.Context, cl *kgo.Client, topic string) (start, end int64, exists bool, err error) {
	start, end, exists, err = listRange(ctx, cl, topic)
	if err == nil && !exists && refreshMetadata(ctx, cl, topic) {
		// kadm answers from kgo's metadata cache, which remembers a
		// missing topic for MetadataMinAge (5s by default); the direct
		// request above refreshed it.
		start, end, exists, err = listRange(ctx, cl, topic)
	}
	return start, end, exists, err
}

// refreshMetadata asks a broker about topic directly, which also updates
// cl's metadata cache, and reports whether the topic exists.
func refreshMetadata(ctx context.Context, cl *kgo.Client, topic string) bool {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	return err == nil && len(resp.Topics) == 1 && resp.Topics[0].ErrorCode == 0
}

func listRange(ctx context.Context, cl *kgo.Client, topic string) (start, end int64, exists bool, err error) {
	adm := kadm.NewClient(cl) // no Close: it would close cl
	get := func(list func(context.Context, ...string) (kadm.ListedOffsets, error)) (int64, bool, error) {
		lo, err := list(ctx, topic)
		if err != nil {
			return 0, false, err
		}
		o, ok := lo.Lookup(topic, 0)
		if !ok || errors.Is(o.Err, kerr.UnknownTopicOrPartition) {
			return 0, false, nil
		}
		return o.Offset, true, o.Err
	}
	if start, exists, err = get(adm.ListStartOffsets); err != nil || !exists {
		return 0, 0, exists, wrapList(topic, err)
	}
	if end, exists, err = get(adm.ListEndOffsets); err != nil || !exists {
		return 0, 0, exists, wrapList(topic, err)
	}
	return start, end, true, nil
}

func wrapList(topic string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("cannot list offsets of %s: %w", topic, err)
}

// readAt returns the first record at or after offset off of partition 0,
// which must be below the high watermark.
func readAt(ctx context.Context, cl *kgo.Client, topic string, off int64) (*kgo.Record, error) {
	// One byte per partition: the broker still sends the first batch
	// whole (KIP-74), and nothing more.
	c, err := derive(cl, consumeOpts(topic, off, 1)...)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	for {
		fs := c.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := fetchErr(fs); err != nil {
			return nil, fmt.Errorf("cannot read %s at offset %d: %w", topic, off, err)
		}
		var got *kgo.Record
		fs.EachRecord(func(r *kgo.Record) {
			if got == nil && r.Offset >= off {
				got = r
			}
		})
		if got != nil {
			return got, nil
		}
	}
}

// fetchErr returns the first error of a poll that ended without ctx
// ending; kgo only surfaces errors it does not retry itself.
func fetchErr(fs kgo.Fetches) error {
	var first error
	fs.EachError(func(_ string, _ int32, err error) {
		if first == nil {
			first = err
		}
	})
	return first
}

// Latest finds the newest complete version of policy. It reads the last
// record of the topic; a manifest ends the search. A chunk belongs to a
// version still being written (or abandoned by a killed publisher): the
// search steps back before that version's first chunk (offset - index) and
// reads again, at most a bounded number of times. It returns
// (Manifest{}, false, nil) for an empty or absent topic, or when no
// manifest is left on it.
func Latest(ctx context.Context, cl *kgo.Client, policy string) (Manifest, bool, error) {
	if err := CheckPolicyName(policy); err != nil {
		return Manifest{}, false, err
	}
	topic := Topic(policy)
	start, end, exists, err := logRange(ctx, cl, topic)
	if err != nil || !exists {
		return Manifest{}, false, err
	}
	return latestBefore(ctx, cl, policy, start, end)
}

// latestBefore is Latest over the records [start, end).
func latestBefore(ctx context.Context, cl *kgo.Client, policy string, start, end int64) (Manifest, bool, error) {
	topic := Topic(policy)
	o := end - 1
	for hop := 0; o >= start; hop++ {
		if hop == maxLatestHops {
			return Manifest{}, false, fmt.Errorf("no manifest of %s within %d steps back from offset %d", topic, maxLatestHops, end-1)
		}
		r, err := readAt(ctx, cl, topic, o)
		if err != nil {
			return Manifest{}, false, err
		}
		next := r.Offset - 1
		if h, err := parseHeaders(r.Headers); err == nil {
			switch h.kind {
			case KindManifest:
				m, err := decodeManifest(r.Value, h)
				if err == nil && m.Policy == policy {
					m.Offset = r.Offset
					return m, true, nil
				}
			case KindChunk:
				next = r.Offset - int64(h.index) - 1
			}
		}
		// readAt may return a later record if o was deleted or
		// compacted away; always move strictly back from o.
		o = min(next, o-1)
	}
	return Manifest{}, false, nil
}

// previous finds the newest complete version before m on the topic.
func previous(ctx context.Context, cl *kgo.Client, m Manifest) (Manifest, bool, error) {
	start, _, exists, err := logRange(ctx, cl, Topic(m.Policy))
	if err != nil || !exists {
		return Manifest{}, false, err
	}
	return latestBefore(ctx, cl, m.Policy, start, m.Offset)
}

// Fetch reads the chunks of m with a dedicated consume session over the
// offsets [m.FirstChunkOffset, m.LastChunkOffset] of partition 0, writes
// them to w in index order, and verifies count, size and SHA-256. A
// mismatch returns an error wrapping ErrCorrupt; chunks deleted by
// retention return an error wrapping kerr.OffsetOutOfRange. After any
// error the caller must discard what was written to w. cl is only used for
// its connection options and for listing offsets.
func Fetch(ctx context.Context, cl *kgo.Client, m Manifest, w io.Writer) error {
	return fetch(ctx, cl, m, w, sessionFetchBytes)
}

func fetch(ctx context.Context, cl *kgo.Client, m Manifest, w io.Writer, maxBytes int32) error {
	if err := m.Validate(); err != nil {
		return fmt.Errorf("%w: manifest of version %d: %v", ErrCorrupt, m.Version, err)
	}
	a := newAssembler(m.Version, m.PublishID, w)
	if m.Chunks == 0 {
		return a.verify(m)
	}
	topic := Topic(m.Policy)
	start, end, exists, err := logRange(ctx, cl, topic)
	switch {
	case err != nil:
		return err
	case !exists:
		return fmt.Errorf("cannot fetch %s version %d: the topic does not exist", topic, m.Version)
	case m.FirstChunkOffset < start:
		return fmt.Errorf("cannot fetch %s version %d: its chunks start at offset %d, the log at %d: %w", topic, m.Version, m.FirstChunkOffset, start, kerr.OffsetOutOfRange)
	case m.LastChunkOffset >= end:
		return fmt.Errorf("%w: %s version %d: chunks end at offset %d, beyond the log end %d", ErrCorrupt, topic, m.Version, m.LastChunkOffset, end)
	}
	c, err := derive(cl, consumeOpts(topic, m.FirstChunkOffset, maxBytes)...)
	if err != nil {
		return err
	}
	defer c.Close()
	for {
		fs := c.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fetchErr(fs); err != nil {
			return fmt.Errorf("cannot fetch %s version %d: %w", topic, m.Version, err)
		}
		done := false
		var aerr error
		fs.EachRecord(func(r *kgo.Record) {
			if done || aerr != nil || r.Offset < m.FirstChunkOffset {
				return
			}
			if r.Offset > m.LastChunkOffset {
				done = true
				return
			}
			if h, err := parseHeaders(r.Headers); err == nil && m.matches(h) {
				aerr = a.add(r.Offset, h.index, r.Value, m.Size)
			}
			done = r.Offset == m.LastChunkOffset
		})
		if aerr != nil {
			return fmt.Errorf("%s version %d: %w", topic, m.Version, aerr)
		}
		if done {
			if err := a.verify(m); err != nil {
				return fmt.Errorf("%s version %d: %w", topic, m.Version, err)
			}
			return nil
		}
	}
}

// writePiece is how much of a chunk the assembler writes (and then hashes)
// at a time. A 32 KiB write into tmpfs returns in about 10 µs, before the
// Go runtime hands the blocked thread's P to another thread (after 20 µs
// in a syscall); a whole 1 MiB chunk takes ~350 µs, so with many
// subscribers in one process (the fan-out benchmark's 50 emulated nodes)
// nearly every chunk cost a handoff and thread switches. Hashing each
// piece right after writing it also reads it while it is still in cache.
// Measured with `simtel bench fanout --nodes 50 --workers-per-node 20`:
// in three alternating pairs against 1 MiB writes, 53k → 32k context
// switches and 4.4 → 3.9 CPU s for the bench process.
const writePiece = 32 << 10

// assembler takes the chunks of one version in order, writes them and
// hashes them as they pass, so no blob is ever held in memory.
type assembler struct {
	version     int64
	publish     string
	w           io.Writer
	h           hash.Hash
	next        int   // index of the next chunk expected
	size        int64 // bytes written
	first, last int64 // offsets of chunk 0 and of the last chunk added
}

func newAssembler(version int64, publish string, w io.Writer) *assembler {
	return &assembler{version: version, publish: publish, w: w, h: sha256.New(), first: -1, last: -1}
}

// add appends chunk index at offset off. limit bounds the total size
// (the manifest's, or -1 when not known yet).
func (a *assembler) add(off int64, index int, value []byte, limit int64) error {
	switch {
	case index != a.next:
		return fmt.Errorf("%w: chunk %d at offset %d, want chunk %d", ErrCorrupt, index, off, a.next)
	case len(value) > MaxChunkSize:
		return fmt.Errorf("%w: chunk %d at offset %d holds %d bytes, the limit is %d", ErrCorrupt, index, off, len(value), MaxChunkSize)
	case limit >= 0 && a.size+int64(len(value)) > limit:
		return fmt.Errorf("%w: chunks exceed the manifest's size %d at chunk %d", ErrCorrupt, limit, index)
	}
	for rest := value; len(rest) > 0; {
		piece := rest[:min(len(rest), writePiece)]
		rest = rest[len(piece):]
		if _, err := a.w.Write(piece); err != nil {
			return fmt.Errorf("cannot write chunk %d: %w", index, err)
		}
		a.h.Write(piece)
	}
	if a.next == 0 {
		a.first = off
	}
	a.last = off
	a.next++
	a.size += int64(len(value))
	return nil
}

// verify checks what was added against m.
func (a *assembler) verify(m Manifest) error {
	if a.next != m.Chunks {
		return fmt.Errorf("%w: found %d of %d chunks", ErrCorrupt, a.next, m.Chunks)
	}
	if a.size != m.Size {
		return fmt.Errorf("%w: chunks hold %d bytes, the manifest says %d", ErrCorrupt, a.size, m.Size)
	}
	if sum := hex.EncodeToString(a.h.Sum(nil)); sum != m.SHA256 {
		return fmt.Errorf("%w: sha256 is %s, the manifest says %s", ErrCorrupt, sum, m.SHA256)
	}
	return nil
}
