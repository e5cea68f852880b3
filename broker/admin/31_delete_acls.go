package admin

// DeleteAcls, versions 0-3: the valid filters are applied in one command
// through the controller (a single broker writes its data directory), and
// each filter's result lists the ACLs it deleted; an invalid filter gets
// INVALID_REQUEST. With an authorizer the principal needs Alter on the
// cluster.

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/cluster"
	"github.com/simtel/simtel/broker/kapi"
)

var _ = APIs.Add(kapi.API{Key: 31, Min: 0, Max: 3, Blocking: true}, kapi.Typed(handleDeleteACLs))

func handleDeleteACLs(b Broker, r *kapi.Request, req *kmsg.DeleteACLsRequest) *kmsg.DeleteACLsResponse {
	resp := req.ResponseKind().(*kmsg.DeleteACLsResponse)
	resp.Version = req.Version
	results := make([]kmsg.DeleteACLsResponseResult, len(req.Filters))
	var filters []cluster.ACLFilter
	var applied []int // index in req.Filters of each of filters
	authorized := clusterAuthorized(b, r, kmsg.ACLOperationAlter)
	for i, rf := range req.Filters {
		results[i] = kmsg.NewDeleteACLsResponseResult()
		f := aclFilter(rf.ResourceType, rf.ResourceName, rf.ResourcePatternType, rf.Principal, rf.Host, rf.Operation, rf.PermissionType)
		switch err := f.Validate(); {
		case !authorized:
			results[i].ErrorCode, results[i].ErrorMessage = errorOf(errClusterAuthorization(r, kmsg.ACLOperationAlter))
		case err != nil:
			results[i].ErrorCode, results[i].ErrorMessage = errorOf(fmt.Errorf("%w: %v", kerr.InvalidRequest, err))
		default:
			filters = append(filters, cluster.ACLFilter(f))
			applied = append(applied, i)
		}
	}
	if len(filters) > 0 {
		ctx, cancel := securityContext(r)
		res, err := b.Security().Apply(ctx, cluster.Command{Op: cluster.OpDeleteACLs, Filters: filters})
		cancel()
		deleted := 0
		for j, i := range applied {
			if err != nil {
				results[i].ErrorCode, results[i].ErrorMessage = errorOf(securityError(err))
				continue
			}
			if j >= len(res.DeletedACLs) {
				continue
			}
			for _, a := range res.DeletedACLs[j] {
				m := kmsg.NewDeleteACLsResponseResultMatchingACL()
				m.ResourceType, m.ResourceName, m.ResourcePatternType = a.ResourceType, a.ResourceName, a.PatternType
				m.Principal, m.Host, m.Operation, m.PermissionType = string(a.Principal), a.Host, a.Operation, a.Permission
				results[i].MatchingACLs = append(results[i].MatchingACLs, m)
				deleted++
			}
		}
		if deleted > 0 {
			b.Logger().Info("acls deleted", "count", deleted, "principal", r.Principal)
		}
	}
	resp.Results = results
	return resp
}
