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

// securityState is the state DescribeAcls and DescribeUserScramCredentials
// answer from, read once the principal may Describe the cluster and the
// request is valid (invalid, the request's own check, nil when it has none),
// or the error to answer.
func securityState(b Broker, r *kapi.Request, invalid error) (*cluster.Security, error) {
	if !clusterAuthorized(b, r, kmsg.ACLOperationDescribe) {
		return nil, errClusterAuthorization(r, kmsg.ACLOperationDescribe)
	}
	if invalid != nil {
		return nil, fmt.Errorf("%w: %v", kerr.InvalidRequest, invalid)
	}
	ctx, cancel := securityContext(r)
	defer cancel()
	return b.Security().State(ctx, true)
}

// errClusterDenied is errClusterAuthorization when the request's principal
// may not do op on the cluster, nil when it may. It asks the request's
// authorizer, as the cluster-wide APIs (DescribeCluster, the reassignment
// APIs) do.
func errClusterDenied(r *kapi.Request, op auth.Operation) error {
	if r.Allowed(op, auth.Cluster) {
		return nil
	}
	return errClusterAuthorization(r, op)
}

// clusterController is the controller node a cluster-wide API runs on
// (ListPartitionReassignments, AlterPartitionAssignments) and its current
// metadata, once the principal may do op on the cluster; else the error to
// answer.
func clusterController(b Broker, r *kapi.Request, op auth.Operation, notCluster string) (*cluster.Node, *cluster.Metadata, error) {
	if err := errClusterDenied(r, op); err != nil {
		return nil, nil, err
	}
	n, err := controller(b, notCluster)
	if err != nil {
		return nil, nil, err
	}
	return n, n.Metadata(), nil
}

// aclChanges checks the n entries of a CreateAcls or DeleteAcls request:
// errs holds each refused entry's answer (the principal may not Alter the
// cluster, or validate's error as INVALID_REQUEST), apply the indexes of
// the others, which go to the controller in one command.
func aclChanges(b Broker, r *kapi.Request, n int, validate func(i int) error) (errs []error, apply []int) {
	authorized := clusterAuthorized(b, r, kmsg.ACLOperationAlter)
	errs = make([]error, n)
	for i := range errs {
		switch err := validate(i); {
		case !authorized:
			errs[i] = errClusterAuthorization(r, kmsg.ACLOperationAlter)
		case err != nil:
			errs[i] = fmt.Errorf("%w: %v", kerr.InvalidRequest, err)
		default:
			apply = append(apply, i)
		}
	}
	return errs, apply
}

// applySecurity runs c through the controller (or on a single broker),
// waiting no longer than securityContext allows; its error is a Kafka
// error.
func applySecurity(b Broker, r *kapi.Request, c cluster.Command) (cluster.Result, error) {
	ctx, cancel := securityContext(r)
	defer cancel()
	res, err := b.Security().Apply(ctx, c)
	if err != nil {
		return res, securityError(err)
	}
	return res, nil
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
