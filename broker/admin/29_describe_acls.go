package admin

// DescribeAcls, versions 0-3: the ACLs a filter selects (ANY values and
// null strings select everything; pattern type MATCH selects what applies
// to the named resource), grouped by resource pattern. With an authorizer
// the principal needs Describe on the cluster.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = APIs.Add(kapi.API{Key: 29, Min: 0, Max: 3, Blocking: true}, kapi.Reply(handleDescribeACLs))

func handleDescribeACLs(b Broker, r *kapi.Request, req *kmsg.DescribeACLsRequest, resp *kmsg.DescribeACLsResponse) {
	f := aclFilter(req.ResourceType, req.ResourceName, req.ResourcePatternType, req.Principal, req.Host, req.Operation, req.PermissionType)
	st, err := securityState(b, r, f.Validate())
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = errorOf(err)
		return
	}
	var acls = st.ACLs[:0:0]
	for _, a := range st.ACLs {
		if f.Matches(a) {
			acls = append(acls, a)
		}
	}
	resp.Resources = describedResources(acls)
}
