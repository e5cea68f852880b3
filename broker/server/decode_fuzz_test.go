package server

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

// encodeRequest frames a request body the way a client does (without the
// size prefix): header v1/v2, then the body.
func encodeRequest(req kmsg.Request, corr int32) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	id := "fuzz"
	b = binary.BigEndian.AppendUint16(b, uint16(len(id)))
	b = append(b, id...)
	if req.IsFlexible() {
		b = append(b, 0)
	}
	return req.AppendTo(b)
}

// testAPIs is a table of every key kmsg knows at every version it
// encodes: the server's own APIs and a handler for each other key (never
// called: these tests only decode).
var testAPIs = func() *kapi.Registry {
	reg := kapi.NewRegistry(false)
	reg.Add(apis.Bind(nil)...)
	for key := int16(0); key <= kmsg.MaxKey; key++ {
		req := kmsg.RequestForKey(key)
		if _, served := reg.Get(key); served || req == nil {
			continue
		}
		reg.Add(kapi.API{Key: key, Min: 0, Max: req.MaxVersion(), Handle: func(*kapi.Request) kmsg.Response { return nil }})
	}
	return reg
}()

func seedRequests() [][]byte {
	var out [][]byte
	for _, key := range testAPIs.Keys() {
		api, _ := testAPIs.Get(key)
		for v := api.Min; v <= api.Max; v++ {
			req := kmsg.RequestForKey(key)
			req.SetVersion(v)
			if p, ok := req.(*kmsg.ProduceRequest); ok {
				t := kmsg.NewProduceRequestTopic()
				t.Topic = "t"
				pp := kmsg.NewProduceRequestTopicPartition()
				pp.Records = []byte("not a record batch at all")
				t.Partitions = append(t.Partitions, pp)
				p.Topics = append(p.Topics, t)
			}
			out = append(out, encodeRequest(req, int32(v)))
		}
	}
	return out
}

func TestDecodeRequestRoundTrip(t *testing.T) {
	for _, frame := range seedRequests() {
		req, h, err := decodeRequest(testAPIs, frame)
		if err != nil {
			t.Fatalf("key %d v%d: decode of a well-formed request failed: %v", h.key, h.version, err)
		}
		if req.Key() != h.key || req.GetVersion() != h.version {
			t.Fatalf("got key %d v%d, want key %d v%d", req.Key(), req.GetVersion(), h.key, h.version)
		}
	}
}

func TestDecodeRequestRejects(t *testing.T) {
	api := kmsg.NewPtrApiVersionsRequest()
	api.SetVersion(3)
	good := encodeRequest(api, 7)
	tooNew := append([]byte(nil), good...)
	binary.BigEndian.PutUint16(tooNew[2:], 99)
	if _, _, err := decodeRequest(testAPIs, tooNew); !errors.Is(err, errTooNewAPIVersions) {
		t.Fatalf("ApiVersions v99: got %v, want errTooNewAPIVersions", err)
	}
	unknownKey := append([]byte(nil), good...)
	binary.BigEndian.PutUint16(unknownKey, 999)
	meta := kmsg.NewPtrMetadataRequest()
	meta.SetVersion(11)
	tooNewMeta := encodeRequest(meta, 1)
	binary.BigEndian.PutUint16(tooNewMeta[2:], 99)
	for name, frame := range map[string][]byte{
		"unknown key":    unknownKey,
		"metadata v99":   tooNewMeta,
		"truncated":      good[:5],
		"truncated body": encodeRequest(meta, 1)[:14],
		"garbage":        []byte{0, 3, 0, 11, 1, 2, 3, 4, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
	} {
		var pe *protocolError
		if _, _, err := decodeRequest(testAPIs, frame); !errors.As(err, &pe) {
			t.Errorf("%s: got %v, want a protocol error", name, err)
		}
	}
}

// FuzzDecodeRequest: arbitrary frames never panic, and whatever decodes
// re-encodes.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range seedRequests() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		req, _, err := decodeRequest(testAPIs, frame)
		if err == nil {
			_ = req.AppendTo(nil)
		}
	})
}
