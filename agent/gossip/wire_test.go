package gossip

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

func sampleEntries(n int) []entry {
	es := make([]entry, n)
	for i := range es {
		es[i] = entry{key: policyKey(longName(i)), version: int64(1) << (i % 63), sinceMs: time.Now().UnixMilli() + int64(i)}
	}
	sortEntries(es)
	return es
}

func TestMetaRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 10, 31} {
		es := sampleEntries(n)
		st := stamp{boot: uint64(time.Now().UnixNano()), seq: uint64(n)}
		m, err := decodeMeta(encodeInlineMeta(st, es))
		if err != nil {
			t.Fatalf("%d entries: %v", n, err)
		}
		if m.external || m.stamp != st || len(m.entries) != n || (n > 0 && !reflect.DeepEqual(m.entries, es)) {
			t.Fatalf("%d entries: got %+v, want %+v", n, m, es)
		}
	}
	st := stamp{boot: uint64(time.Now().UnixNano()), seq: 99}
	m, err := decodeMeta(encodeExternalMeta(st))
	if err != nil || !m.external || m.stamp != st {
		t.Fatalf("external: got %+v, %v; want stamp %+v", m, err, st)
	}
}

// The meta does not grow with the names: 10 policies with 190-byte names
// and large versions stay far below memberlist's limit.
func TestMetaSize(t *testing.T) {
	st := stamp{boot: uint64(time.Now().UnixNano()), seq: 1000}
	es := make([]entry, 10)
	for i := range es {
		es[i] = entry{key: policyKey(longName(i)), version: math.MaxInt64, sinceMs: time.Now().UnixMilli()}
	}
	if got := len(encodeInlineMeta(st, es)); got > memberlist.MetaMaxSize/2 {
		t.Fatalf("10 policies: got %d bytes, want at most %d", got, memberlist.MetaMaxSize/2)
	}
	// Typical versions and today's timestamps: 16 bytes a policy, so 31 fit.
	typical := func(n int) []entry {
		es := make([]entry, n)
		for i := range es {
			es[i] = entry{key: uint64(i), version: 1000, sinceMs: time.Now().UnixMilli()}
		}
		return es
	}
	if got := len(encodeInlineMeta(st, typical(31))); got > memberlist.MetaMaxSize {
		t.Fatalf("31 typical policies: got %d bytes, want at most %d", got, memberlist.MetaMaxSize)
	}
	if got := len(encodeInlineMeta(st, typical(33))); got <= memberlist.MetaMaxSize {
		t.Fatalf("33 typical policies: got %d bytes, want more than %d (the fallback test relies on it)", got, memberlist.MetaMaxSize)
	}
}

func TestRecordAndStateRoundTrip(t *testing.T) {
	r1 := record{node: "node-0001", stamp: stamp{boot: 7, seq: 3}, entries: sampleEntries(5)}
	r2 := record{node: "n2", stamp: stamp{boot: 8, seq: 0}, entries: []entry{}}
	raws, err := decodeState(encodeState([][]byte{encodeRecord(r1), encodeRecord(r2)}))
	if err != nil || len(raws) != 2 {
		t.Fatalf("got %d records, %v; want 2", len(raws), err)
	}
	for i, want := range []record{r1, r2} {
		got, err := decodeRecord(raws[i])
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("record %d: got %+v, %v; want %+v", i, got, err, want)
		}
	}
	direct := encodeRecord(r1)
	direct[0] = msgDirect
	if got, err := decodeRecord(direct); err != nil || !reflect.DeepEqual(got, r1) {
		t.Fatalf("direct record: got %+v, %v; want %+v", got, err, r1)
	}
}

func TestDecodeRejectsCorrupt(t *testing.T) {
	good := encodeInlineMeta(stamp{1, 2}, sampleEntries(3))
	head := []byte{wireVersion, metaInline, 1, 2} // stamp {1, 2}, entries follow
	rec := encodeRecord(record{node: "n1", stamp: stamp{1, 2}, entries: sampleEntries(2)})
	for _, tc := range []struct {
		name string
		dec  func([]byte) error
		in   []byte
	}{
		{"meta truncated", metaErr, good[:len(good)-1]},
		{"meta wrong version", metaErr, append([]byte{2}, good[1:]...)},
		{"meta unknown kind", metaErr, []byte{wireVersion, 'z'}},
		{"meta huge count", metaErr, append(head, 0xff, 0xff, 0xff, 0xff, 0x0f)},
		{"meta version overflows int64", metaErr, append(append(append(head, 1), make([]byte, 8)...), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0)},
		{"meta no stamp", metaErr, []byte{wireVersion, metaInline}},
		{"external truncated", metaErr, []byte{wireVersion, metaExternal, 0x80}},
		{"record truncated", recordErr, rec[:len(rec)-1]},
		{"record empty node", recordErr, encodeRecord(record{})},
		{"record unknown type", recordErr, append([]byte{'x'}, rec[1:]...)},
		{"record name past end", recordErr, []byte{msgRecord, wireVersion, 50, 'a'}},
		{"state truncated", stateErr, encodeState([][]byte{rec})[:5]},
		{"state huge count", stateErr, []byte{wireVersion, 0xff, 0xff, 0x03}},
	} {
		if err := tc.dec(tc.in); !errors.Is(err, errCorrupt) {
			t.Errorf("%s: got %v, want errCorrupt", tc.name, err)
		}
	}
	// Trailing bytes are for future fields, not an error.
	if _, err := decodeMeta(append(bytes.Clone(good), 1, 2, 3)); err != nil {
		t.Errorf("meta with trailing bytes: %v", err)
	}
}

func metaErr(b []byte) error   { _, err := decodeMeta(b); return err }
func recordErr(b []byte) error { _, err := decodeRecord(b); return err }
func stateErr(b []byte) error  { _, err := decodeState(b); return err }

func TestStampOrder(t *testing.T) {
	for _, tc := range []struct {
		a, b stamp
		want bool
	}{
		{stamp{1, 5}, stamp{1, 4}, true},
		{stamp{1, 4}, stamp{1, 4}, false},
		{stamp{2, 0}, stamp{1, 9}, true}, // a restart wins over any seq of the former life
		{stamp{1, 9}, stamp{2, 0}, false},
	} {
		if got := tc.a.newer(tc.b); got != tc.want {
			t.Errorf("%+v newer than %+v: got %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func FuzzDecodeMeta(f *testing.F) {
	f.Add(encodeInlineMeta(stamp{1, 2}, sampleEntries(3)))
	f.Add(encodeExternalMeta(stamp{1, 2}))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta(b)
		if err != nil || m.external {
			return
		}
		// What decodes re-encodes to a meta that decodes the same.
		m2, err := decodeMeta(encodeInlineMeta(m.stamp, m.entries))
		if err != nil || m2.stamp != m.stamp || len(m2.entries) != len(m.entries) {
			t.Fatalf("re-decode: got %+v, %v; want %+v", m2, err, m)
		}
	})
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add(encodeRecord(record{node: "n1", stamp: stamp{1, 2}, entries: sampleEntries(2)}))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRecord(b)
		if err != nil {
			return
		}
		r2, err := decodeRecord(encodeRecord(r))
		if err != nil || r2.node != r.node || r2.stamp != r.stamp || len(r2.entries) != len(r.entries) {
			t.Fatalf("re-decode: got %+v, %v; want %+v", r2, err, r)
		}
	})
}

func FuzzDecodeState(f *testing.F) {
	f.Add(encodeState([][]byte{encodeRecord(record{node: "n1", entries: sampleEntries(1)})}))
	f.Fuzz(func(t *testing.T, b []byte) {
		raws, err := decodeState(b)
		if err != nil {
			return
		}
		total := 0
		for _, r := range raws {
			total += len(r)
		}
		if total > len(b) {
			t.Fatalf("decoded %d bytes of records from %d bytes", total, len(b))
		}
	})
}

// The relay address rides after the entries: it decodes back, a meta
// without it (an older node's) decodes with none, unknown fields before
// it are skipped, and a field cut short leaves the rest of the meta good.
func TestMetaRelayField(t *testing.T) {
	st := stamp{boot: 7, seq: 3}
	es := sampleEntries(2)
	inline := appendMetaFields(encodeInlineMeta(st, es), "10.0.0.7:23001")
	m, err := decodeMeta(inline)
	if err != nil || m.relay != "10.0.0.7:23001" || !reflect.DeepEqual(m.entries, es) || m.stamp != st {
		t.Fatalf("inline meta with relay: %+v, %v", m, err)
	}
	ext := appendMetaFields(encodeExternalMeta(st), "[::1]:23002")
	if m, err := decodeMeta(ext); err != nil || !m.external || m.relay != "[::1]:23002" {
		t.Fatalf("external meta with relay: %+v, %v", m, err)
	}
	if m, err := decodeMeta(encodeInlineMeta(st, es)); err != nil || m.relay != "" {
		t.Fatalf("meta without relay: %+v, %v", m, err)
	}
	unknown := append(encodeInlineMeta(st, es), 'z', 2, 'x', 'y')
	if m, err := decodeMeta(appendMetaFields(unknown, "h:1")); err != nil || m.relay != "h:1" {
		t.Fatalf("relay after an unknown field: %+v, %v", m, err)
	}
	if m, err := decodeMeta(inline[:len(inline)-3]); err != nil || m.relay != "" || len(m.entries) != 2 {
		t.Fatalf("truncated relay field: %+v, %v", m, err)
	}
}
