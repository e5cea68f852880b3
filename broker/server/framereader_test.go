package server

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"testing"
)

// scriptConn serves its chunks one Read at a time (a Read never spans two
// chunks, as a socket returns what one segment brought) and records the
// size of every Read it was asked for.
type scriptConn struct {
	net.Conn
	chunks [][]byte
	asked  []int
}

func (c *scriptConn) Read(p []byte) (int, error) {
	c.asked = append(c.asked, len(p))
	if len(c.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.chunks[0])
	if c.chunks[0] = c.chunks[0][n:]; len(c.chunks[0]) == 0 {
		c.chunks = c.chunks[1:]
	}
	return n, nil
}

func frame(body string) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

// TestFrameReaderIdleHoldsNoBuffer: a connection waits for a frame with a
// read of its size prefix alone and holds the pooled buffer only while
// bytes are buffered; frames pipelined in one segment, a prefix split
// over two and a frame larger than the buffer all read whole.
func TestFrameReaderIdleHoldsNoBuffer(t *testing.T) {
	big := string(bytes.Repeat([]byte("b"), 3*readBufBytes))
	pipelined := append(frame("first"), frame("second")...)
	split := frame("split")
	c := &scriptConn{chunks: [][]byte{pipelined, split[:2], split[2:], frame(big), frame("last")}}
	f := &frameReader{nc: c}
	defer f.release()

	var got []string
	var idleReads int
	for {
		before := len(c.asked)
		n, err := f.size()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(c.asked) > before && c.asked[before] == 4 {
			idleReads++
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(f, body); err != nil {
			t.Fatal(err)
		}
		got = append(got, string(body))
		if f.r.Buffered() == 0 {
			continue
		}
		if s := string(body); s != "first" {
			t.Errorf("bytes still buffered after frame %.10q", s)
		}
	}
	want := []string{"first", "second", "split", big, "last"}
	if len(got) != len(want) {
		t.Fatalf("read %d frames, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("frame %d: %.20q, want %.20q", i, got[i], want[i])
		}
	}
	// Every frame but "second" (buffered with "first") began with a wait
	// in a 4-byte read, and so did the final wait that met EOF.
	if idleReads != 4 {
		t.Errorf("%d frames waited for without a buffer, want 4 (reads asked: %v)", idleReads, c.asked)
	}
	if last := c.asked[len(c.asked)-1]; last != 4 {
		t.Errorf("the wait after the last frame read %d bytes, want the 4 of a size prefix without a buffer", last)
	}
	if f.r != nil {
		t.Error("the buffer is held after the connection ended")
	}
}
