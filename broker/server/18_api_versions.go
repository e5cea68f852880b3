package server

// ApiVersions, versions 0-4 (v4 differs from v3 only in the rules for
// supported feature versions, and we advertise no features).
//
// A request newer than v4 gets a v0 body with UNSUPPORTED_VERSION and our
// ranges (KIP-511) so the client can retry with a version we speak; the
// response header is always v0, even for the flexible v3 body.

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = apis.Add(kapi.API{Key: 18, Min: 0, Max: 4},
	func(s *Server, r *kapi.Request) kmsg.Response {
		return s.apiVersionsResponse(r.Msg.GetVersion(), false)
	})

// apiVersionsResponse lists every API of the table, the broker's and the
// server's.
func (s *Server) apiVersionsResponse(version int16, tooNew bool) *kmsg.ApiVersionsResponse {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = version
	if tooNew {
		resp.ErrorCode = kerr.UnsupportedVersion.Code
	}
	resp.ApiKeys = s.apis.Versions()
	return resp
}
