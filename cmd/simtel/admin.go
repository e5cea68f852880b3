package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/simtel/simtel/internal/admin"
)

// adminFlags are shared by the topic, group and cluster commands.
type adminFlags struct {
	brokers string
	timeout time.Duration
	output  string
	sec     clientSecFlags
}

func (a *adminFlags) register(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&a.brokers, "brokers", "127.0.0.1:9092", "comma-separated broker addresses")
	cmd.PersistentFlags().DurationVar(&a.timeout, "timeout", 30*time.Second, "give up after this long")
	cmd.PersistentFlags().StringVarP(&a.output, "output", "o", "table", "output format: table or json")
	a.sec.register(cmd.PersistentFlags())
}

// newAdminCmd is an admin command (topic, group, user, acl, cluster): cmd
// with the connection and output flags its subcommands share, and the
// subcommands subs make.
func newAdminCmd(cmd *cobra.Command, subs ...func(*adminFlags) *cobra.Command) *cobra.Command {
	a := &adminFlags{}
	a.register(cmd)
	for _, sub := range subs {
		cmd.AddCommand(sub(a))
	}
	return cmd
}

// client checks --output and returns an admin client and a context bounded
// by --timeout; done releases both.
func (a *adminFlags) client(ctx context.Context) (*admin.Client, context.Context, func(), error) {
	if a.output != "table" && a.output != "json" {
		return nil, nil, nil, fmt.Errorf("--output %q is not table or json", a.output)
	}
	sec, err := a.sec.opts()
	if err != nil {
		return nil, nil, nil, err
	}
	cl, err := admin.New(strings.Split(a.brokers, ","), sec...)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	return cl, ctx, func() { cancel(); cl.Close() }, nil
}

// do runs op with a client and a context bounded by --timeout, and turns
// a request no broker answered into advice.
func (a *adminFlags) do(cmd *cobra.Command, op func(context.Context, *admin.Client) error) error {
	cl, ctx, done, err := a.client(cmd.Context())
	if err != nil {
		return err
	}
	defer done()
	return a.reachErr(op(ctx, cl))
}

// reachErr turns a request no broker answered into advice.
func (a *adminFlags) reachErr(err error) error {
	var ue *admin.UnreachableError
	if errors.As(err, &ue) {
		return fmt.Errorf("cannot reach a broker at %s within %v: is `simtel broker` running there? (%w)", a.brokers, a.timeout, ue.Err)
	}
	return err
}

func (a *adminFlags) emit(w io.Writer, v any, table func(*tabwriter.Writer)) error {
	if a.output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

// parseConfigs turns k=v pairs into kadm's config map.
func parseConfigs(kvs []string) (map[string]*string, error) {
	out := map[string]*string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("config %q is not key=value", kv)
		}
		out[k] = kadm.StringPtr(v)
	}
	return out, nil
}

func stdout() io.Writer { return os.Stdout }

// newAdminListCmd is the list command of an admin command: the rows list
// returns, as a table under header with one line a row, or as JSON.
func newAdminListCmd[R any](a *adminFlags, short string, list func(*admin.Client, context.Context) ([]R, error), header string, row func(io.Writer, R)) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.do(cmd, func(ctx context.Context, cl *admin.Client) error {
				rows, err := list(cl, ctx)
				if err != nil {
					return err
				}
				return a.emit(stdout(), rows, func(tw *tabwriter.Writer) {
					fmt.Fprintln(tw, header)
					for _, r := range rows {
						row(tw, r)
					}
				})
			})
		},
	}
}

// newAdminDescribeCmd is the describe command of an admin command: what
// describe returns for the one name given, printed by table or as JSON. A
// name describe reports as unknown gets notFound (a format of the name)
// instead, which points at the list command.
func newAdminDescribeCmd[D any](a *adminFlags, use, short string, describe func(*admin.Client, context.Context, string) (D, error), unknown error, notFound string, table func(*tabwriter.Writer, D)) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.do(cmd, func(ctx context.Context, cl *admin.Client) error {
				out, err := describe(cl, ctx, args[0])
				if errors.Is(err, unknown) {
					return fmt.Errorf(notFound, args[0])
				}
				if err != nil {
					return err
				}
				return a.emit(stdout(), out, func(tw *tabwriter.Writer) { table(tw, out) })
			})
		},
	}
}
