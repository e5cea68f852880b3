package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker"
	"github.com/simtel/simtel/internal/admin"
)

func newACLCmd() *cobra.Command {
	return newAdminCmd(&cobra.Command{
		Use:   "acl",
		Short: "Add, list and delete ACLs",
		Long: `Manage Kafka ACLs (CreateAcls, DescribeAcls, DeleteAcls) on any Kafka-compatible
cluster. A simtel broker enforces them with --authorizer acl.`,
	}, newACLAddCmd, newACLListCmd, newACLDeleteCmd)
}

// aclFlags are the ACL (add) or the filter (list, delete) on the command
// line.
type aclFlags struct {
	allow, deny, prefixed, match, cluster bool
	principal, host, operation            string
	topic, group, txnID                   string
}

func (f *aclFlags) register(fs *pflag.FlagSet, filter bool) {
	which := "the ACL"
	if filter {
		which = "ACLs"
	}
	fs.BoolVar(&f.allow, "allow", false, which+" allowing")
	fs.BoolVar(&f.deny, "deny", false, which+" denying")
	fs.StringVar(&f.principal, "principal", "", "principal, User:name (User:* is everyone)")
	host := "client host (default *: every host)"
	if filter {
		host = "client host the ACLs name (* is the ACLs for every host; empty: any)"
	}
	fs.StringVar(&f.host, "host", "", host)
	fs.StringVar(&f.operation, "operation", "", "operation: read, write, create, delete, alter, describe, cluster-action, describe-configs, alter-configs, idempotent-write, all")
	fs.StringVar(&f.topic, "topic", "", "on topic T")
	fs.StringVar(&f.group, "group", "", "on group G")
	fs.StringVar(&f.txnID, "transactional-id", "", "on transactional id T")
	fs.BoolVar(&f.cluster, "cluster", false, "on the cluster")
	fs.BoolVar(&f.prefixed, "prefixed", false, "the name is a prefix (PREFIXED pattern)")
	if filter {
		fs.BoolVar(&f.match, "match", false, "every ACL applying to the named resource: its literal name, * and its prefixes")
	}
}

// filter is the flags as an admin.ACLFilter.
func (f *aclFlags) filter(cmd *cobra.Command) (admin.ACLFilter, error) {
	var out admin.ACLFilter
	out.Principal, out.Host = f.principal, f.host
	switch {
	case f.allow && f.deny:
		return out, errors.New("give --allow or --deny, not both")
	case f.allow:
		out.Permission = kmsg.ACLPermissionTypeAllow
	case f.deny:
		out.Permission = kmsg.ACLPermissionTypeDeny
	}
	if f.operation != "" {
		op, err := kmsg.ParseACLOperation(f.operation)
		if err != nil {
			return out, fmt.Errorf("unknown --operation %q", f.operation)
		}
		out.Operation = op
	}
	var named []string
	for _, r := range []struct {
		set  bool
		flag string
		typ  kmsg.ACLResourceType
		name string
	}{
		{cmd.Flags().Changed("topic"), "--topic", kmsg.ACLResourceTypeTopic, f.topic},
		{cmd.Flags().Changed("group"), "--group", kmsg.ACLResourceTypeGroup, f.group},
		{cmd.Flags().Changed("transactional-id"), "--transactional-id", kmsg.ACLResourceTypeTransactionalId, f.txnID},
		{f.cluster, "--cluster", kmsg.ACLResourceTypeCluster, ""},
	} {
		if r.set {
			named = append(named, r.flag)
			out.Resource, out.Name = r.typ, r.name
		}
	}
	if len(named) > 1 {
		return out, fmt.Errorf("give one resource, not %s", strings.Join(named, " and "))
	}
	switch {
	case f.prefixed && f.match:
		return out, errors.New("give --prefixed or --match, not both")
	case f.prefixed && out.Resource == kmsg.ACLResourceTypeCluster:
		return out, errors.New("the cluster has no prefixed name")
	case f.prefixed:
		out.Pattern = kmsg.ACLResourcePatternTypePrefixed
	case f.match:
		out.Pattern = kmsg.ACLResourcePatternTypeMatch
	}
	return out, nil
}

func newACLAddCmd(a *adminFlags) *cobra.Command {
	var f aclFlags
	cmd := &cobra.Command{
		Use:   "add",
		Short: "Add an ACL",
		Example: `  simtel acl add --allow --principal User:learner --operation write --topic policy. --prefixed
  simtel acl add --allow --principal User:sink --operation read --group lake-sink`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			acl, err := f.filter(cmd)
			if err != nil {
				return err
			}
			return a.do(cmd, func(ctx context.Context, cl *admin.Client) error {
				if err := cl.AddACL(ctx, acl); err != nil {
					return err
				}
				fmt.Fprintln(stdout(), "acl added")
				return nil
			})
		},
	}
	f.register(cmd.Flags(), false)
	return cmd
}

func newACLListCmd(a *adminFlags) *cobra.Command {
	return newACLFilterCmd(a, "list", "List the ACLs the filters select (all without filters)",
		"  simtel acl list --topic telemetry --match", (*admin.Client).ListACLs)
}

func newACLDeleteCmd(a *adminFlags) *cobra.Command {
	return newACLFilterCmd(a, "delete", "Delete the ACLs the filters select, and list them",
		"  simtel acl delete --principal User:alice", (*admin.Client).DeleteACLs)
}

// newACLFilterCmd is a command that runs op with the ACL filter of its
// flags and prints the ACLs op returns.
func newACLFilterCmd(a *adminFlags, use, short, example string, op func(*admin.Client, context.Context, admin.ACLFilter) ([]admin.ACL, error)) *cobra.Command {
	var f aclFlags
	cmd := &cobra.Command{
		Use:     use,
		Short:   short,
		Example: example,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			filter, err := f.filter(cmd)
			if err != nil {
				return err
			}
			return a.do(cmd, func(ctx context.Context, cl *admin.Client) error {
				rows, err := op(cl, ctx, filter)
				if err != nil && len(rows) == 0 {
					return err
				}
				// A delete that failed part-way lists what it deleted.
				if perr := a.emitACLs(rows); perr != nil {
					return perr
				}
				return err
			})
		},
	}
	f.register(cmd.Flags(), true)
	return cmd
}

func (a *adminFlags) emitACLs(rows []admin.ACL) error {
	return a.emit(stdout(), rows, func(tw *tabwriter.Writer) {
		fmt.Fprintln(tw, "PRINCIPAL\tHOST\tPERMISSION\tOPERATION\tRESOURCE\tPATTERN\tNAME")
		for _, r := range rows {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Principal, r.Host, r.Permission, r.Operation, r.Resource, r.Pattern, r.Name)
		}
	})
}

// registerAuthorizerFlags adds the broker's authorizer flags.
func registerAuthorizerFlags(f *pflag.FlagSet, cfg *broker.Config) {
	f.StringVar(&cfg.Authorizer, "authorizer", broker.AuthorizerNone, "acl: enforce the ACLs kept in the cluster's state (simtel acl); none: allow every request")
	f.StringSliceVar(&cfg.SuperUsers, "superusers", nil, "principals allowed everything by the acl authorizer, comma-separated (User:admin,User:ops)")
	f.BoolVar(&cfg.AllowEveryoneIfNoACLFound, "allow-everyone-if-no-acl-found", false, "acl authorizer: allow an operation on a resource no ACL names (Kafka's allow.everyone.if.no.acl.found)")
}
