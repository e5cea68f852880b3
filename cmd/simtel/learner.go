package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/term"

	"github.com/simtel/simtel/learner"
)

// learnerFlags are shared by the learner subcommands.
type learnerFlags struct {
	brokers string
	policy  string
}

func newLearnerCmd(g *globalFlags) *cobra.Command {
	lf := &learnerFlags{}
	cmd := &cobra.Command{
		Use:   "learner",
		Short: "Publish policy versions to every node",
		Long: `Learners publish policy versions (model weights) to topic policy.<name>: the
blob in chunks of at most 1 MiB, then a manifest with version, size and
SHA-256. Every agent started with --policies <name> fetches each version once
per node, verifies it and installs it in its policy directory, where the
node's workers read it.`,
	}
	cmd.PersistentFlags().StringVar(&lf.brokers, "brokers", "127.0.0.1:9092", "comma-separated broker addresses")
	cmd.PersistentFlags().StringVar(&lf.policy, "policy", "", "policy name ([A-Za-z0-9._-]+); the topic is policy.<name>")
	cmd.AddCommand(newLearnerPublishCmd(g, lf), newLearnerStatusCmd())
	return cmd
}

func newLearnerPublishCmd(g *globalFlags, lf *learnerFlags) *cobra.Command {
	var file string
	var meta []string
	var quiet bool
	var keep int
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "publish",
		Short: "Publish a file (or stdin) as the next version of a policy",
		Long: `Publish a file, or standard input, as the next version of a policy and print
its manifest as JSON on stdout. The topic is created on first publish (one
partition, retention sized to keep --keep versions). A progress bar goes to
stderr for large inputs when stderr is a terminal, unless --quiet.`,
		Example: `  simtel learner publish --brokers broker1:9092 --policy cartpole --file weights.pt --meta step=1200
  python train.py --dump-weights | simtel learner publish --policy cartpole`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			if lf.policy == "" {
				return errors.New("no policy: pass --policy NAME")
			}
			if err := learner.CheckPolicyName(lf.policy); err != nil {
				return fmt.Errorf("--policy: %w", err)
			}
			md := map[string]string{}
			for _, kv := range meta {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return fmt.Errorf("--meta %q is not key=value", kv)
				}
				md[k] = v
			}
			in, size, err := openInput(file)
			if err != nil {
				return err
			}
			defer in.Close()
			var brokers []string
			for _, b := range strings.Split(lf.brokers, ",") {
				if b = strings.TrimSpace(b); b != "" {
					brokers = append(brokers, b)
				}
			}
			if len(brokers) == 0 {
				return errors.New("no brokers: pass --brokers HOST:PORT")
			}
			cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
			if err != nil {
				return fmt.Errorf("cannot create client for %s: %w", lf.brokers, err)
			}
			defer cl.Close()
			ctx := cmd.Context()
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}

			var progress func(int64)
			var bar *progressbar.ProgressBar
			if !quiet && term.IsTerminal(int(os.Stderr.Fd())) && (size < 0 || size >= 4<<20) {
				bar = progressbar.NewOptions64(size,
					progressbar.OptionSetWriter(os.Stderr),
					progressbar.OptionSetDescription("publishing "+lf.policy),
					progressbar.OptionShowBytes(true),
					progressbar.OptionShowTotalBytes(true),
					progressbar.OptionShowCount(),
					progressbar.OptionThrottle(100*time.Millisecond),
					progressbar.OptionSpinnerType(14),
					progressbar.OptionFullWidth(),
					progressbar.OptionClearOnFinish(),
				)
				progress = func(sent int64) { bar.Set64(sent) }
			}
			p := learner.NewPublisher(cl, log, learner.KeepVersions(keep))
			m, err := p.Publish(ctx, lf.policy, in, md, progress)
			if bar != nil {
				bar.Finish()
			}
			if err != nil {
				var op *net.OpError
				if errors.As(err, &op) && op.Op == "dial" {
					return fmt.Errorf("cannot publish %s: cannot reach a broker at %s: is `simtel broker` running there? (%w)", lf.policy, lf.brokers, err)
				}
				if errors.Is(err, context.DeadlineExceeded) {
					return fmt.Errorf("cannot publish %s within %v: is a broker reachable at %s? (%w)", lf.policy, timeout, lf.brokers, err)
				}
				return fmt.Errorf("cannot publish %s: %w", lf.policy, err)
			}
			enc := json.NewEncoder(stdout())
			enc.SetIndent("", "  ")
			return enc.Encode(m)
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "-", "file to publish; - is standard input")
	cmd.Flags().StringArrayVar(&meta, "meta", nil, "metadata key=value stored in the manifest (repeatable)")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress bar")
	cmd.Flags().IntVar(&keep, "keep", learner.DefaultKeep, "versions the topic's retention keeps (at least 2)")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "give up after this long (0: no limit)")
	return cmd
}

// openInput opens the file to publish (- or empty: stdin) and returns its
// size, or -1 if it cannot be known before reading.
func openInput(name string) (io.ReadCloser, int64, error) {
	f := os.Stdin
	if name != "" && name != "-" {
		var err error
		if f, err = os.Open(name); err != nil {
			return nil, 0, fmt.Errorf("cannot open policy file: %w", err)
		}
	}
	size := int64(-1)
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
		size = fi.Size()
	}
	return f, size, nil
}
