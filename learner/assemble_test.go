package learner

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"testing"
)

// writeLog records the size of every Write it gets.
type writeLog struct {
	buf   bytes.Buffer
	sizes []int
}

func (w *writeLog) Write(b []byte) (int, error) {
	w.sizes = append(w.sizes, len(b))
	return w.buf.Write(b)
}

func TestAssemblerWritesInPieces(t *testing.T) {
	// Chunk sizes around the piece size: smaller, equal, a multiple, and
	// one with a remainder.
	sizes := []int{0, 1, writePiece - 1, writePiece, 3 * writePiece, 2*writePiece + 7}
	var want []byte
	var chunks [][]byte
	for i, n := range sizes {
		c := bytes.Repeat([]byte{byte(i + 1)}, n)
		for j := range c {
			c[j] ^= byte(j)
		}
		chunks = append(chunks, c)
		want = append(want, c...)
	}
	var w writeLog
	a := newAssembler(5, "p", &w)
	for i, c := range chunks {
		if err := a.add(int64(100+i), i, c, -1); err != nil {
			t.Fatalf("add chunk %d: %v", i, err)
		}
	}
	sum := sha256.Sum256(want)
	m := Manifest{Policy: "x", Version: 5, Size: int64(len(want)), Chunks: len(chunks), SHA256: hex.EncodeToString(sum[:])}
	if err := a.verify(m); err != nil {
		t.Fatalf("verify: %v", err)
	}
	if !bytes.Equal(w.buf.Bytes(), want) {
		t.Fatalf("wrote %d bytes that differ from the %d added", w.buf.Len(), len(want))
	}
	for i, n := range w.sizes {
		if n == 0 || n > writePiece {
			t.Errorf("write %d has %d bytes, want 1 to %d", i, n, writePiece)
		}
	}
	m.SHA256 = hex.EncodeToString(make([]byte, 32))
	if err := a.verify(m); !errors.Is(err, ErrCorrupt) {
		t.Errorf("verify against a wrong hash = %v, want ErrCorrupt", err)
	}
}

// BenchmarkAssemble measures what a node's subscriber does per version
// besides receiving it: write every chunk into a temporary file and hash
// it (SHA-256). "hash" leaves out the file. The file goes to
// $SIMTEL_BENCH_DIR, else /dev/shm (tmpfs, the agent's default policy
// directory), else the test's temporary directory. One operation is a
// 64 MiB version of 1 MiB chunks; the bytes come from a 64 MiB buffer, so
// they are not all in cache, as chunks just received are not.
//
//	go test -run '^$' -bench Assemble -benchtime 20x ./learner/
func BenchmarkAssemble(b *testing.B) {
	const size, chunk = 64 << 20, 1 << 20
	src := make([]byte, size)
	for i := range src {
		src[i] = byte(i*131 + i>>11)
	}
	sum := sha256.Sum256(src)
	m := Manifest{Policy: "bench", Version: 1, Size: size, Chunks: size / chunk, SHA256: hex.EncodeToString(sum[:])}
	dir := os.Getenv("SIMTEL_BENCH_DIR")
	if dir == "" {
		if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
			dir = "/dev/shm"
		} else {
			dir = b.TempDir()
		}
	}
	run := func(b *testing.B, w func() (io.Writer, func())) {
		b.SetBytes(size)
		for b.Loop() {
			out, done := w()
			a := newAssembler(1, "", out)
			for i := 0; i < size/chunk; i++ {
				if err := a.add(int64(i), i, src[i*chunk:(i+1)*chunk], size); err != nil {
					b.Fatal(err)
				}
			}
			if err := a.verify(m); err != nil {
				b.Fatal(err)
			}
			done()
		}
	}
	b.Run("hash", func(b *testing.B) {
		run(b, func() (io.Writer, func()) { return io.Discard, func() {} })
	})
	b.Run("write+hash", func(b *testing.B) {
		run(b, func() (io.Writer, func()) {
			f, err := os.CreateTemp(dir, "simtel-bench-assemble-*")
			if err != nil {
				b.Fatal(err)
			}
			return f, func() {
				f.Close()
				os.Remove(f.Name())
			}
		})
	})
}
