package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/simtel/simtel/agent/gossip"
)

// newLearnerStatusCmd asks one agent of a run for the rollout view its
// gossip pool holds: which node has which version, and how stale.
func newLearnerStatusCmd() *cobra.Command {
	var policy, agentAddr, output string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show which nodes hold which version of a policy",
		Long: `Show a policy's rollout: how many nodes hold each version and how stale the
others are. Any agent of the run answers for the whole run: agents gossip the
versions they hold (start them with --gossip-listen and --gossip-join).`,
		Example: `  simtel learner status --policy actor --agent 127.0.0.1:8186`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if policy == "" {
				return fmt.Errorf("name the policy with --policy")
			}
			v, err := fetchRollout(agentAddr, policy, timeout)
			if err != nil {
				return err
			}
			if output == "json" {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(v)
			}
			return printRollout(os.Stdout, policy, v)
		},
	}
	cmd.Flags().StringVar(&policy, "policy", "", "policy name")
	cmd.Flags().StringVar(&agentAddr, "agent", "127.0.0.1:8186", "HTTP address of any agent of the run")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "give up after this long")
	return cmd
}

// fetchRollout asks the agent at addr for its view of policy's rollout.
func fetchRollout(addr, policy string, timeout time.Duration) (*gossip.View, error) {
	url := "http://" + strings.TrimPrefix(addr, "http://") + "/v1/rollout/" + policy
	resp, err := (&http.Client{Timeout: timeout}).Get(url)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the agent at %s: %w (is `simtel agent` running there with --gossip-listen?)", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return nil, fmt.Errorf("agent at %s answered %s: %s", addr, resp.Status, e.Error)
	}
	var v gossip.View
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return nil, fmt.Errorf("cannot decode the agent's answer: %w", err)
	}
	return &v, nil
}

// printRollout prints a rollout view: nodes per version, newest first,
// then every node.
func printRollout(w io.Writer, policy string, v *gossip.View) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "policy %s: newest version %d on %d nodes; most stale: %d versions, %.1f s\n\n", policy, v.Newest, len(v.Nodes), v.MaxStaleVersions, v.MaxStaleSeconds)
	vers := make([]int64, 0, len(v.ByVersion))
	for ver := range v.ByVersion {
		vers = append(vers, ver)
	}
	sort.Slice(vers, func(i, j int) bool { return vers[i] > vers[j] })
	fmt.Fprintln(tw, "VERSION\tNODES")
	for _, ver := range vers {
		fmt.Fprintf(tw, "%d\t%d\n", ver, v.ByVersion[ver])
	}
	fmt.Fprintln(tw, "\nNODE\tVERSION\tBEHIND\tSTALE\tALIVE")
	for _, n := range v.Nodes {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1fs\t%v\n", n.Node, n.Version, n.StaleVersions, n.StaleSeconds, n.Alive)
	}
	return tw.Flush()
}
