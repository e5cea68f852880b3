package admin

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/broker/cluster"
	"github.com/simtel/simtel/broker/kapi"
)

// Security is the broker's SCRAM credentials and ACLs as the ACL and SCRAM
// APIs (29, 30, 31, 50, 51) see them: the cluster's replicated state, or a
// single broker's.
type Security interface {
	// State is the current state; with fresh, a cluster broker first
	// catches up with the controller (a read barrier). Its error is a
	// kerr error.
	State(ctx context.Context, fresh bool) (*cluster.Security, error)
	// Apply runs a security command (credential or ACL changes) through the
	// controller, or on a single broker. Its errors wrap the cluster's
	// sentinels.
	Apply(ctx context.Context, c cluster.Command) (cluster.Result, error)
	// Authorizer is nil when the broker authorizes nothing (--authorizer
	// none).
	Authorizer() auth.Authorizer
}

// clusterAuthorized reports whether the request's principal may do op on
// the cluster resource, which guards the ACL and SCRAM APIs as in Kafka
// (Describe to read them, Alter to change them).
func clusterAuthorized(b Broker, r *kapi.Request, op auth.Operation) bool {
	z := b.Security().Authorizer()
	return z == nil || z.Authorize(r.Principal, r.Host, op, auth.Cluster)
}

// errClusterAuthorization is the answer of a request clusterAuthorized
// refuses.
func errClusterAuthorization(r *kapi.Request, op auth.Operation) error {
	return fmt.Errorf("%w: %s may not %s the cluster", kerr.ClusterAuthorizationFailed, r.Principal, op)
}

// securityError maps an error of Security.Apply to a Kafka error.
func securityError(err error) error {
	switch {
	case errors.Is(err, cluster.ErrNoCredential):
		return fmt.Errorf("%w: %v", kerr.ResourceNotFound, err)
	case errors.Is(err, cluster.ErrBadCommand):
		return fmt.Errorf("%w: %v", kerr.InvalidRequest, err)
	}
	return ControllerError(err)
}

// securityContext bounds a request's wait for the controller.
func securityContext(r *kapi.Request) (context.Context, context.CancelFunc) {
	ctx := r.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithTimeout(ctx, Timeout)
}

// aclFilter is a DescribeAcls or DeleteAcls filter.
func aclFilter(rt auth.ResourceType, name *string, pt auth.PatternType, principal, host *string, op auth.Operation, perm auth.Permission) auth.ACLFilter {
	return auth.ACLFilter{ResourceType: rt, ResourceName: name, PatternType: pt, Principal: principal, Host: host, Operation: op, Permission: perm}
}

// describedResources groups ACLs by resource pattern, in the order each
// pattern first appears, as DescribeAcls answers.
func describedResources(acls []auth.ACL) []kmsg.DescribeACLsResponseResource {
	type key struct {
		t auth.ResourceType
		n string
		p auth.PatternType
	}
	idx := map[key]int{}
	var out []kmsg.DescribeACLsResponseResource
	for _, a := range acls {
		k := key{a.ResourceType, a.ResourceName, a.PatternType}
		i, ok := idx[k]
		if !ok {
			res := kmsg.NewDescribeACLsResponseResource()
			res.ResourceType, res.ResourceName, res.ResourcePatternType = a.ResourceType, a.ResourceName, a.PatternType
			out = append(out, res)
			i = len(out) - 1
			idx[k] = i
		}
		e := kmsg.NewDescribeACLsResponseResourceACL()
		e.Principal, e.Host, e.Operation, e.PermissionType = string(a.Principal), a.Host, a.Operation, a.Permission
		out[i].ACLs = append(out[i].ACLs, e)
	}
	return out
}
