package learner

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/zeebo/xxh3"
)

// Format 2 of a version. Its records are those of format 1 (chunk
// records, then one manifest record; a chunk's HeaderIndex is its position
// among the chunk records of its publish, so Latest steps back over them
// as over format 1's) plus HeaderFormat=2 on each. Its manifest differs:
//
//   - "chunks" is the list of every chunk of the full version, in order:
//     size, the offset of the record holding its bytes, and their
//     xxh3-128. A delta (Base > 0) writes only the chunks the base does not
//     have; the others point at earlier records (the base's, or those the
//     base itself pointed at).
//   - "digest" is the SHA-256 of the manifest's canonical encoding, and
//     "signature" an ed25519 signature of it by the key "key_id".
//   - "sha256" stays the SHA-256 of the whole blob, checked before a
//     version is installed.
//
// A format 1 reader fails to decode "chunks" (an array where it expects a
// count), logs the manifest as invalid and keeps the version it holds; it
// never installs a format 2 version. Format 2 readers read both formats.
const (
	Format1 = 1
	Format2 = 2

	// maxManifestBytes2 bounds a format 2 manifest (its chunk list): a
	// record must fit in MaxMessageBytes.
	maxManifestBytes2 = 1536 << 10
	// maxChunks2 bounds a format 2 chunk list; at about 60 bytes of
	// JSON per chunk it fits in maxManifestBytes2.
	maxChunks2 = 24 << 10
	// signContext prefixes the signed message, so a manifest signature
	// cannot be taken for a signature of anything else made by that key.
	signContext = "simtel policy manifest v2\x00"
)

// ErrUntrusted is returned (wrapped) when a version is refused because
// its manifest is not signed by a trusted key: unsigned, signed by an
// unknown key, or with a signature that does not verify.
var ErrUntrusted = errors.New("untrusted policy version")

// ErrMissing is returned (wrapped) when chunks a version needs are
// nowhere: not on this node and deleted from the topic (a delta whose
// base retention removed).
var ErrMissing = errors.New("policy version's chunks are gone")

// ChunkRef is one chunk of a format 2 version.
type ChunkRef struct {
	Size   int    `json:"n"` // bytes, 1 to MaxChunkSize
	Offset int64  `json:"o"` // offset of the chunk record holding them
	Hash   string `json:"h"` // xxh3-128 of the bytes, 32 lowercase hex digits
}

// chunkHash is the ChunkRef.Hash of b.
func chunkHash(b []byte) string {
	h := xxh3.Hash128(b).Bytes()
	return hex.EncodeToString(h[:])
}

// manifestFields is Manifest without its JSON methods.
type manifestFields Manifest

// MarshalJSON encodes format 1 manifests as they always were and format 2
// ones with "chunks" holding ChunkList.
func (m Manifest) MarshalJSON() ([]byte, error) {
	if m.Format < Format2 {
		return json.Marshal(manifestFields(m))
	}
	return json.Marshal(struct {
		manifestFields
		Chunks []ChunkRef `json:"chunks"`
	}{manifestFields(m), m.ChunkList})
}

// UnmarshalJSON reads both formats; "chunks" is a count in format 1 and
// the chunk list in format 2.
func (m *Manifest) UnmarshalJSON(b []byte) error {
	var v struct {
		manifestFields
		Chunks json.RawMessage `json:"chunks"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*m = Manifest(v.manifestFields)
	m.Chunks, m.ChunkList = 0, nil
	raw := bytes.TrimSpace(v.Chunks)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	if m.Format >= Format2 {
		if err := json.Unmarshal(raw, &m.ChunkList); err != nil {
			return fmt.Errorf("format 2 chunk list: %w", err)
		}
		m.Chunks = len(m.ChunkList)
		return nil
	}
	if err := json.Unmarshal(raw, &m.Chunks); err != nil {
		return fmt.Errorf("format 1 chunk count: %w", err)
	}
	return nil
}

// records is how many chunk records this version's publish wrote.
func (m *Manifest) records() int {
	if m.Format >= Format2 {
		return m.Sent
	}
	return m.Chunks
}

// validate2 is Validate for format 2.
func (m *Manifest) validate2() error {
	switch {
	case m.Format != Format2:
		return fmt.Errorf("manifest format %d is newer than this reader (formats 1 and 2)", m.Format)
	case m.Version < 1:
		return fmt.Errorf("version %d is below 1", m.Version)
	case m.Base < 0 || m.Base >= m.Version:
		return fmt.Errorf("base version %d is not below version %d", m.Base, m.Version)
	case m.Size < 0:
		return fmt.Errorf("size %d is negative", m.Size)
	case m.Chunks != len(m.ChunkList) || m.Chunks > maxChunks2:
		return fmt.Errorf("chunk list of %d (count %d) is not within [0, %d]", len(m.ChunkList), m.Chunks, maxChunks2)
	case m.Sent < 0 || m.Sent > m.Chunks:
		return fmt.Errorf("%d chunk records sent for %d chunks", m.Sent, m.Chunks)
	case m.DeltaBytes < 0 || m.Base == 0 && m.DeltaBytes != 0:
		return fmt.Errorf("delta bytes %d for base %d", m.DeltaBytes, m.Base)
	case m.Sent == 0 && (m.FirstChunkOffset != -1 || m.LastChunkOffset != -1):
		return fmt.Errorf("chunk offsets [%d, %d] with no chunk sent", m.FirstChunkOffset, m.LastChunkOffset)
	case m.Sent > 0 && (m.FirstChunkOffset < 0 || m.LastChunkOffset-m.FirstChunkOffset+1 < int64(m.Sent)):
		return fmt.Errorf("%d chunks do not fit in offsets [%d, %d]", m.Sent, m.FirstChunkOffset, m.LastChunkOffset)
	}
	var size int64
	own := 0
	for i, c := range m.ChunkList {
		if c.Size < 1 || c.Size > MaxChunkSize {
			return fmt.Errorf("chunk %d holds %d bytes, not within [1, %d]", i, c.Size, MaxChunkSize)
		}
		if c.Offset < 0 || m.Sent > 0 && c.Offset > m.LastChunkOffset || m.Sent == 0 && m.Base == 0 {
			return fmt.Errorf("chunk %d at offset %d is outside the log before the manifest", i, c.Offset)
		}
		if err := checkHex(fmt.Sprintf("chunk %d hash", i), c.Hash, 16); err != nil {
			return err
		}
		if m.Sent > 0 && c.Offset >= m.FirstChunkOffset {
			own++
		}
		size += int64(c.Size)
	}
	if size != m.Size {
		return fmt.Errorf("chunks hold %d bytes, the manifest says %d", size, m.Size)
	}
	if own < m.Sent {
		return fmt.Errorf("%d chunks point at the %d records sent", own, m.Sent)
	}
	if err := checkHex("digest", m.Digest, sha256.Size); err != nil {
		return err
	}
	if d := m.digest(); d != m.Digest {
		return fmt.Errorf("manifest digest is %s, the manifest says %s (altered or truncated)", d, m.Digest)
	}
	if (m.KeyID == "") != (m.Signature == "") {
		return errors.New("key id and signature come together")
	}
	return m.validateCommon()
}

// digest is the SHA-256 of m's canonical encoding: its JSON without
// Digest, KeyID and Signature. encoding/json writes struct fields in
// declaration order and map keys sorted, so reader and publisher agree.
// A publisher that adds fields must also raise the format.
func (m *Manifest) digest() string {
	c := *m
	c.Digest, c.KeyID, c.Signature = "", "", ""
	b, err := json.Marshal(c)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// seal fills m's Digest and, with key, its KeyID and Signature.
func (m *Manifest) seal(key ed25519.PrivateKey) {
	m.Digest = m.digest()
	m.KeyID, m.Signature = "", ""
	if key != nil {
		m.KeyID = KeyID(key.Public().(ed25519.PublicKey))
		m.Signature = base64.StdEncoding.EncodeToString(ed25519.Sign(key, []byte(signContext+m.Digest)))
	}
}

// KeyID names a public key in manifests and logs: the first 8 bytes of
// the SHA-256 of the key, in hex.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// Trust checks that m is signed by one of keys. It assumes m is valid
// (its digest matches its fields). With no keys every version is trusted.
func Trust(m Manifest, keys []ed25519.PublicKey) error {
	if len(keys) == 0 {
		return nil
	}
	if m.Format < Format2 || m.Signature == "" {
		return fmt.Errorf("%w: version %d is not signed (publish with learner publish --sign-key)", ErrUntrusted, m.Version)
	}
	sig, err := base64.StdEncoding.DecodeString(m.Signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return fmt.Errorf("%w: version %d: the signature is not %d bytes of base64", ErrUntrusted, m.Version, ed25519.SignatureSize)
	}
	for _, k := range keys {
		if KeyID(k) != m.KeyID {
			continue
		}
		if !ed25519.Verify(k, []byte(signContext+m.Digest), sig) {
			return fmt.Errorf("%w: version %d: the signature by key %s does not verify", ErrUntrusted, m.Version, m.KeyID)
		}
		return nil
	}
	return fmt.Errorf("%w: version %d is signed by key %s, which is not trusted", ErrUntrusted, m.Version, m.KeyID)
}

// ParseSigningKey reads an ed25519 private key in PEM (PKCS #8, "PRIVATE
// KEY", as `openssl genpkey -algorithm ed25519` writes it).
func ParseSigningKey(pemBytes []byte) (ed25519.PrivateKey, error) {
	for rest := pemBytes; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return nil, errors.New("no PEM PRIVATE KEY block")
		}
		if b.Type != "PRIVATE KEY" {
			continue
		}
		k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("cannot parse the private key: %w", err)
		}
		ek, ok := k.(ed25519.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("the private key is a %T, not ed25519", k)
		}
		return ek, nil
	}
}

// ParseTrustedKeys reads one or more ed25519 public keys in PEM ("PUBLIC
// KEY", as `openssl pkey -pubout` writes them). Other blocks are an error,
// so a private key put there by mistake is not silently ignored.
func ParseTrustedKeys(pemBytes []byte) ([]ed25519.PublicKey, error) {
	var keys []ed25519.PublicKey
	for rest := pemBytes; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "PUBLIC KEY" {
			return nil, fmt.Errorf("PEM block %q is not a PUBLIC KEY", b.Type)
		}
		k, err := x509.ParsePKIXPublicKey(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("cannot parse public key %d: %w", len(keys)+1, err)
		}
		ek, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("public key %d is a %T, not ed25519", len(keys)+1, k)
		}
		keys = append(keys, ek)
	}
	if len(keys) == 0 {
		return nil, errors.New("no PEM PUBLIC KEY block")
	}
	return keys, nil
}

func chunkHeaders2(version int64, seq int, publish string) []kgo.RecordHeader {
	return append(chunkHeaders(version, seq, publish), header(HeaderFormat, strconv.Itoa(Format2)))
}

func manifestHeaders2(version int64, publish string) []kgo.RecordHeader {
	return append(manifestHeaders(version, publish), header(HeaderFormat, strconv.Itoa(Format2)))
}
