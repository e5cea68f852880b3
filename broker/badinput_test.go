package broker_test

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/internal/batchtest"
)

// rawConn speaks the Kafka framing by hand so tests can send what no
// client would.
type rawConn struct {
	t *testing.T
	c net.Conn
}

func dialRaw(t *testing.T, addr string) *rawConn {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c}
}

func (r *rawConn) sendFrame(body []byte) {
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	if _, err := r.c.Write(append(frame, body...)); err != nil {
		r.t.Fatalf("write: %v", err)
	}
}

func requestBody(req kmsg.Request, corr int32) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	b = binary.BigEndian.AppendUint16(b, 3)
	b = append(b, "raw"...)
	if req.IsFlexible() {
		b = append(b, 0)
	}
	return req.AppendTo(b)
}

// roundTrip sends req and decodes the response.
func (r *rawConn) roundTrip(req kmsg.Request, corr int32) kmsg.Response {
	r.sendFrame(requestBody(req, corr))
	_ = r.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var sz [4]byte
	if _, err := io.ReadFull(r.c, sz[:]); err != nil {
		r.t.Fatalf("read response size: %v", err)
	}
	buf := make([]byte, binary.BigEndian.Uint32(sz[:]))
	if _, err := io.ReadFull(r.c, buf); err != nil {
		r.t.Fatalf("read response: %v", err)
	}
	if got := int32(binary.BigEndian.Uint32(buf)); got != corr {
		r.t.Fatalf("correlation id: got %d, want %d", got, corr)
	}
	buf = buf[4:]
	resp := req.ResponseKind()
	if resp.IsFlexible() && req.Key() != 18 {
		buf = buf[1:]
	}
	if err := resp.ReadFrom(buf); err != nil {
		r.t.Fatalf("decode response: %v", err)
	}
	return resp
}

// expectClosed checks the broker closed the connection.
func (r *rawConn) expectClosed() {
	_ = r.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.c.Read(make([]byte, 1)); err == nil {
		r.t.Fatal("connection still open, want it closed by the broker")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		r.t.Fatal("connection not closed within 10s")
	}
}

func batch(t *testing.T, values ...string) []byte {
	rb := kmsg.NewRecordBatch()
	rb.Magic = 2
	rb.ProducerID, rb.ProducerEpoch, rb.FirstSequence = -1, -1, -1
	rb.FirstTimestamp, rb.MaxTimestamp = time.Now().UnixMilli(), time.Now().UnixMilli()
	return batchtest.Encode(rb, values...)
}

func produceReq(topic string, records []byte) *kmsg.ProduceRequest {
	req := produceRequest(topic, 0, records, -1, 5000)
	req.SetVersion(7)
	return req
}

func TestBadInputGetsErrorsNotCrashes(t *testing.T) {
	tb := startBroker(t, t.TempDir())
	ctx := ctxT(t, 60*time.Second)
	adm := tb.admin()
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": kadm.StringPtr("2000")}, "bad"); err != nil {
		t.Fatal(err)
	}

	t.Run("2GB length prefix closes the connection", func(t *testing.T) {
		r := dialRaw(t, tb.Addr)
		r.c.Write([]byte{0x7f, 0xff, 0xff, 0xff, 0, 18, 0, 0})
		r.expectClosed()
	})
	t.Run("negative length prefix", func(t *testing.T) {
		r := dialRaw(t, tb.Addr)
		r.c.Write([]byte{0xff, 0xff, 0xff, 0xfe})
		r.expectClosed()
	})
	t.Run("unknown api key", func(t *testing.T) {
		r := dialRaw(t, tb.Addr)
		r.sendFrame([]byte{0x03, 0xe7, 0, 0, 0, 0, 0, 1, 0, 0})
		r.expectClosed()
	})
	t.Run("truncated body", func(t *testing.T) {
		r := dialRaw(t, tb.Addr)
		body := requestBody(produceReq("bad", batch(t, "x")), 1)
		r.sendFrame(body[:len(body)-20])
		r.expectClosed()
	})
	t.Run("too new ApiVersions gets v0 answer with ranges", func(t *testing.T) {
		r := dialRaw(t, tb.Addr)
		req := kmsg.NewPtrApiVersionsRequest()
		req.SetVersion(3)
		body := requestBody(req, 9)
		binary.BigEndian.PutUint16(body[2:], 42)
		r.sendFrame(body)
		_ = r.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		var sz [4]byte
		io.ReadFull(r.c, sz[:])
		buf := make([]byte, binary.BigEndian.Uint32(sz[:]))
		io.ReadFull(r.c, buf)
		resp := kmsg.NewPtrApiVersionsResponse()
		resp.SetVersion(0)
		if err := resp.ReadFrom(buf[4:]); err != nil {
			t.Fatal(err)
		}
		if resp.ErrorCode != kerr.UnsupportedVersion.Code || len(resp.ApiKeys) < 20 {
			t.Fatalf("got error %d with %d keys, want UNSUPPORTED_VERSION and the key list", resp.ErrorCode, len(resp.ApiKeys))
		}
	})
	t.Run("corrupt crc", func(t *testing.T) {
		r := dialRaw(t, tb.Addr)
		b := batch(t, "hello")
		b[len(b)-1] ^= 0xff
		resp := r.roundTrip(produceReq("bad", b), 2).(*kmsg.ProduceResponse)
		if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.CorruptMessage.Code {
			t.Fatalf("got error %v, want CORRUPT_MESSAGE", kerr.ErrorForCode(code))
		}
	})
	t.Run("oversized batch", func(t *testing.T) {
		r := dialRaw(t, tb.Addr)
		big := make([]byte, 5000)
		resp := r.roundTrip(produceReq("bad", batch(t, string(big))), 3).(*kmsg.ProduceResponse)
		if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.MessageTooLarge.Code {
			t.Fatalf("got error %v, want MESSAGE_TOO_LARGE", kerr.ErrorForCode(code))
		}
	})
	t.Run("garbage records", func(t *testing.T) {
		r := dialRaw(t, tb.Addr)
		resp := r.roundTrip(produceReq("bad", []byte("definitely not a batch, but long enough to have a header of sixty-one bytes")), 4).(*kmsg.ProduceResponse)
		if code := resp.Topics[0].Partitions[0].ErrorCode; code == 0 {
			t.Fatal("garbage records accepted")
		}
	})
	t.Run("good batch still accepted on the same connection", func(t *testing.T) {
		r := dialRaw(t, tb.Addr)
		resp := r.roundTrip(produceReq("bad", batch(t, "a", "b", "c")), 5).(*kmsg.ProduceResponse)
		p := resp.Topics[0].Partitions[0]
		if p.ErrorCode != 0 || p.BaseOffset != 0 {
			t.Fatalf("got error %v base %d, want success at offset 0", kerr.ErrorForCode(p.ErrorCode), p.BaseOffset)
		}
	})
	// Nothing bad was stored, and the broker still serves normal clients.
	cons := tb.client(kgo.ConsumeTopics("bad"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var got []string
	for len(got) < 3 {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("got %v, want [a b c]", got)
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	if got[0] != "a" || got[1] != "b" || got[2] != "c" || len(got) != 3 {
		t.Fatalf("got %v, want [a b c]", got)
	}
}
