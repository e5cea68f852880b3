package kapi

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

type server struct{ name string }

func TestTableBindsHandlers(t *testing.T) {
	var tab Table[*server]
	tab.Add(API{Key: 3, Min: 0, Max: 11}, func(s *server, r *Request) kmsg.Response {
		resp := kmsg.NewPtrMetadataResponse()
		resp.ClusterID = &s.name
		return resp
	})
	apis := tab.Bind(&server{name: "one"})
	if len(apis) != 1 || apis[0].Handle == nil || apis[0].Serve != nil {
		t.Fatalf("bound %+v", apis)
	}
	resp := apis[0].Handle(&Request{Msg: kmsg.NewPtrMetadataRequest()}).(*kmsg.MetadataResponse)
	if resp.ClusterID == nil || *resp.ClusterID != "one" {
		t.Fatalf("handler did not get the bound value: %v", resp.ClusterID)
	}
}

// Typed hands the handler the request as its own type; Reply also hands it
// the response to fill in, made at the request's version.
func TestTypedAndReplyPassTheRequestAsItsType(t *testing.T) {
	for name, handle := range map[string]func(*server, *Request) kmsg.Response{
		"Typed": Typed(func(s *server, r *Request, req *kmsg.MetadataRequest) *kmsg.MetadataResponse {
			resp := req.ResponseKind().(*kmsg.MetadataResponse)
			resp.Version = req.Version
			resp.ClusterID = &s.name
			return resp
		}),
		"Reply": Reply(func(s *server, r *Request, req *kmsg.MetadataRequest, resp *kmsg.MetadataResponse) {
			resp.ClusterID = &s.name
		}),
	} {
		var tab Table[*server]
		tab.Add(API{Key: 3, Min: 0, Max: 11}, handle)
		req := kmsg.NewPtrMetadataRequest()
		req.Version = 7
		got := tab.Bind(&server{name: "two"})[0].Handle(&Request{Msg: req})
		resp, ok := got.(*kmsg.MetadataResponse)
		if !ok || resp.Version != 7 || resp.ClusterID == nil || *resp.ClusterID != "two" {
			t.Fatalf("%s: handler answered %#v", name, got)
		}
	}
}

func TestVersionsFollowRegistrations(t *testing.T) {
	handle := func(*Request) kmsg.Response { return nil }
	for _, cluster := range []bool{false, true} {
		reg := NewRegistry(cluster)
		reg.Add(API{Key: 18, Min: 0, Max: 4, Handle: handle},
			API{Key: 0, Min: 3, Max: 9, Handle: handle},
			API{Key: 27, Min: 0, Max: 1, ClusterOnly: true, Handle: handle})
		var got []int16
		for _, v := range reg.Versions() {
			got = append(got, v.ApiKey)
			if a, _ := reg.Get(v.ApiKey); v.MinVersion != a.Min || v.MaxVersion != a.Max {
				t.Errorf("key %d advertised v%d-v%d, registered v%d-v%d", v.ApiKey, v.MinVersion, v.MaxVersion, a.Min, a.Max)
			}
		}
		want := []int16{0, 18}
		if cluster {
			want = []int16{0, 18, 27}
		}
		if len(got) != len(want) {
			t.Fatalf("cluster=%v: advertised %v, want %v", cluster, got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("cluster=%v: advertised %v, want %v", cluster, got, want)
			}
		}
		if _, ok := reg.Get(27); !ok {
			t.Errorf("cluster=%v: a cluster-only API must still be decoded and answered", cluster)
		}
		if reg.Name(27) != "WriteTxnMarkers" || reg.Name(999) != "unknown" {
			t.Errorf("names: %q %q", reg.Name(27), reg.Name(999))
		}
	}
}

func TestRegistryRefusesMistakes(t *testing.T) {
	handle := func(*Request) kmsg.Response { return nil }
	for name, apis := range map[string][]API{
		"two handlers for a key": {{Key: 3, Max: 1, Handle: handle}, {Key: 3, Max: 2, Handle: handle}},
		"no handler":             {{Key: 3, Max: 1}},
		"both handler kinds":     {{Key: 3, Max: 1, Handle: handle, Serve: func(*Request) {}}},
		"empty version range":    {{Key: 3, Min: 2, Max: 1, Handle: handle}},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: Add did not panic", name)
				}
			}()
			NewRegistry(true).Add(apis...)
		}()
	}
}
