package group

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/broker/kapi"
)

// elsewhere is a broker of a cluster that coordinates no group.
type elsewhere struct{}

func (elsewhere) Single() *Coordinator                        { return nil }
func (elsewhere) CoordinatorFor(string) (*Coordinator, int16) { return nil, kerr.NotCoordinator.Code }
func (elsewhere) Served() []*Coordinator                      { return nil }

// Every group API answers a request for a group coordinated elsewhere
// with NOT_COORDINATOR, in the response of its own key.
func TestGroupAPIsRouteToTheGroupsCoordinator(t *testing.T) {
	apis := APIs.Bind(elsewhere{})
	if len(apis) != 10 {
		t.Fatalf("%d group APIs, want 10", len(apis))
	}
	for _, a := range apis {
		req := kmsg.RequestForKey(a.Key)
		req.SetVersion(a.Max)
		switch q := req.(type) {
		case *kmsg.DescribeGroupsRequest:
			q.Groups = []string{"g", "h"}
		case *kmsg.DeleteGroupsRequest:
			q.Groups = []string{"g", "h"}
		case *kmsg.OffsetCommitRequest:
			q.Group = "g"
			tp := kmsg.NewOffsetCommitRequestTopic()
			tp.Topic, tp.Partitions = "t", []kmsg.OffsetCommitRequestTopicPartition{kmsg.NewOffsetCommitRequestTopicPartition()}
			q.Topics = append(q.Topics, tp)
		}
		resp := a.Handle(&kapi.Request{Ctx: context.Background(), Msg: req})
		if resp == nil || resp.Key() != a.Key {
			t.Fatalf("%s: answered %v", a.Name(), resp)
		}
		if a.Key == 16 { // ListGroups lists what this broker coordinates: nothing
			if l := resp.(*kmsg.ListGroupsResponse); l.ErrorCode != 0 || len(l.Groups) != 0 {
				t.Errorf("ListGroups: %+v", l)
			}
			continue
		}
		codes := responseCodes(resp)
		if len(codes) == 0 {
			t.Errorf("%s: no error code in %+v", a.Name(), resp)
		}
		if a.Key == 15 || a.Key == 42 { // each named group answered once
			if len(codes) != 2 {
				t.Errorf("%s: %d group answers for groups g and h, want 2", a.Name(), len(codes))
			}
		}
		for _, c := range codes {
			if c != kerr.NotCoordinator.Code {
				t.Errorf("%s: error code %d, want NOT_COORDINATOR", a.Name(), c)
			}
		}
	}
}

func responseCodes(resp kmsg.Response) []int16 {
	switch r := resp.(type) {
	case *kmsg.DescribeGroupsResponse:
		var out []int16
		for _, g := range r.Groups {
			out = append(out, g.ErrorCode)
		}
		return out
	case *kmsg.DeleteGroupsResponse:
		var out []int16
		for _, g := range r.Groups {
			out = append(out, g.ErrorCode)
		}
		return out
	case *kmsg.OffsetCommitResponse:
		var out []int16
		for _, tp := range r.Topics {
			for _, p := range tp.Partitions {
				out = append(out, p.ErrorCode)
			}
		}
		return out
	}
	// The other group responses carry one code, at the top.
	if f := reflect.ValueOf(resp).Elem().FieldByName("ErrorCode"); f.IsValid() {
		return []int16{int16(f.Int())}
	}
	return nil
}

// single is a broker that coordinates every group itself.
type single struct{ c *Coordinator }

func (s single) Single() *Coordinator                        { return s.c }
func (s single) CoordinatorFor(string) (*Coordinator, int16) { return s.c, 0 }
func (s single) Served() []*Coordinator                      { return []*Coordinator{s.c} }

// denyTopic authorizes everything but access to the topic it names.
type denyTopic string

func (d denyTopic) Authorize(_ auth.Principal, _ string, _ auth.Operation, res auth.Resource) bool {
	return res != auth.Topic(string(d))
}

// OffsetDelete deletes the offsets of the topics the principal may read
// and answers every partition of the others TOPIC_AUTHORIZATION_FAILED.
func TestOffsetDeleteDeniedTopics(t *testing.T) {
	h := newHarness(t, nil)
	if codes := h.simpleCommit("g", "t1", map[int32]int64{0: 5}); codes[0] != 0 {
		t.Fatalf("commit: %v", kerr.ErrorForCode(codes[0]))
	}
	req := kmsg.NewPtrOffsetDeleteRequest()
	req.Group = "g"
	for topic, parts := range map[string][]int32{"t1": {0}, "secret": {1, 2}} {
		rt := kmsg.NewOffsetDeleteRequestTopic()
		rt.Topic = topic
		for _, p := range parts {
			rp := kmsg.NewOffsetDeleteRequestTopicPartition()
			rp.Partition = p
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	var resp *kmsg.OffsetDeleteResponse
	for _, a := range APIs.Bind(single{h.c}) {
		if a.Key == req.Key() {
			resp = a.Handle(&kapi.Request{Ctx: context.Background(), Msg: req, Authz: denyTopic("secret")}).(*kmsg.OffsetDeleteResponse)
		}
	}
	if resp == nil || resp.ErrorCode != 0 {
		t.Fatalf("response %+v", resp)
	}
	got := map[string]int16{}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			got[fmt.Sprintf("%s/%d", rt.Topic, rp.Partition)] = rp.ErrorCode
		}
	}
	want := map[string]int16{"t1/0": 0, "secret/1": kerr.TopicAuthorizationFailed.Code, "secret/2": kerr.TopicAuthorizationFailed.Code}
	if !maps.Equal(got, want) {
		t.Errorf("partition codes %v, want %v", got, want)
	}
	if off := h.fetch("g")[0]; off != -1 {
		t.Errorf("offset of t1/0 after the delete: %d, want -1", off)
	}
}
