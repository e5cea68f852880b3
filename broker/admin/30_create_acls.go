package admin

// CreateAcls, versions 0-3: every valid creation is applied in one
// command through the controller (a single broker writes its data
// directory); an invalid one gets INVALID_REQUEST and the others still
// apply. Creating an ACL that exists changes nothing. With an authorizer
// the principal needs Alter on the cluster.

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/broker/cluster"
	"github.com/simtel/simtel/broker/kapi"
)

var _ = APIs.Add(kapi.API{Key: 30, Min: 0, Max: 3, Blocking: true}, kapi.Typed(handleCreateACLs))

func handleCreateACLs(b Broker, r *kapi.Request, req *kmsg.CreateACLsRequest) *kmsg.CreateACLsResponse {
	resp := req.ResponseKind().(*kmsg.CreateACLsResponse)
	resp.Version = req.Version
	errs := make([]error, len(req.Creations))
	var acls []auth.ACL
	authorized := clusterAuthorized(b, r, kmsg.ACLOperationAlter)
	for i, c := range req.Creations {
		a := auth.ACL{ResourceType: c.ResourceType, ResourceName: c.ResourceName, PatternType: c.ResourcePatternType,
			Principal: auth.Principal(c.Principal), Host: c.Host, Operation: c.Operation, Permission: c.PermissionType}
		switch err := a.Validate(); {
		case !authorized:
			errs[i] = errClusterAuthorization(r, kmsg.ACLOperationAlter)
		case err != nil:
			errs[i] = fmt.Errorf("%w: %v", kerr.InvalidRequest, err)
		default:
			acls = append(acls, a)
		}
	}
	if len(acls) > 0 {
		ctx, cancel := securityContext(r)
		_, err := b.Security().Apply(ctx, cluster.Command{Op: cluster.OpCreateACLs, ACLs: acls})
		cancel()
		if err != nil {
			err = securityError(err)
			for i := range errs {
				if errs[i] == nil {
					errs[i] = err
				}
			}
		} else {
			b.Logger().Info("acls created", "count", len(acls), "principal", r.Principal)
		}
	}
	for _, err := range errs {
		res := kmsg.NewCreateACLsResponseResult()
		if err != nil {
			res.ErrorCode, res.ErrorMessage = errorOf(err)
		}
		resp.Results = append(resp.Results, res)
	}
	return resp
}
