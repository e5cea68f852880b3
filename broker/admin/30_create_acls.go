package admin

// CreateAcls, versions 0-3: every valid creation is applied in one
// command through the controller (a single broker writes its data
// directory); an invalid one gets INVALID_REQUEST and the others still
// apply. Creating an ACL that exists changes nothing. With an authorizer
// the principal needs Alter on the cluster.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/broker/cluster"
	"github.com/simtel/simtel/broker/kapi"
)

var _ = APIs.Add(kapi.API{Key: 30, Min: 0, Max: 3, Blocking: true}, kapi.Reply(handleCreateACLs))

func handleCreateACLs(b Broker, r *kapi.Request, req *kmsg.CreateACLsRequest, resp *kmsg.CreateACLsResponse) {
	acls := make([]auth.ACL, len(req.Creations))
	for i, c := range req.Creations {
		acls[i] = auth.ACL{ResourceType: c.ResourceType, ResourceName: c.ResourceName, PatternType: c.ResourcePatternType,
			Principal: auth.Principal(c.Principal), Host: c.Host, Operation: c.Operation, Permission: c.PermissionType}
	}
	errs, apply := aclChanges(b, r, len(acls), func(i int) error { return acls[i].Validate() })
	if len(apply) > 0 {
		cmd := cluster.Command{Op: cluster.OpCreateACLs}
		for _, i := range apply {
			cmd.ACLs = append(cmd.ACLs, acls[i])
		}
		if _, err := applySecurity(b, r, cmd); err != nil {
			for _, i := range apply {
				errs[i] = err
			}
		} else {
			b.Logger().Info("acls created", "count", len(cmd.ACLs), "principal", r.Principal)
		}
	}
	for _, err := range errs {
		res := kmsg.NewCreateACLsResponseResult()
		if err != nil {
			res.ErrorCode, res.ErrorMessage = errorOf(err)
		}
		resp.Results = append(resp.Results, res)
	}
}
