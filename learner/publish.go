package learner

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Topic configs a publisher sets on the topics it creates (and enforces on
// topics that exist without them).
const (
	// MaxMessageBytes is the topic's max.message.bytes and the producer's
	// batch limit: one full chunk plus headers and batch overhead, with
	// room to spare.
	MaxMessageBytes = 2 << 20
	// SegmentBytes is the topic's segment.bytes. Retention deletes whole
	// closed segments, so a segment much smaller than a version lets it
	// drop old versions promptly; tiny policies leave at most one segment
	// of old versions behind.
	SegmentBytes = 8 << 20
	// DefaultKeep is how many versions retention keeps by default.
	DefaultKeep = 3
	// recordOverhead is a generous bound on what one record adds to the
	// log besides its value (batch header, record header, our headers).
	recordOverhead = 512
	// defaultWindow is how many chunks may be in flight (and in memory)
	// during a Publish.
	defaultWindow = 8
)

// Publisher writes new versions of policies. It is safe for concurrent
// use: Publish calls for one policy on one Publisher run one at a time, so
// they never race for a version number. Publishers in different processes
// can; see Publish.
type Publisher struct {
	cl        *kgo.Client
	log       *slog.Logger
	keep      int
	chunkSize int
	window    int

	// beforeManifest, if set (tests), runs before the final check for a
	// concurrent publish.
	beforeManifest func(m Manifest)
	// quietChecks counts publishes whose conflict check found nothing
	// but their own chunks after the newest version (tests).
	quietChecks atomic.Int64

	mu struct {
		sync.Mutex
		policies map[string]*sync.Mutex // serializes Publish per policy
	}
}

// PublisherOpt configures a Publisher.
type PublisherOpt func(*Publisher)

// KeepVersions sizes retention.bytes to keep about n versions (default
// DefaultKeep; at least 2, so that a version being written never pushes
// out the newest complete one).
func KeepVersions(n int) PublisherOpt {
	return func(p *Publisher) { p.keep = max(n, 2) }
}

// ChunkSize sets the chunk value size in bytes, 1 to MaxChunkSize (the
// default). Smaller chunks are for tests.
func ChunkSize(n int) PublisherOpt {
	return func(p *Publisher) { p.chunkSize = min(max(n, 1), MaxChunkSize) }
}

// NewPublisher returns a publisher using cl, a client the caller owns and
// closes. cl's connection options (seeds, TLS, SASL, dialer, logger, hooks)
// are reused by a producer made for each Publish, which sets what the
// format needs whatever cl says: acks=all, idempotent, no compression
// (weights do not compress), batches up to MaxMessageBytes, partition 0.
// cl itself serves the admin requests (create topic, configs, offsets).
func NewPublisher(cl *kgo.Client, logger *slog.Logger, opts ...PublisherOpt) *Publisher {
	if logger == nil {
		logger = slog.Default()
	}
	p := &Publisher{cl: cl, log: logger, keep: DefaultKeep, chunkSize: MaxChunkSize, window: defaultWindow}
	for _, o := range opts {
		o(p)
	}
	p.mu.policies = map[string]*sync.Mutex{}
	return p
}

// lock serializes Publish calls for policy; it returns the unlock.
func (p *Publisher) lock(ctx context.Context, policy string) (func(), error) {
	p.mu.Lock()
	l, ok := p.mu.policies[policy]
	if !ok {
		l = &sync.Mutex{}
		p.mu.policies[policy] = l
	}
	p.mu.Unlock()
	// A mutex cannot be waited for with a context; a goroutine can.
	got := make(chan struct{})
	go func() { l.Lock(); close(got) }()
	select {
	case <-got:
		return l.Unlock, nil
	case <-ctx.Done():
		go func() { <-got; l.Unlock() }()
		return nil, ctx.Err()
	}
}

// Publish streams r into a new version of policy and returns its manifest.
//
// It creates the topic on first publish (one partition, default
// replication, the configs of topicConfigs), picks the newest version + 1,
// produces the chunks (hashing as it goes; at most a few chunks are in
// memory), then the manifest, all with acks=all. retention.bytes is raised
// while the blob streams if the version is bigger than the topic was sized
// for, so retention never cuts the version being written. progress, if
// not nil, is called from Publish's goroutine with the bytes handed to the
// producer so far; its last call comes after every chunk is acknowledged.
//
// Before it writes the manifest, Publish checks again that no other
// publisher (another process) completed the version number it picked
// while it streamed, and returns ErrConflict if one did. Two publishers
// finishing within the same few milliseconds can still both write the
// same number; subscribers then keep the first manifest they see.
//
// A Publish that fails or is cancelled leaves chunks without a manifest,
// which readers ignore.
func (p *Publisher) Publish(ctx context.Context, policy string, r io.Reader, meta map[string]string, progress func(sent int64)) (Manifest, error) {
	return p.PublishWith(ctx, policy, r, PublishOptions{Meta: meta, Progress: progress})
}

// DeltaAuto as PublishOptions.DeltaFrom publishes a delta against the
// newest version when that is cheap and safe (see PublishWith).
const DeltaAuto = -1

// PublishOptions are a Publish's options.
type PublishOptions struct {
	// Meta is the version's metadata.
	Meta map[string]string
	// Progress, if not nil, is called with the blob's bytes read so far
	// (see Publish).
	Progress func(sent int64)
	// Format is 1 (the default) or 2. DeltaFrom and SignKey need 2 and
	// imply it.
	Format int
	// DeltaFrom publishes a delta: 0 is a full version, a version number
	// that version as the base, DeltaAuto the newest version if it is
	// format 2, its chunks are still on the topic and the deltas since
	// the last full version stay within what retention keeps (else a
	// full version).
	DeltaFrom int64
	// SignKey, if set, signs the manifest.
	SignKey ed25519.PrivateKey
}

// PublishWith is Publish with options: format 2 (content-defined chunks
// listed by hash in the manifest), deltas and signatures. See Publish for
// what it does and returns.
func (p *Publisher) PublishWith(ctx context.Context, policy string, r io.Reader, o PublishOptions) (Manifest, error) {
	meta, progress := o.Meta, o.Progress
	format := max(o.Format, Format1)
	if o.DeltaFrom != 0 || o.SignKey != nil {
		format = max(format, Format2)
	}
	if format > Format2 {
		return Manifest{}, fmt.Errorf("format %d is not 1 or 2", o.Format)
	}
	if err := CheckPolicyName(policy); err != nil {
		return Manifest{}, err
	}
	unlock, err := p.lock(ctx, policy)
	if err != nil {
		return Manifest{}, err
	}
	defer unlock()
	// Phase times for the log: preparing (topic, retention, newest
	// version), streaming the chunks until the last is acknowledged, and
	// the conflict check plus the manifest.
	tStart := time.Now()
	var tStream, tAcked time.Time
	topic := Topic(policy)
	m := Manifest{Policy: policy, Metadata: meta, FirstChunkOffset: -1, LastChunkOffset: -1}
	if n := metaBytes(meta); n > maxMetadataBytes {
		return m, fmt.Errorf("metadata holds %d bytes, the limit is %d", n, maxMetadataBytes)
	}
	hint := sizeHint(r)
	retention, err := p.ensureTopic(ctx, topic, hint)
	if err != nil {
		return m, err
	}
	before := retention
	if hint > 0 {
		if retention, err = p.raiseRetention(ctx, topic, retention, hint); err != nil {
			return m, err
		}
	}
	// end0 is the log end when we looked for the newest version: if
	// nothing but our chunks lands at and after it, nobody can have
	// completed a version meanwhile (see the check before the manifest).
	prev, end0 := Manifest{}, int64(-1)
	start, end, exists, err := logRange(ctx, p.cl, topic)
	if err == nil && exists {
		end0 = end
		prev, _, err = latestBefore(ctx, p.cl, policy, start, end)
	}
	if err != nil {
		return m, fmt.Errorf("cannot find the newest version of %s: %w", policy, err)
	}
	m.Version = prev.Version + 1
	// base maps the chunk hashes of a delta's base to the records that
	// hold them.
	var base map[string]ChunkRef
	if format >= Format2 {
		m.Format = Format2
		b, err := p.deltaBase(ctx, policy, o.DeltaFrom, prev, start)
		if err != nil {
			return m, err
		}
		if b.Version > 0 {
			m.Base, m.DeltaBytes = b.Version, b.DeltaBytes
			base = make(map[string]ChunkRef, len(b.ChunkList))
			for _, c := range b.ChunkList {
				base[c.Hash] = c
			}
		}
	}
	var id [8]byte
	rand.Read(id[:])
	m.PublishID = hex.EncodeToString(id[:])

	prod, err := derive(p.cl,
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchMaxBytes(MaxMessageBytes),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
	)
	if err != nil {
		return m, err
	}
	defer prod.Close()
	tStream = time.Now()

	// Chunks go out through a window of buffers: a buffer returns to free
	// when its record is acknowledged, which is also when we learn the
	// record's offset.
	var (
		mu       sync.Mutex
		firstErr error
		minOff   int64 = -1
		maxOff   int64 = -1
	)
	free := make(chan []byte, p.window)
	allocated := 0
	getBuf := func() ([]byte, error) {
		select {
		case b := <-free:
			return b, nil
		default:
		}
		if allocated < p.window {
			allocated++
			return make([]byte, p.chunkSize), nil
		}
		select {
		case b := <-free:
			return b, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	h := sha256.New()
	// sent counts the blob's bytes read, produced counts those written
	// to the topic (fewer in a delta).
	var sent, produced int64
	var cut *chunker
	if format >= Format2 {
		cut = newChunker(r, p.chunkSize)
	}
	for index := 0; ; index++ {
		mu.Lock()
		err := firstErr
		mu.Unlock()
		if err != nil {
			break
		}
		var n int
		var rerr error
		var buf []byte
		if cut != nil {
			var c []byte
			c, rerr = cut.next()
			if rerr == io.EOF {
				break
			}
			if rerr != nil {
				return m, fmt.Errorf("cannot read the blob for %s: %w", policy, rerr)
			}
			if len(m.ChunkList) >= maxChunks2 {
				return m, fmt.Errorf("cannot publish %s: the blob exceeds the %d chunks of one format 2 manifest", policy, maxChunks2)
			}
			h.Write(c)
			sent += int64(len(c))
			ref := ChunkRef{Size: len(c), Offset: -1, Hash: chunkHash(c)}
			if b, ok := base[ref.Hash]; ok && b.Size == ref.Size {
				// The base has these bytes: point at its record.
				ref.Offset = b.Offset
				mu.Lock()
				m.ChunkList = append(m.ChunkList, ref)
				mu.Unlock()
				if progress != nil {
					progress(sent)
				}
				continue
			}
			mu.Lock()
			m.ChunkList = append(m.ChunkList, ref)
			mu.Unlock()
			if buf, err = getBuf(); err != nil {
				return m, err
			}
			n = copy(buf, c)
		} else {
			if buf, err = getBuf(); err != nil {
				return m, err
			}
			n, rerr = io.ReadFull(r, buf)
		}
		if n > 0 {
			if index >= maxChunks {
				return m, fmt.Errorf("cannot publish %s: the blob exceeds %d chunks", policy, maxChunks)
			}
			headers := chunkHeaders(m.Version, m.Chunks, m.PublishID)
			if cut != nil {
				headers = chunkHeaders2(m.Version, m.Sent, m.PublishID)
			} else {
				h.Write(buf[:n])
				sent += int64(n)
			}
			ref := len(m.ChunkList) - 1 // format 2: the entry to fill with the offset
			rec := &kgo.Record{Topic: topic, Partition: 0, Value: buf[:n], Headers: headers}
			prod.Produce(ctx, rec, func(rec *kgo.Record, err error) {
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("cannot produce chunk to %s: %w", topic, err)
				}
				if err == nil {
					if minOff < 0 || rec.Offset < minOff {
						minOff = rec.Offset
					}
					maxOff = max(maxOff, rec.Offset)
					if ref >= 0 {
						m.ChunkList[ref].Offset = rec.Offset
					}
				}
				mu.Unlock()
				free <- buf[:cap(buf)]
			})
			if cut != nil {
				m.Sent++
			} else {
				m.Chunks++
			}
			produced += int64(n)
			if retention >= 0 && p.retentionFor(produced) > retention {
				// The blob outgrew the retention (its size was not
				// known, or it is bigger than the last versions):
				// raise it before the topic cuts this very version.
				// Doubling keeps a blob of unknown size to a handful
				// of config changes.
				if retention, err = p.raiseRetention(ctx, topic, retention, max(2*produced, 64<<20)); err != nil {
					return m, err
				}
			}
			if progress != nil {
				progress(sent)
			}
		}
		if cut == nil && (rerr == io.EOF || rerr == io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			return m, fmt.Errorf("cannot read the blob for %s: %w", policy, rerr)
		}
	}
	if err := prod.Flush(ctx); err != nil {
		return m, fmt.Errorf("cannot produce chunks to %s: %w", topic, err)
	}
	tAcked = time.Now()
	mu.Lock()
	err = firstErr
	m.FirstChunkOffset, m.LastChunkOffset = minOff, maxOff
	mu.Unlock()
	if err != nil {
		return m, err
	}
	m.Size = sent
	m.SHA256 = hex.EncodeToString(h.Sum(nil))
	m.Published = time.Now().UTC()
	if format >= Format2 {
		m.Chunks = len(m.ChunkList)
		if m.Base > 0 {
			m.DeltaBytes += produced
		}
	}
	if progress != nil {
		progress(sent)
	}

	// Someone may have published while we streamed. Our chunks carry
	// our publish id, so nothing is mixed up, but two manifests with one
	// version number would be; refuse to write ours. (A race inside the
	// small window between this check and the produce below remains;
	// readers then act on whichever manifest they see first.)
	if p.beforeManifest != nil {
		p.beforeManifest(m)
	}
	// The cheap form of the check: if our chunks sit at end0 onwards,
	// one after the other, and the log still ends right after them, no
	// record at all was written since we read the newest version, so
	// no manifest either. Otherwise read the newest version again,
	// which costs a few reads of the log's tail (on a busy node, most
	// of a Publish's time after the last chunk).
	quiet := false
	if n := int64(m.records()); end0 >= 0 && n > 0 && m.FirstChunkOffset == end0 && m.LastChunkOffset == end0+n-1 {
		_, end, exists, err := logRange(ctx, p.cl, topic)
		quiet = err == nil && exists && end == m.LastChunkOffset+1
	}
	if quiet {
		p.quietChecks.Add(1)
	} else if now, ok, err := Latest(ctx, p.cl, policy); err != nil {
		return m, fmt.Errorf("cannot check the newest version of %s: %w", policy, err)
	} else if ok && now.Version >= m.Version {
		return m, fmt.Errorf("cannot publish %s version %d: version %d appeared meanwhile: %w", policy, m.Version, now.Version, ErrConflict)
	}
	headers := manifestHeaders(m.Version, m.PublishID)
	if format >= Format2 {
		m.seal(o.SignKey)
		headers = manifestHeaders2(m.Version, m.PublishID)
	}
	value, err := json.Marshal(m)
	if err != nil {
		return m, fmt.Errorf("cannot encode manifest: %w", err)
	}
	if len(value) > maxManifestBytes2 {
		return m, fmt.Errorf("cannot publish %s: its manifest of %d chunks takes %d bytes, the limit is %d", policy, m.Chunks, len(value), maxManifestBytes2)
	}
	rec := &kgo.Record{Topic: topic, Partition: 0, Value: value, Headers: headers}
	if err := prod.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return m, fmt.Errorf("cannot produce manifest of %s version %d: %w", policy, m.Version, err)
	}
	m.Offset = rec.Offset
	if retention > before {
		// The doubling above may have overshot; settle on this size
		// unless the topic was already sized for more.
		if err := p.settleRetention(ctx, topic, retention, m.Size, before); err != nil {
			p.log.Warn("cannot settle retention", "topic", topic, "err", err)
		}
	}
	p.log.Info("published policy version", "policy", policy, "version", m.Version, "bytes", m.Size, "chunks", m.Chunks, "offset", m.Offset,
		"format", max(m.Format, Format1), "base", m.Base, "bytes_sent", produced, "signed", m.Signature != "",
		"prepare_s", tStream.Sub(tStart).Seconds(), "stream_s", tAcked.Sub(tStream).Seconds(), "manifest_s", time.Since(tAcked).Seconds())
	return m, nil
}

func metaBytes(meta map[string]string) int {
	n := 0
	for k, v := range meta {
		n += len(k) + len(v)
	}
	return n
}

// sizeHint returns the bytes r will yield if it can tell (a regular file,
// a bytes or strings reader), else -1.
func sizeHint(r io.Reader) int64 {
	switch v := r.(type) {
	case interface{ Len() int }:
		return int64(v.Len())
	case interface{ Stat() (fs.FileInfo, error) }:
		if fi, err := v.Stat(); err == nil && fi.Mode().IsRegular() {
			if s, ok := r.(io.Seeker); ok {
				if pos, err := s.Seek(0, io.SeekCurrent); err == nil {
					return max(fi.Size()-pos, 0)
				}
			}
			return fi.Size()
		}
	}
	return -1
}

// retentionFor is retention.bytes for keep versions of size bytes.
func (p *Publisher) retentionFor(size int64) int64 {
	chunks := (size + int64(p.chunkSize) - 1) / int64(p.chunkSize)
	version := size + (chunks+1)*recordOverhead + maxManifestBytes
	return int64(p.keep) * version
}

// topicConfigs are the configs a new policy topic gets.
func (p *Publisher) topicConfigs(size int64) map[string]string {
	return map[string]string{
		"cleanup.policy":    "delete",
		"max.message.bytes": strconv.Itoa(MaxMessageBytes),
		"segment.bytes":     strconv.Itoa(SegmentBytes),
		// Never delete by age: the newest version must outlive a
		// learner that stops publishing.
		"retention.ms":    "-1",
		"retention.bytes": strconv.FormatInt(p.retentionFor(max(size, 0)), 10),
	}
}

// ensureTopic creates topic if needed, or makes sure an existing one
// (created by hand or by auto-creation) can hold policy versions: configs
// not set on the topic get ours, and settings that would break the format
// (a compacted topic, records too large) are overridden. It returns the
// topic's retention.bytes (-1: unlimited).
func (p *Publisher) ensureTopic(ctx context.Context, topic string, hint int64) (int64, error) {
	want := p.topicConfigs(hint)
	adm := kadm.NewClient(p.cl) // no Close: it would close p.cl
	r, exists, err := p.adoptTopic(ctx, adm, topic, want)
	if err != nil || exists {
		return r, err
	}
	cfgs := map[string]*string{}
	for k, v := range want {
		cfgs[k] = kadm.StringPtr(v)
	}
	resp, err := adm.CreateTopic(ctx, 1, -1, cfgs, topic)
	switch {
	case err == nil:
		p.log.Info("created policy topic", "topic", topic, "retention_bytes", want["retention.bytes"])
		r, _ = strconv.ParseInt(want["retention.bytes"], 10, 64)
		return r, nil
	case errors.Is(err, kerr.TopicAlreadyExists) || errors.Is(resp.Err, kerr.TopicAlreadyExists):
		// Another publisher created it between our two requests.
		r, _, err = p.adoptTopic(ctx, adm, topic, want)
		return r, err
	default:
		return 0, fmt.Errorf("cannot create topic %s: %w", topic, err)
	}
}

// adoptTopic checks the configs of an existing topic (see ensureTopic);
// exists is false if there is no such topic.
func (p *Publisher) adoptTopic(ctx context.Context, adm *kadm.Client, topic string, want map[string]string) (retention int64, exists bool, err error) {
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err == nil {
		var rc kadm.ResourceConfig
		if rc, err = rcs.On(topic, nil); err == nil {
			err = rc.Err
		}
		if errors.Is(err, kerr.UnknownTopicOrPartition) {
			return 0, false, nil
		}
		if err == nil {
			retention, err = p.fixConfigs(ctx, adm, topic, rc.Configs, want)
			return retention, true, err
		}
	}
	return 0, false, fmt.Errorf("cannot describe configs of %s: %w", topic, err)
}

func (p *Publisher) fixConfigs(ctx context.Context, adm *kadm.Client, topic string, configs []kadm.Config, want map[string]string) (int64, error) {
	have := map[string]kadm.Config{}
	for _, c := range configs {
		have[c.Key] = c
	}
	var alter []kadm.AlterConfig
	set := func(k, v string) {
		alter = append(alter, kadm.AlterConfig{Op: kadm.SetConfig, Name: k, Value: kadm.StringPtr(v)})
	}
	retention := int64(-1)
	for k, v := range want {
		c, ok := have[k]
		cur := ""
		if ok {
			cur = c.MaybeValue()
		}
		if !ok || c.Source != kmsg.ConfigSourceDynamicTopicConfig {
			if cur != v {
				set(k, v)
			}
			if k == "retention.bytes" {
				retention, _ = strconv.ParseInt(v, 10, 64)
			}
			continue
		}
		// Set on the topic by someone: keep it unless it breaks us.
		n, _ := strconv.ParseInt(cur, 10, 64)
		w, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "cleanup.policy":
			if cur != "delete" {
				set(k, v)
			}
		case "max.message.bytes":
			if n < w {
				set(k, v)
			}
		case "retention.bytes":
			retention = n
			if n >= 0 && n < w {
				set(k, v)
				retention = w
			}
		}
	}
	if len(alter) > 0 {
		if err := p.alter(ctx, adm, topic, alter); err != nil {
			return 0, err
		}
		p.log.Info("adjusted policy topic configs", "topic", topic, "changes", len(alter))
	}
	return retention, nil
}

func (p *Publisher) alter(ctx context.Context, adm *kadm.Client, topic string, alter []kadm.AlterConfig) error {
	resps, err := adm.AlterTopicConfigs(ctx, alter, topic)
	if err == nil {
		var r kadm.AlterConfigsResponse
		if r, err = resps.On(topic, nil); err == nil {
			err = r.Err
		}
	}
	if err != nil {
		return fmt.Errorf("cannot alter configs of %s: %w", topic, err)
	}
	return nil
}

// raiseRetention makes retention.bytes fit keep versions of size bytes if
// it does not yet; it returns the new value.
func (p *Publisher) raiseRetention(ctx context.Context, topic string, cur, size int64) (int64, error) {
	want := p.retentionFor(size)
	if cur < 0 || cur >= want {
		return cur, nil
	}
	err := p.alter(ctx, kadm.NewClient(p.cl), topic, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.bytes", Value: kadm.StringPtr(strconv.FormatInt(want, 10))}})
	if err != nil {
		return cur, err
	}
	p.log.Info("raised policy topic retention", "topic", topic, "retention_bytes", want)
	return want, nil
}

// settleRetention lowers a retention raised during a Publish of unknown
// size to what the published size needs, never below before, what the
// topic had when the Publish began.
func (p *Publisher) settleRetention(ctx context.Context, topic string, cur, size, before int64) error {
	want := max(p.retentionFor(size), before)
	if cur <= want {
		return nil
	}
	err := p.alter(ctx, kadm.NewClient(p.cl), topic, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.bytes", Value: kadm.StringPtr(strconv.FormatInt(want, 10))}})
	if err != nil {
		return err
	}
	p.log.Info("settled policy topic retention", "topic", topic, "retention_bytes", want)
	return nil
}

// deltaBase picks the base of a format 2 publish (see
// PublishOptions.DeltaFrom): a Manifest with Version 0 means a full
// version. newest is the newest complete version, start the log start.
func (p *Publisher) deltaBase(ctx context.Context, policy string, from int64, newest Manifest, start int64) (Manifest, error) {
	if from == 0 {
		return Manifest{}, nil
	}
	if from == DeltaAuto {
		b := newest
		switch {
		case b.Version == 0:
			return Manifest{}, nil
		case b.Format < Format2:
			p.log.Info("publishing a full version: the newest is format 1", "policy", policy, "newest", b.Version)
			return Manifest{}, nil
		case b.DeltaBytes > int64(p.keep-1)*b.Size/2:
			// Retention keeps about keep versions' bytes; a chain
			// of deltas longer than that could outlive the full
			// version it points into.
			p.log.Info("publishing a full version: the deltas since the last one add up", "policy", policy, "newest", b.Version, "delta_bytes", b.DeltaBytes)
			return Manifest{}, nil
		case b.oldestRecord() < start:
			p.log.Info("publishing a full version: the newest version's chunks are gone from the topic", "policy", policy, "newest", b.Version)
			return Manifest{}, nil
		}
		return b, nil
	}
	if from < 0 || from > newest.Version {
		return Manifest{}, fmt.Errorf("cannot publish a delta from version %d: the newest version of %s is %d", from, policy, newest.Version)
	}
	b := newest
	for b.Version > from {
		prev, ok, err := latestBefore(ctx, p.cl, policy, start, b.Offset)
		if err != nil {
			return Manifest{}, fmt.Errorf("cannot find version %d of %s: %w", from, policy, err)
		}
		if !ok {
			break
		}
		b = prev
	}
	switch {
	case b.Version != from:
		return Manifest{}, fmt.Errorf("cannot publish a delta from version %d of %s: it is not on the topic any more", from, policy)
	case b.Format < Format2:
		return Manifest{}, fmt.Errorf("cannot publish a delta from version %d of %s: it is format 1, whose manifest lists no chunk hashes; publish a format 2 version first", from, policy)
	case b.oldestRecord() < start:
		return Manifest{}, fmt.Errorf("cannot publish a delta from version %d of %s: some of its chunks are gone from the topic (retention)", from, policy)
	}
	return b, nil
}

// oldestRecord is the lowest offset a format 2 version's chunks are read
// from (MaxInt64 with no chunks).
func (m *Manifest) oldestRecord() int64 {
	o := int64(math.MaxInt64)
	for _, c := range m.ChunkList {
		o = min(o, c.Offset)
	}
	return o
}
