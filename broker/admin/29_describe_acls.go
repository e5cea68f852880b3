package admin

// DescribeAcls, versions 0-3: the ACLs a filter selects (ANY values and
// null strings select everything; pattern type MATCH selects what applies
// to the named resource), grouped by resource pattern. With an authorizer
// the principal needs Describe on the cluster.

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = APIs.Add(kapi.API{Key: 29, Min: 0, Max: 3, Blocking: true}, kapi.Typed(handleDescribeACLs))

func handleDescribeACLs(b Broker, r *kapi.Request, req *kmsg.DescribeACLsRequest) *kmsg.DescribeACLsResponse {
	resp := req.ResponseKind().(*kmsg.DescribeACLsResponse)
	resp.Version = req.Version
	fail := func(err error) *kmsg.DescribeACLsResponse {
		resp.ErrorCode, resp.ErrorMessage = errorOf(err)
		return resp
	}
	if !clusterAuthorized(b, r, kmsg.ACLOperationDescribe) {
		return fail(errClusterAuthorization(r, kmsg.ACLOperationDescribe))
	}
	f := aclFilter(req.ResourceType, req.ResourceName, req.ResourcePatternType, req.Principal, req.Host, req.Operation, req.PermissionType)
	if err := f.Validate(); err != nil {
		return fail(fmt.Errorf("%w: %v", kerr.InvalidRequest, err))
	}
	ctx, cancel := securityContext(r)
	defer cancel()
	st, err := b.Security().State(ctx, true)
	if err != nil {
		return fail(err)
	}
	var acls = st.ACLs[:0:0]
	for _, a := range st.ACLs {
		if f.Matches(a) {
			acls = append(acls, a)
		}
	}
	resp.Resources = describedResources(acls)
	return resp
}
