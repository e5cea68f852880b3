package broker

// ApiVersions, versions 0-4 (v4 differs from v3 only in the rules for
// supported feature versions, and we advertise no features).
//
// A request newer than v4 gets a v0 body with UNSUPPORTED_VERSION and our
// ranges (KIP-511) so the client can retry with a version we speak; the
// response header is always v0, even for the flexible v3 body.

import (
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// clusterOnlyKeys are advertised only in cluster mode; a single-node
// broker answers them with INVALID_REQUEST.
var clusterOnlyKeys = map[int16]bool{27: true, 45: true, 46: true}

func (b *Broker) apiVersionsResponse(version int16, tooNew bool) *kmsg.ApiVersionsResponse {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = version
	if tooNew {
		resp.ErrorCode = kerr.UnsupportedVersion.Code
	}
	keys := make([]int16, 0, len(supportedVersions))
	for k := range supportedVersions {
		if b.cluster == nil && clusterOnlyKeys[k] {
			continue
		}
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	for _, k := range keys {
		vr := supportedVersions[k]
		ak := kmsg.NewApiVersionsResponseApiKey()
		ak.ApiKey, ak.MinVersion, ak.MaxVersion = k, vr.min, vr.max
		resp.ApiKeys = append(resp.ApiKeys, ak)
	}
	return resp
}
