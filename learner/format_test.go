package learner

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestCheckPolicyName(t *testing.T) {
	for name, ok := range map[string]bool{
		"pi": true, "agent-7.v2_x": true, strings.Repeat("a", 242): true,
		"": false, ".": false, "..": false, "a/b": false, "a b": false, "é": false, strings.Repeat("a", 243): false,
	} {
		if err := CheckPolicyName(name); (err == nil) != ok {
			t.Errorf("CheckPolicyName(%.30q) = %v, want ok=%v", name, err, ok)
		}
	}
}

func TestParseHeaders(t *testing.T) {
	hs := func(kv ...string) []kgo.RecordHeader {
		var out []kgo.RecordHeader
		for i := 0; i < len(kv); i += 2 {
			out = append(out, header(kv[i], kv[i+1]))
		}
		return out
	}
	for _, tc := range []struct {
		name string
		in   []kgo.RecordHeader
		want recordHeader
		ok   bool
	}{
		{"chunk", chunkHeaders(7, 3, "ab"), recordHeader{kind: KindChunk, version: 7, index: 3, publish: "ab"}, true},
		{"manifest", manifestHeaders(9, ""), recordHeader{kind: KindManifest, version: 9}, true},
		{"other headers", append(hs("x", "y"), chunkHeaders(1, 0, "")...), recordHeader{kind: KindChunk, version: 1}, true},
		{"no headers", nil, recordHeader{}, false},
		{"unknown kind", hs(HeaderKind, "blob", HeaderVersion, "1"), recordHeader{}, false},
		{"version 0", hs(HeaderKind, KindManifest, HeaderVersion, "0"), recordHeader{}, false},
		{"leading zero", hs(HeaderKind, KindManifest, HeaderVersion, "01"), recordHeader{}, false},
		{"signed", hs(HeaderKind, KindManifest, HeaderVersion, "+1"), recordHeader{}, false},
		{"chunk without index", hs(HeaderKind, KindChunk, HeaderVersion, "1"), recordHeader{}, false},
		{"manifest with index", hs(HeaderKind, KindManifest, HeaderVersion, "1", HeaderIndex, "0"), recordHeader{}, false},
		{"twice", append(chunkHeaders(1, 0, ""), header(HeaderVersion, "2")), recordHeader{}, false},
	} {
		got, err := parseHeaders(tc.in)
		if (err == nil) != tc.ok || tc.ok && got != tc.want {
			t.Errorf("%s: got %+v, %v; want %+v, ok=%v", tc.name, got, err, tc.want, tc.ok)
		}
	}
}

func validManifest() Manifest {
	return Manifest{Policy: "pi", Version: 2, Size: 5, Chunks: 1, FirstChunkOffset: 3, LastChunkOffset: 3,
		SHA256: strings.Repeat("ab", 32), Published: time.Unix(1700000000, 0).UTC(), Metadata: map[string]string{"k": "v"}}
}

func TestManifestValidate(t *testing.T) {
	for name, mod := range map[string]func(*Manifest){
		"version 0":         func(m *Manifest) { m.Version = 0 },
		"bad name":          func(m *Manifest) { m.Policy = "../x" },
		"negative size":     func(m *Manifest) { m.Size = -1 },
		"size without data": func(m *Manifest) { m.Chunks = 0 },
		"too big":           func(m *Manifest) { m.Size = MaxChunkSize + 1 },
		"reversed range":    func(m *Manifest) { m.LastChunkOffset = 2 },
		"range too small":   func(m *Manifest) { m.Chunks = 2 },
		"short sha":         func(m *Manifest) { m.SHA256 = "ab" },
		"upper sha":         func(m *Manifest) { m.SHA256 = strings.Repeat("AB", 32) },
		"not hex":           func(m *Manifest) { m.SHA256 = strings.Repeat("zz", 32) },
		"huge metadata":     func(m *Manifest) { m.Metadata = map[string]string{"k": strings.Repeat("v", maxMetadataBytes)} },
	} {
		m := validManifest()
		mod(&m)
		if err := m.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, m)
		}
	}
	m := validManifest()
	if err := m.Validate(); err != nil {
		t.Fatalf("valid manifest: %v", err)
	}
	empty := Manifest{Policy: "pi", Version: 1, FirstChunkOffset: -1, LastChunkOffset: -1, SHA256: strings.Repeat("0", 64)}
	if err := empty.Validate(); err != nil {
		t.Errorf("empty version: %v", err)
	}
}

// FuzzDecodeRecord feeds arbitrary headers and values to the decoders a
// reader runs on every record: they must not panic, and whatever they
// accept must survive a round trip through the encoders.
func FuzzDecodeRecord(f *testing.F) {
	good, _ := json.Marshal(validManifest())
	f.Add(KindManifest, "2", "", "", good)
	f.Add(KindChunk, "2", "0", "ab12", []byte("data"))
	f.Add(KindManifest, "2", "", "x", []byte(`{"policy":"pi","version":2,"publish_id":"x"}`))
	f.Add(KindManifest, "1", "", "", []byte(`{"policy":"pi","version":1,"size":0,"chunks":0,"sha256":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}`))
	f.Add("chunk", "9223372036854775807", "-1", "", []byte{})
	f.Fuzz(func(t *testing.T, kind, version, index, publish string, value []byte) {
		in := []kgo.RecordHeader{header(HeaderKind, kind), header(HeaderVersion, version)}
		if index != "" {
			in = append(in, header(HeaderIndex, index))
		}
		if publish != "" {
			in = append(in, header(HeaderPublish, publish))
		}
		h, err := parseHeaders(in)
		if err != nil {
			return
		}
		var again recordHeader
		if h.kind == KindChunk {
			again, err = parseHeaders(chunkHeaders(h.version, h.index, h.publish))
		} else {
			again, err = parseHeaders(manifestHeaders(h.version, h.publish))
		}
		if err != nil || again != h {
			t.Fatalf("headers %+v re-encoded decode to %+v, %v", h, again, err)
		}
		m, err := decodeManifest(value, h)
		if err != nil {
			return
		}
		if h.kind != KindManifest || m.Version != h.version || m.PublishID != h.publish {
			t.Fatalf("decodeManifest accepted %+v under headers %+v", m, h)
		}
		checkManifestRoundTrip(t, m, h)
	})
}

// checkManifestRoundTrip fails the test unless m, encoded again, decodes
// under h to the same manifest (nil and empty metadata count as equal).
func checkManifestRoundTrip(t *testing.T, m Manifest, h recordHeader) {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := decodeManifest(b, h)
	if err != nil {
		t.Fatalf("re-encoded manifest rejected: %v", err)
	}
	if !reflect.DeepEqual(m, m2) && !(len(m.Metadata) == 0 && len(m2.Metadata) == 0) {
		t.Fatalf("round trip changed the manifest:\n%+v\n%+v", m, m2)
	}
}
