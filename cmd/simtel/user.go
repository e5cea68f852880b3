package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/simtel/simtel/internal/admin"
)

func newUserCmd() *cobra.Command {
	return newAdminCmd(&cobra.Command{
		Use:   "user",
		Short: "Add, list and delete SCRAM users",
		Long: `Manage the SCRAM credentials SASL listeners check (SCRAM-SHA-256, SCRAM-SHA-512,
and PLAIN against the same store), through Kafka's AlterUserScramCredentials and
DescribeUserScramCredentials: the brokers keep a salted, iterated form, never the password.`,
	}, newUserAddCmd, newUserDeleteCmd, newUserListCmd)
}

func newUserAddCmd(a *adminFlags) *cobra.Command {
	var mechanism, passwordFile string
	var iterations int32
	cmd := &cobra.Command{
		Use:     "add NAME",
		Short:   "Create a user's credential, or change its password",
		Example: "  simtel user add alice --mechanism SCRAM-SHA-512 --password-file /run/secrets/alice",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := admin.ParseScramMechanism(mechanism)
			if err != nil {
				return err
			}
			password, err := readPasswordFile(passwordFile)
			if err != nil {
				return err
			}
			return a.do(cmd, func(ctx context.Context, cl *admin.Client) error {
				if err := cl.AddUser(ctx, args[0], m, password, iterations); err != nil {
					return err
				}
				fmt.Fprintf(stdout(), "user %s: %s credential set (%d iterations)\n", args[0], m, iterations)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&mechanism, "mechanism", "SCRAM-SHA-512", "SCRAM-SHA-256 or SCRAM-SHA-512")
	cmd.Flags().StringVar(&passwordFile, "password-file", "", "file holding the password (its first line; - reads standard input) (required)")
	cmd.Flags().Int32Var(&iterations, "iterations", admin.DefaultScramIterations, "SCRAM iterations, 4096 to 16384")
	_ = cmd.MarkFlagRequired("password-file")
	return cmd
}

// readPasswordFile reads a password from the first line of path (- is
// standard input), so that it is never on a command line.
func readPasswordFile(path string) (string, error) {
	data, err := readFileOrStdin(path)
	if err != nil {
		return "", fmt.Errorf("cannot read the password: %w", err)
	}
	line, _, _ := strings.Cut(string(data), "\n")
	line = strings.TrimSuffix(line, "\r")
	if line == "" {
		return "", fmt.Errorf("the password file %s is empty", path)
	}
	return line, nil
}

func newUserDeleteCmd(a *adminFlags) *cobra.Command {
	var mechanism string
	cmd := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a user's credentials (all of them, or one mechanism's)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var m kadm.ScramMechanism
			if mechanism != "" {
				var err error
				if m, err = admin.ParseScramMechanism(mechanism); err != nil {
					return err
				}
			}
			return a.do(cmd, func(ctx context.Context, cl *admin.Client) error {
				if err := cl.DeleteUser(ctx, args[0], m); err != nil {
					return err
				}
				fmt.Fprintf(stdout(), "user %s deleted\n", args[0])
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&mechanism, "mechanism", "", "delete only this mechanism's credential (default: every one)")
	return cmd
}

func newUserListCmd(a *adminFlags) *cobra.Command {
	return newAdminListCmd(a, "List users with their SCRAM mechanisms and iterations", (*admin.Client).ListUsers,
		"USER\tMECHANISM\tITERATIONS", func(w io.Writer, r admin.UserCredential) {
			fmt.Fprintf(w, "%s\t%s\t%d\n", r.User, r.Mechanism, r.Iterations)
		})
}
