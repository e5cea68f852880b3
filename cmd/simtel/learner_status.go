package main

import (
	"crypto/tls"
	"crypto/x509"
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
	var agentHTTP agentHTTPFlags
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
			v, err := fetchRollout(agentAddr, policy, agentHTTP, timeout)
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
	cmd.Flags().StringVar(&agentAddr, "agent", "127.0.0.1:8186", "HTTP address of any agent of the run (https://host:port for an agent serving HTTPS)")
	cmd.Flags().StringVar(&agentHTTP.tokenFile, "agent-token-file", "", "file whose first line is a token of the agent's --http-token-file")
	cmd.Flags().StringVar(&agentHTTP.ca, "agent-tls-ca", "", "PEM CA certificates the agent's HTTPS certificate must chain to (default: the system's; implies https)")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "give up after this long")
	return cmd
}

// agentHTTPFlags reach an agent whose HTTP listener serves HTTPS or
// requires a token (docs/agent-https.md).
type agentHTTPFlags struct{ tokenFile, ca string }

// request is a GET of path on the agent at addr, with the token if any.
func (f agentHTTPFlags) request(addr, path string, timeout time.Duration) (*http.Client, *http.Request, error) {
	scheme := "http://"
	if strings.HasPrefix(addr, "https://") || f.ca != "" {
		scheme = "https://"
	}
	addr = strings.TrimPrefix(strings.TrimPrefix(addr, "http://"), "https://")
	req, err := http.NewRequest(http.MethodGet, scheme+addr+path, nil)
	if err != nil {
		return nil, nil, err
	}
	cl := &http.Client{Timeout: timeout}
	if f.ca != "" {
		pem, err := os.ReadFile(f.ca)
		if err != nil {
			return nil, nil, fmt.Errorf("cannot read --agent-tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("--agent-tls-ca %s holds no PEM certificate", f.ca)
		}
		cl.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	}
	if f.tokenFile != "" {
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return nil, nil, fmt.Errorf("cannot read --agent-token-file: %w", err)
		}
		tok, _, _ := strings.Cut(string(b), "\n")
		if tok = strings.TrimSpace(tok); tok == "" {
			return nil, nil, fmt.Errorf("--agent-token-file %s starts with no token", f.tokenFile)
		}
		req.Header.Set("Authorization", "Token "+tok)
	}
	return cl, req, nil
}

// fetchRollout asks the agent at addr for its view of policy's rollout.
func fetchRollout(addr, policy string, f agentHTTPFlags, timeout time.Duration) (*gossip.View, error) {
	cl, req, err := f.request(addr, "/v1/rollout/"+policy, timeout)
	if err != nil {
		return nil, err
	}
	resp, err := cl.Do(req)
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
