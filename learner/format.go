package learner

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Format constants. A version on topic policy.<name> is a run of chunk
// records followed by one manifest record; every record carries the headers
// below, so readers never need to look at a value to classify a record.
const (
	// MaxChunkSize is the largest chunk value a publisher writes and a
	// reader accepts.
	MaxChunkSize = 1 << 20

	// HeaderKind is "chunk" or "manifest".
	HeaderKind = "simtel.kind"
	// HeaderVersion is the version number, decimal.
	HeaderVersion = "simtel.version"
	// HeaderIndex is a chunk's index within its version, decimal from 0.
	HeaderIndex = "simtel.index"
	// HeaderFormat is "2" on the records of a format 2 version; absent
	// on format 1's.
	HeaderFormat = "simtel.format"
	// HeaderPublish is the random id of one Publish call, on its chunks and
	// its manifest. Two publishers that race and pick the same version
	// number write chunks with different ids, so readers never mix them.
	// Optional: records without it match manifests without it.
	HeaderPublish = "simtel.publish"

	KindChunk    = "chunk"
	KindManifest = "manifest"

	// topicPrefix + policy name is the topic.
	topicPrefix = "policy."
	// maxPolicyName keeps the topic name within Kafka's 249 characters.
	maxPolicyName = 249 - len(topicPrefix)
	// maxManifestBytes bounds a manifest value; maxMetadataBytes bounds
	// the user metadata inside it.
	maxManifestBytes = 256 << 10
	maxMetadataBytes = 64 << 10
	// maxChunks bounds the chunk count a manifest may claim (1 TiB).
	maxChunks = 1 << 20
)

// Manifest describes one complete version of a policy. It is the value of
// a manifest record (JSON) and the content of <version>.json in a cache.
type Manifest struct {
	Policy  string `json:"policy"`
	Version int64  `json:"version"` // 1, 2, ... per policy; the publisher picks newest+1
	Size    int64  `json:"size"`    // bytes of the whole blob
	Chunks  int    `json:"chunks"`  // chunk records; 0 for an empty blob
	// FirstChunkOffset and LastChunkOffset bound the chunks of this
	// version: they lie in [first, last]. Records of other versions in
	// between (a concurrent publisher) are skipped by header. Both are -1
	// when Chunks is 0.
	FirstChunkOffset int64             `json:"first_chunk_offset"`
	LastChunkOffset  int64             `json:"last_chunk_offset"`
	SHA256           string            `json:"sha256"` // lowercase hex of the whole blob
	Metadata         map[string]string `json:"metadata,omitempty"`
	Published        time.Time         `json:"published"`
	// PublishID is the HeaderPublish value of this version's records;
	// empty for versions written without one.
	PublishID string `json:"publish_id,omitempty"`

	// The fields below are format 2's (see format2.go); all are empty in
	// format 1, whose JSON is unchanged.

	// Format is 2 for format 2; 0 (absent) means format 1.
	Format int `json:"format,omitempty"`
	// Base is the version a delta was published against (0: a full
	// version, every chunk sent).
	Base int64 `json:"base,omitempty"`
	// Sent is how many chunk records this publish wrote, at
	// [FirstChunkOffset, LastChunkOffset]; the other chunks of ChunkList
	// are earlier versions' records.
	Sent int `json:"sent,omitempty"`
	// DeltaBytes is the chunk bytes written since the last full version,
	// this delta's included (0 for a full version).
	DeltaBytes int64 `json:"delta_bytes,omitempty"`
	// Digest is the SHA-256 (lowercase hex) of the manifest's canonical
	// encoding without Digest, KeyID and Signature; Signature signs it.
	Digest    string `json:"digest,omitempty"`
	KeyID     string `json:"key_id,omitempty"`
	Signature string `json:"signature,omitempty"`
	// ChunkList is every chunk of the full version, in order: its size,
	// the offset of the record holding its bytes and their xxh3-128.
	// Encoded as the JSON field "chunks" (an array, where format 1 has
	// the count), so format 1 readers fail to decode a format 2
	// manifest instead of misreading it.
	ChunkList []ChunkRef `json:"-"`

	// Offset is the manifest record's own offset, filled by readers.
	Offset int64 `json:"-"`
}

// Topic returns the topic of a policy: "policy." + policy. It does not
// check the name; see CheckPolicyName.
func Topic(policy string) string { return topicPrefix + policy }

// CheckPolicyName reports whether name can name a policy: 1 to 242
// characters of [A-Za-z0-9._-], and not "." or ".." (the name is also a
// directory in the cache).
func CheckPolicyName(name string) error {
	if name == "" {
		return errors.New("policy name is empty")
	}
	if len(name) > maxPolicyName {
		return fmt.Errorf("policy name %.20q... is %d characters long, the limit is %d", name, len(name), maxPolicyName)
	}
	if name == "." || name == ".." {
		return fmt.Errorf("policy name %q is not allowed", name)
	}
	for _, c := range []byte(name) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			return fmt.Errorf("policy name %q has a character outside [A-Za-z0-9._-]", name)
		}
	}
	return nil
}

// Validate checks a manifest's fields for consistency. It does not know the
// blob, so it cannot check the hash; Fetch does.
func (m *Manifest) Validate() error {
	if err := CheckPolicyName(m.Policy); err != nil {
		return err
	}
	if m.Format >= Format2 {
		return m.validate2()
	}
	if m.Base != 0 || m.Sent != 0 || m.DeltaBytes != 0 || m.Digest != "" || m.KeyID != "" || m.Signature != "" || m.ChunkList != nil {
		return errors.New("format 1 manifest carries format 2 fields")
	}
	switch {
	case m.Version < 1:
		return fmt.Errorf("version %d is below 1", m.Version)
	case m.Size < 0:
		return fmt.Errorf("size %d is negative", m.Size)
	case m.Chunks < 0 || m.Chunks > maxChunks:
		return fmt.Errorf("chunk count %d is outside [0, %d]", m.Chunks, maxChunks)
	case m.Chunks == 0 && m.Size != 0:
		return fmt.Errorf("size %d with no chunks", m.Size)
	case m.Size > int64(m.Chunks)*MaxChunkSize:
		return fmt.Errorf("size %d does not fit in %d chunks of at most %d bytes", m.Size, m.Chunks, MaxChunkSize)
	case m.Chunks > 0 && (m.FirstChunkOffset < 0 || m.LastChunkOffset < m.FirstChunkOffset):
		return fmt.Errorf("chunk offsets [%d, %d] are not a range", m.FirstChunkOffset, m.LastChunkOffset)
	case m.Chunks > 0 && m.LastChunkOffset-m.FirstChunkOffset+1 < int64(m.Chunks):
		return fmt.Errorf("%d chunks do not fit in offsets [%d, %d]", m.Chunks, m.FirstChunkOffset, m.LastChunkOffset)
	}
	return m.validateCommon()
}

// validateCommon checks what both formats share: the whole blob's
// SHA-256 and the metadata.
func (m *Manifest) validateCommon() error {
	if err := checkHex("sha256", m.SHA256, 32); err != nil {
		return err
	}
	if n := metaBytes(m.Metadata); n > maxMetadataBytes {
		return fmt.Errorf("metadata holds %d bytes, the limit is %d", n, maxMetadataBytes)
	}
	return nil
}

// checkHex reports whether s is n bytes in lowercase hex.
func checkHex(what, s string, n int) error {
	if len(s) != 2*n {
		return fmt.Errorf("%s %q is not %d hex digits", what, s, 2*n)
	}
	if _, err := hex.DecodeString(s); err != nil {
		return fmt.Errorf("%s %q is not hex: %w", what, s, err)
	}
	for _, c := range []byte(s) {
		if c >= 'A' && c <= 'F' {
			return fmt.Errorf("%s %q is not lowercase", what, s)
		}
	}
	return nil
}

// recordHeader is what the headers of a policy record say.
type recordHeader struct {
	kind    string // KindChunk or KindManifest
	version int64
	index   int // chunks only
	publish string
	format  int // HeaderFormat; 0 when absent (format 1)
}

// parseHeaders classifies a record of a policy topic. It fails for records
// that are not policy records or whose headers contradict each other; a
// reader skips those.
func parseHeaders(hs []kgo.RecordHeader) (recordHeader, error) {
	var h recordHeader
	var seen [5]bool
	var rawVersion, rawIndex, rawFormat string
	for _, kv := range hs {
		var i int
		switch kv.Key {
		case HeaderKind:
			i, h.kind = 0, string(kv.Value)
		case HeaderVersion:
			i, rawVersion = 1, string(kv.Value)
		case HeaderIndex:
			i, rawIndex = 2, string(kv.Value)
		case HeaderPublish:
			i, h.publish = 3, string(kv.Value)
		case HeaderFormat:
			i, rawFormat = 4, string(kv.Value)
		default:
			continue
		}
		if seen[i] {
			return h, fmt.Errorf("header %s appears twice", kv.Key)
		}
		seen[i] = true
	}
	if h.kind != KindChunk && h.kind != KindManifest {
		return h, fmt.Errorf("header %s is %q, not %s or %s", HeaderKind, h.kind, KindChunk, KindManifest)
	}
	v, err := parseDecimal(rawVersion, 1, 1<<62)
	if err != nil {
		return h, fmt.Errorf("header %s: %w", HeaderVersion, err)
	}
	h.version = v
	if seen[4] {
		f, err := parseDecimal(rawFormat, Format2, 1<<20)
		if err != nil {
			return h, fmt.Errorf("header %s: %w", HeaderFormat, err)
		}
		h.format = int(f)
	}
	if len(h.publish) > 64 {
		return h, fmt.Errorf("header %s is %d bytes long, the limit is 64", HeaderPublish, len(h.publish))
	}
	switch h.kind {
	case KindChunk:
		i, err := parseDecimal(rawIndex, 0, maxChunks-1)
		if err != nil {
			return h, fmt.Errorf("header %s: %w", HeaderIndex, err)
		}
		h.index = int(i)
	case KindManifest:
		if seen[2] {
			return h, fmt.Errorf("manifest carries header %s", HeaderIndex)
		}
	}
	return h, nil
}

// parseDecimal accepts only canonical decimals (no sign, no leading zeros)
// in [lo, hi], so every value has exactly one spelling.
func parseDecimal(s string, lo, hi int64) (int64, error) {
	if s == "" || len(s) > 1 && s[0] == '0' || s[0] == '+' || s[0] == '-' {
		return 0, fmt.Errorf("%q is not a canonical decimal", s)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("%q is not a decimal in [%d, %d]", s, lo, hi)
	}
	return n, nil
}

func header(k, v string) kgo.RecordHeader { return kgo.RecordHeader{Key: k, Value: []byte(v)} }

func chunkHeaders(version int64, index int, publish string) []kgo.RecordHeader {
	hs := []kgo.RecordHeader{
		header(HeaderKind, KindChunk),
		header(HeaderVersion, strconv.FormatInt(version, 10)),
		header(HeaderIndex, strconv.Itoa(index)),
	}
	if publish != "" {
		hs = append(hs, header(HeaderPublish, publish))
	}
	return hs
}

func manifestHeaders(version int64, publish string) []kgo.RecordHeader {
	hs := []kgo.RecordHeader{
		header(HeaderKind, KindManifest),
		header(HeaderVersion, strconv.FormatInt(version, 10)),
	}
	if publish != "" {
		hs = append(hs, header(HeaderPublish, publish))
	}
	return hs
}

// decodeManifest decodes and validates a manifest record's value against
// its headers. Unknown JSON fields are allowed (newer publishers).
func decodeManifest(value []byte, h recordHeader) (Manifest, error) {
	var m Manifest
	if h.kind != KindManifest {
		return m, fmt.Errorf("record is a %s, not a manifest", h.kind)
	}
	limit := maxManifestBytes
	if h.format >= Format2 {
		limit = maxManifestBytes2
	}
	if len(value) > limit {
		return m, fmt.Errorf("manifest is %d bytes, the limit is %d", len(value), limit)
	}
	if err := json.Unmarshal(value, &m); err != nil {
		return m, fmt.Errorf("manifest is not JSON: %w", err)
	}
	if max(m.Format, 1) != max(h.format, 1) {
		return m, fmt.Errorf("manifest says format %d, its header %d", max(m.Format, 1), max(h.format, 1))
	}
	if m.Version != h.version {
		return m, fmt.Errorf("manifest says version %d, its header %d", m.Version, h.version)
	}
	if m.PublishID != h.publish {
		return m, fmt.Errorf("manifest says publish id %q, its header %q", m.PublishID, h.publish)
	}
	if err := m.Validate(); err != nil {
		return m, err
	}
	return m, nil
}

// matches reports whether a chunk header belongs to the version m.
func (m *Manifest) matches(h recordHeader) bool {
	return h.kind == KindChunk && h.version == m.Version && h.publish == m.PublishID
}
