package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/snappy/xerial"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

var errTooLarge = errors.New("decompressed batch exceeds limit")

// maxDecompressed bounds how large a batch may grow when decompressed
// during compaction or a timestamp lookup, so a compression bomb cannot
// exhaust memory. A batch beyond it is left untouched.
func maxDecompressed(cfg *Config) int {
	return max(64<<20, 32*cfg.MaxBatchBytes)
}

// codecs holds the stateful (de)compressors of one operation. zstd
// coders are created lazily and must be released with close, which stops
// any goroutines they own.
type codecs struct {
	zdec *zstd.Decoder
	zenc *zstd.Encoder
}

func (c *codecs) close() {
	if c.zdec != nil {
		c.zdec.Close()
		c.zdec = nil
	}
	if c.zenc != nil {
		_ = c.zenc.Close()
		c.zenc = nil
	}
}

// decompress returns the records bytes of a batch in plain form. For
// CompressionNone it returns src itself.
func (c *codecs) decompress(codec int8, src []byte, limit int) ([]byte, error) {
	switch codec {
	case CompressionNone:
		return src, nil
	case CompressionGzip:
		zr, err := gzip.NewReader(bytes.NewReader(src))
		if err != nil {
			return nil, fmt.Errorf("cannot read gzip batch: %w", err)
		}
		defer zr.Close()
		return readLimited(zr, limit)
	case CompressionSnappy:
		return decodeSnappy(src, limit)
	case CompressionLZ4:
		return readLimited(lz4.NewReader(bytes.NewReader(src)), limit)
	case CompressionZstd:
		if c.zdec == nil {
			d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(uint64(limit)))
			if err != nil {
				return nil, fmt.Errorf("cannot create zstd decoder: %w", err)
			}
			c.zdec = d
		}
		out, err := c.zdec.DecodeAll(src, nil)
		if err != nil {
			return nil, fmt.Errorf("cannot read zstd batch: %w", err)
		}
		if len(out) > limit {
			return nil, errTooLarge
		}
		return out, nil
	default:
		return nil, fmt.Errorf("unknown compression codec %d", codec)
	}
}

func readLimited(r io.Reader, limit int) ([]byte, error) {
	out, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("cannot decompress batch: %w", err)
	}
	if len(out) > limit {
		return nil, errTooLarge
	}
	return out, nil
}

// xerialMagic starts snappy data in the framing of the Java snappy
// library, which Kafka's Java producer uses; other clients send a bare
// snappy block. The magic is followed by two int32 version fields.
const xerialMagic = "\x82SNAPPY\x00"

// decodeSnappy decodes bare or xerial-framed snappy, checking each
// block's announced size against the limit before allocating for it.
func decodeSnappy(src []byte, limit int) ([]byte, error) {
	if len(src) < 16 || string(src[:8]) != xerialMagic {
		n, err := snappy.DecodedLen(src)
		if err != nil {
			return nil, fmt.Errorf("cannot read snappy batch: %w", err)
		}
		if n > limit {
			return nil, errTooLarge
		}
		out, err := snappy.Decode(make([]byte, n), src)
		if err != nil {
			return nil, fmt.Errorf("cannot read snappy batch: %w", err)
		}
		return out, nil
	}
	var out []byte
	for p := 16; p < len(src); {
		if len(src)-p < 4 {
			return nil, errors.New("cannot read snappy batch: truncated xerial block")
		}
		size := int(binary.BigEndian.Uint32(src[p:]))
		p += 4
		if size > len(src)-p {
			return nil, errors.New("cannot read snappy batch: truncated xerial block")
		}
		block := src[p : p+size]
		p += size
		n, err := snappy.DecodedLen(block)
		if err != nil {
			return nil, fmt.Errorf("cannot read snappy batch: %w", err)
		}
		if n > limit-len(out) {
			return nil, errTooLarge
		}
		dec, err := snappy.Decode(make([]byte, n), block)
		if err != nil {
			return nil, fmt.Errorf("cannot read snappy batch: %w", err)
		}
		out = append(out, dec...)
	}
	return out, nil
}

// compress encodes records bytes with codec, appending to dst. Snappy is
// written in xerial framing, which every Kafka client can read.
func (c *codecs) compress(codec int8, dst, src []byte) ([]byte, error) {
	switch codec {
	case CompressionNone:
		return append(dst, src...), nil
	case CompressionGzip:
		buf := bytes.NewBuffer(dst)
		return compressTo(buf, gzip.NewWriter(buf), src, "gzip")
	case CompressionSnappy:
		return append(dst, xerial.Encode(nil, src)...), nil
	case CompressionLZ4:
		buf := bytes.NewBuffer(dst)
		return compressTo(buf, lz4.NewWriter(buf), src, "lz4")
	case CompressionZstd:
		if c.zenc == nil {
			e, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
			if err != nil {
				return nil, fmt.Errorf("cannot create zstd encoder: %w", err)
			}
			c.zenc = e
		}
		return c.zenc.EncodeAll(src, dst), nil
	default:
		return nil, fmt.Errorf("unknown compression codec %d", codec)
	}
}

// compressTo writes src through zw, a compressor writing into buf, and
// returns buf's bytes once zw is closed; name says which codec failed.
func compressTo(buf *bytes.Buffer, zw io.WriteCloser, src []byte, name string) ([]byte, error) {
	if _, err := zw.Write(src); err != nil {
		return nil, fmt.Errorf("cannot %s batch: %w", name, err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("cannot %s batch: %w", name, err)
	}
	return buf.Bytes(), nil
}
