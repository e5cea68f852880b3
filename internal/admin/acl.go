package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ACL is one ACL as `simtel acl` prints it, or (ACLFilter) what it
// selects.
type ACL struct {
	Principal  string
	Host       string
	Resource   kmsg.ACLResourceType // TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID
	Name       string
	Pattern    kmsg.ACLResourcePatternType // LITERAL or PREFIXED
	Operation  kmsg.ACLOperation
	Permission kmsg.ACLPermissionType // ALLOW or DENY
}

// ACLFilter is an ACL to add, or the ACLs to list or delete. For listing
// and deleting, the zero value of a field selects every value: no
// principal or host, Resource ANY (or zero), no name, Pattern zero (a
// literal or prefixed pattern of that name; PREFIXED selects only
// prefixed ones, MATCH every pattern applying to the name), Operation
// zero, Permission zero. Adding needs Resource, Name (but for the
// cluster), Principal, Operation and Permission; Host defaults to "*" and
// Pattern to LITERAL.
type ACLFilter ACL

// builder turns f into kadm's builder; create says whether for adding.
func (f ACLFilter) builder(create bool) (*kadm.ACLBuilder, error) {
	b := kadm.NewACLs()
	var names []string
	if f.Name != "" {
		names = []string{f.Name}
	}
	switch f.Resource {
	case kmsg.ACLResourceTypeTopic:
		b.Topics(names...)
	case kmsg.ACLResourceTypeGroup:
		b.Groups(names...)
	case kmsg.ACLResourceTypeCluster:
		b.Clusters()
	case kmsg.ACLResourceTypeTransactionalId:
		b.TransactionalIDs(names...)
	case kmsg.ACLResourceTypeAny, kmsg.ACLResourceTypeUnknown:
		if create {
			return nil, errors.New("an ACL needs a resource: --topic, --group, --cluster or --transactional-id")
		}
		b.AnyResource(names...)
	default:
		return nil, fmt.Errorf("resource type %s is not supported", f.Resource)
	}
	if create && f.Resource != kmsg.ACLResourceTypeCluster && f.Name == "" {
		return nil, fmt.Errorf("an ACL on a %s needs its name", f.Resource)
	}
	pattern := f.Pattern
	if pattern == kmsg.ACLResourcePatternTypeUnknown {
		pattern = kmsg.ACLResourcePatternTypeLiteral
		if !create {
			pattern = kmsg.ACLResourcePatternTypeAny
		}
	}
	b.ResourcePatternType(pattern)
	var principals, hosts []string
	if f.Principal != "" {
		principals = []string{f.Principal}
	}
	host := f.Host
	if create && host == "" {
		host = "*"
	}
	if host != "" {
		hosts = []string{host}
	}
	switch f.Permission {
	case kmsg.ACLPermissionTypeAllow:
		b.Allow(principals...).AllowHosts(hosts...)
	case kmsg.ACLPermissionTypeDeny:
		b.Deny(principals...).DenyHosts(hosts...)
	default:
		if create {
			return nil, errors.New("an ACL needs --allow or --deny")
		}
		b.Allow(principals...).AllowHosts(hosts...).Deny(principals...).DenyHosts(hosts...)
	}
	if create && f.Principal == "" {
		return nil, errors.New("an ACL needs a --principal (User:name, or User:* for everyone)")
	}
	switch {
	case f.Operation != kmsg.ACLOperationUnknown && f.Operation != kmsg.ACLOperationAny:
		b.Operations(f.Operation)
	case create:
		return nil, errors.New("an ACL needs an --operation")
	default:
		b.Operations()
	}
	return b, nil
}

// AddACL creates the ACL f describes.
func (c *Client) AddACL(ctx context.Context, f ACLFilter) error {
	b, err := f.builder(true)
	if err != nil {
		return fmt.Errorf("cannot add acl: %w", err)
	}
	res, err := c.adm.CreateACLs(ctx, b)
	if err != nil {
		return fmt.Errorf("cannot add acl: %w", reach(err))
	}
	for _, r := range res {
		if r.Err != nil {
			return fmt.Errorf("cannot add acl: %w%s", r.Err, detail(r.ErrMessage))
		}
	}
	return nil
}

// ListACLs lists the ACLs f selects, sorted.
func (c *Client) ListACLs(ctx context.Context, f ACLFilter) ([]ACL, error) {
	b, err := f.builder(false)
	if err != nil {
		return nil, fmt.Errorf("cannot list acls: %w", err)
	}
	res, err := c.adm.DescribeACLs(ctx, b)
	if err != nil {
		return nil, fmt.Errorf("cannot list acls: %w", reach(err))
	}
	var out []ACL
	for _, r := range res {
		if r.Err != nil {
			return nil, fmt.Errorf("cannot list acls: %w%s", r.Err, detail(r.ErrMessage))
		}
		for _, d := range r.Described {
			out = append(out, ACL{Principal: d.Principal, Host: d.Host, Resource: d.Type, Name: d.Name, Pattern: d.Pattern, Operation: d.Operation, Permission: d.Permission})
		}
	}
	return sortACLs(out), nil
}

// DeleteACLs deletes the ACLs f selects and returns them, sorted.
func (c *Client) DeleteACLs(ctx context.Context, f ACLFilter) ([]ACL, error) {
	b, err := f.builder(false)
	if err != nil {
		return nil, fmt.Errorf("cannot delete acls: %w", err)
	}
	res, err := c.adm.DeleteACLs(ctx, b)
	if err != nil {
		return nil, fmt.Errorf("cannot delete acls: %w", reach(err))
	}
	var out []ACL
	var failed error
	for _, r := range res {
		if r.Err != nil {
			return out, fmt.Errorf("cannot delete acls: %w%s", r.Err, detail(r.ErrMessage))
		}
		for _, d := range r.Deleted {
			a := ACL{Principal: d.Principal, Host: d.Host, Resource: d.Type, Name: d.Name, Pattern: d.Pattern, Operation: d.Operation, Permission: d.Permission}
			if d.Err != nil {
				// A match the broker could not delete: it stays, and the
				// ones deleted are still reported.
				if failed == nil {
					failed = fmt.Errorf("cannot delete the acl of %s on %v %q: %w%s", d.Principal, d.Type, d.Name, d.Err, detail(d.ErrMessage))
				}
				continue
			}
			out = append(out, a)
		}
	}
	return sortACLs(out), failed
}

// sortACLs orders ACLs by resource, then principal, operation and
// permission, without duplicates (two filters of one request may match
// the same ACL).
func sortACLs(acls []ACL) []ACL {
	key := func(a ACL) string {
		return fmt.Sprintf("%d\x00%s\x00%d\x00%s\x00%s\x00%d\x00%d", a.Resource, a.Name, a.Pattern, a.Principal, a.Host, a.Operation, a.Permission)
	}
	slices.SortFunc(acls, func(a, b ACL) int {
		ka, kb := key(a), key(b)
		switch {
		case ka < kb:
			return -1
		case ka > kb:
			return 1
		}
		return 0
	})
	return slices.CompactFunc(acls, func(a, b ACL) bool { return a == b })
}
