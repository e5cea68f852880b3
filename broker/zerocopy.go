package broker

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"

	"golang.org/x/sys/unix"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/storage"
)

// Zero-copy fetch responses.
//
// kmsg encodes the whole FetchResponse, but the record bytes must go from
// the segment files to the socket without passing through user space. So
// each partition's RecordBatches is first set to a 16-byte marker unique to
// this response; after kmsg encodes the response, the marker and its length
// prefix are cut out and replaced by the real length and the file ranges.
// Everything else in the response is kmsg's encoding, byte for byte.

const markerLen = 16

// sendfileMin is the size from which a chunk goes out with sendfile; smaller
// chunks are read into the write buffer, which costs fewer syscalls.
const sendfileMin = 64 << 10

type wirePiece struct {
	data  []byte
	chunk storage.Chunk
}

// fetchWire is an encoded fetch response body made of bytes and file ranges.
type fetchWire struct {
	pieces  []wirePiece
	size    int64 // bytes after the 4-byte size prefix
	results []*storage.ReadResult
}

func (f *fetchWire) release() {
	for _, r := range f.results {
		r.Release()
	}
	f.results = nil
}

type markerSet struct {
	seed    uint64
	results []*storage.ReadResult
}

func (m *markerSet) next(r *storage.ReadResult) []byte {
	b := make([]byte, markerLen)
	binary.BigEndian.PutUint64(b, m.seed)
	binary.BigEndian.PutUint64(b[8:], uint64(len(m.results)))
	m.results = append(m.results, r)
	return b
}

// buildFetchWire encodes resp (whose partitions with data carry markers from
// m) and splices in the file ranges.
func buildFetchWire(resp *kmsg.FetchResponse, corr int32, m *markerSet) (*fetchWire, error) {
	buf := binary.BigEndian.AppendUint32(nil, uint32(corr))
	flexible := resp.IsFlexible()
	if flexible {
		buf = append(buf, 0)
	}
	buf = resp.AppendTo(buf)
	w := &fetchWire{results: m.results}
	pos := 0
	for i, r := range m.results {
		marker := make([]byte, markerLen)
		binary.BigEndian.PutUint64(marker, m.seed)
		binary.BigEndian.PutUint64(marker[8:], uint64(i))
		idx := bytes.Index(buf[pos:], marker)
		if idx < 0 {
			return nil, errors.New("fetch response marker not found")
		}
		idx += pos
		prefix := 4
		if flexible {
			prefix = 1 // uvarint(16+1)
		}
		w.pieces = append(w.pieces, wirePiece{data: buf[pos : idx-prefix]})
		var lenBuf []byte
		if flexible {
			lenBuf = binary.AppendUvarint(nil, uint64(r.Bytes)+1)
		} else {
			lenBuf = binary.BigEndian.AppendUint32(nil, uint32(r.Bytes))
		}
		w.pieces = append(w.pieces, wirePiece{data: lenBuf})
		for _, c := range r.Chunks {
			w.pieces = append(w.pieces, wirePiece{chunk: c})
		}
		pos = idx + markerLen
	}
	w.pieces = append(w.pieces, wirePiece{data: buf[pos:]})
	for _, p := range w.pieces {
		if p.data != nil {
			w.size += int64(len(p.data))
		} else {
			w.size += p.chunk.Size
		}
	}
	return w, nil
}

func (f *fetchWire) writeTo(c *conn, w *bufio.Writer) error {
	var sz [4]byte
	binary.BigEndian.PutUint32(sz[:], uint32(f.size))
	if _, err := w.Write(sz[:]); err != nil {
		return err
	}
	c.b.metrics.bytesOut.WithLabelValues("Fetch").Add(float64(f.size + 4))
	for _, p := range f.pieces {
		if p.data != nil {
			if _, err := w.Write(p.data); err != nil {
				return err
			}
			continue
		}
		ch := p.chunk
		if ch.Size < sendfileMin {
			if w.Available() < int(ch.Size) {
				if err := w.Flush(); err != nil {
					return err
				}
			}
			if int(ch.Size) <= w.Available() {
				buf := w.AvailableBuffer()[:ch.Size]
				if _, err := ch.File.ReadAt(buf, ch.Pos); err != nil {
					return fmt.Errorf("cannot read segment for fetch: %w", err)
				}
				if _, err := w.Write(buf); err != nil {
					return err
				}
				continue
			}
		}
		if err := w.Flush(); err != nil {
			return err
		}
		if err := sendFile(c.nc, ch.File, ch.Pos, ch.Size); err != nil {
			return err
		}
	}
	return nil
}

// sendFile copies n bytes at off of f to the socket with sendfile(2),
// which takes an explicit offset, so concurrent fetches of one segment do
// not race on the file position.
func sendFile(nc net.Conn, f *os.File, off, n int64) error {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		_, err := io.Copy(nc, io.NewSectionReader(f, off, n))
		return err
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return err
	}
	fc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	cerr := fc.Control(func(ffd uintptr) {
		werr := rc.Write(func(cfd uintptr) bool {
			for n > 0 {
				w, err := unix.Sendfile(int(cfd), int(ffd), &off, int(min(n, 1<<30)))
				if w > 0 {
					n -= int64(w)
				}
				switch {
				case err == unix.EAGAIN:
					return false // wait until the socket is writable
				case err == unix.EINTR:
					continue
				case err != nil:
					serr = fmt.Errorf("sendfile: %w", err)
					return true
				case w == 0:
					serr = fmt.Errorf("sendfile: segment ended %d bytes early", n)
					return true
				}
			}
			return true
		})
		if serr == nil {
			serr = werr
		}
	})
	if cerr != nil {
		return cerr
	}
	return serr
}

func newMarkerSet() *markerSet { return &markerSet{seed: rand.Uint64() | 1} }
