package admin

// DeleteAcls, versions 0-3: the valid filters are applied in one command
// through the controller (a single broker writes its data directory), and
// each filter's result lists the ACLs it deleted; an invalid filter gets
// INVALID_REQUEST. With an authorizer the principal needs Alter on the
// cluster.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/broker/cluster"
	"github.com/simtel/simtel/broker/kapi"
)

var _ = APIs.Add(kapi.API{Key: 31, Min: 0, Max: 3, Blocking: true}, kapi.Reply(handleDeleteACLs))

func handleDeleteACLs(b Broker, r *kapi.Request, req *kmsg.DeleteACLsRequest, resp *kmsg.DeleteACLsResponse) {
	filters := make([]auth.ACLFilter, len(req.Filters))
	for i, rf := range req.Filters {
		filters[i] = aclFilter(rf.ResourceType, rf.ResourceName, rf.ResourcePatternType, rf.Principal, rf.Host, rf.Operation, rf.PermissionType)
	}
	errs, apply := aclChanges(b, r, len(filters), func(i int) error { return filters[i].Validate() })
	results := make([]kmsg.DeleteACLsResponseResult, len(filters))
	for i := range results {
		results[i] = kmsg.NewDeleteACLsResponseResult()
		if errs[i] != nil {
			results[i].ErrorCode, results[i].ErrorMessage = errorOf(errs[i])
		}
	}
	if len(apply) > 0 {
		cmd := cluster.Command{Op: cluster.OpDeleteACLs}
		for _, i := range apply {
			cmd.Filters = append(cmd.Filters, cluster.ACLFilter(filters[i]))
		}
		res, err := applySecurity(b, r, cmd)
		deleted := 0
		for j, i := range apply {
			if err != nil {
				results[i].ErrorCode, results[i].ErrorMessage = errorOf(err)
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
}
