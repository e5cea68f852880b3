package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
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

// learnerPublishFlags are learner publish's own flags.
type learnerPublishFlags struct {
	file    string
	meta    []string
	quiet   bool
	keep    int
	timeout time.Duration
	sec     clientSecFlags
	// format 2: deltas and signatures
	format    int
	formatSet bool // --format given explicitly
	deltaFrom string
	signKey   string
	chunkSize int
}

func newLearnerPublishCmd(g *globalFlags, lf *learnerFlags) *cobra.Command {
	var o learnerPublishFlags
	cmd := &cobra.Command{
		Use:   "publish",
		Short: "Publish a file (or stdin) as the next version of a policy",
		Long: `Publish a file, or standard input, as the next version of a policy and print
its manifest as JSON on stdout. The topic is created on first publish (one
partition, retention sized to keep --keep versions). A progress bar goes to
stderr for large inputs when stderr is a terminal, unless --quiet.

Format 2 (--format 2, implied by --delta-from and --sign-key) lists every
chunk by hash in the manifest: --delta-from sends only the chunks the base
version lacks, --sign-key signs the manifest for agents started with
--policy-trusted-keys. Agents older than format 2 refuse such versions and
keep the one they hold (docs/policies-format2.md).`,
		Example: `  simtel learner publish --brokers broker1:9092 --policy cartpole --file weights.pt --meta step=1200
  python train.py --dump-weights | simtel learner publish --policy cartpole
  simtel learner publish --policy cartpole --file weights.pt --delta-from auto --sign-key learner.pem`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runLearnerPublish(cmd, g, lf, &o)
		},
	}
	cmd.Flags().StringVarP(&o.file, "file", "f", "-", "file to publish; - is standard input")
	cmd.Flags().StringArrayVar(&o.meta, "meta", nil, "metadata key=value stored in the manifest (repeatable)")
	cmd.Flags().BoolVarP(&o.quiet, "quiet", "q", false, "no progress bar")
	cmd.Flags().IntVar(&o.keep, "keep", learner.DefaultKeep, "versions the topic's retention keeps (at least 2)")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 0, "give up after this long (0: no limit)")
	cmd.Flags().IntVar(&o.format, "format", 1, "version format: 1, or 2 (chunks listed by hash; agents before format 2 refuse it); --delta-from and --sign-key imply 2")
	cmd.Flags().StringVar(&o.deltaFrom, "delta-from", "", "publish a delta: only the chunks the base lacks are sent; a version number, or auto (the newest version when it is format 2 and the deltas since the last full version are small)")
	cmd.Flags().IntVar(&o.chunkSize, "chunk-size", learner.MaxChunkSize, "format 2: the largest chunk in bytes, 4096 to 1048576 (chunks are cut by content, about a quarter of this on average); smaller chunks make smaller deltas and more records")
	cmd.Flags().StringVar(&o.signKey, "sign-key", "", "ed25519 private key (PEM, as openssl genpkey -algorithm ed25519 writes it) that signs the manifest, for agents with --policy-trusted-keys")
	o.sec.register(cmd.Flags())
	return cmd
}

func runLearnerPublish(cmd *cobra.Command, g *globalFlags, lf *learnerFlags, o *learnerPublishFlags) error {
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
	md, err := publishMeta(o.meta)
	if err != nil {
		return err
	}
	o.formatSet = cmd.Flags().Changed("format")
	if o.chunkSize < 4<<10 || o.chunkSize > learner.MaxChunkSize {
		return fmt.Errorf("--chunk-size %d is not within [4096, %d]", o.chunkSize, learner.MaxChunkSize)
	}
	if cmd.Flags().Changed("chunk-size") && o.format == 1 && o.deltaFrom == "" && o.signKey == "" {
		return errors.New("--chunk-size applies to format 2 (--format 2, --delta-from or --sign-key)")
	}
	popts, err := o.publishOptions()
	if err != nil {
		return err
	}
	popts.Meta = md
	in, size, err := openInput(o.file)
	if err != nil {
		return err
	}
	defer in.Close()
	brokers := splitList(lf.brokers)
	if len(brokers) == 0 {
		return errors.New("no brokers: pass --brokers HOST:PORT")
	}
	sec, err := o.sec.opts()
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, sec...)...)
	if err != nil {
		return fmt.Errorf("cannot create client for %s: %w", lf.brokers, err)
	}
	defer cl.Close()
	ctx := cmd.Context()
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	var bar *progressbar.ProgressBar
	if !o.quiet && term.IsTerminal(int(os.Stderr.Fd())) && (size < 0 || size >= 4<<20) {
		bar = publishBar(size, lf.policy)
		popts.Progress = func(sent int64) { bar.Set64(sent) }
	}
	m, err := learner.NewPublisher(cl, log, learner.KeepVersions(o.keep), learner.ChunkSize(o.chunkSize)).PublishWith(ctx, lf.policy, in, popts)
	if bar != nil {
		bar.Finish()
	}
	if err != nil {
		return publishErr(err, lf, o.timeout)
	}
	enc := json.NewEncoder(stdout())
	enc.SetIndent("", "  ")
	return enc.Encode(m)
}

// publishOptions reads --format, --delta-from and --sign-key.
func (o *learnerPublishFlags) publishOptions() (learner.PublishOptions, error) {
	var po learner.PublishOptions
	if o.format != 1 && o.format != 2 {
		return po, fmt.Errorf("--format %d: the formats are 1 and 2", o.format)
	}
	po.Format = o.format
	switch o.deltaFrom {
	case "":
	case "auto":
		po.DeltaFrom = learner.DeltaAuto
	default:
		v, err := strconv.ParseInt(o.deltaFrom, 10, 64)
		if err != nil || v < 1 {
			return po, fmt.Errorf("--delta-from %q is not a version number or auto", o.deltaFrom)
		}
		po.DeltaFrom = v
	}
	if o.signKey != "" {
		b, err := os.ReadFile(o.signKey)
		if err != nil {
			return po, fmt.Errorf("--sign-key: %w", err)
		}
		if po.SignKey, err = learner.ParseSigningKey(b); err != nil {
			return po, fmt.Errorf("--sign-key %s: %w", o.signKey, err)
		}
	}
	if (po.DeltaFrom != 0 || po.SignKey != nil) && o.format == 1 && o.formatSet {
		return po, errors.New("--delta-from and --sign-key need --format 2")
	}
	return po, nil
}

// publishMeta reads --meta key=value pairs.
func publishMeta(kvs []string) (map[string]string, error) {
	md := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--meta %q is not key=value", kv)
		}
		md[k] = v
	}
	return md, nil
}

// publishBar is the progress bar of a publish of size bytes (-1: unknown).
func publishBar(size int64, policy string) *progressbar.ProgressBar {
	return progressbar.NewOptions64(size,
		progressbar.OptionSetWriter(os.Stderr),
		progressbar.OptionSetDescription("publishing "+policy),
		progressbar.OptionShowBytes(true),
		progressbar.OptionShowTotalBytes(true),
		progressbar.OptionShowCount(),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSpinnerType(14),
		progressbar.OptionFullWidth(),
		progressbar.OptionClearOnFinish(),
	)
}

// publishErr says why a publish failed, with advice when no broker could
// be reached.
func publishErr(err error, lf *learnerFlags, timeout time.Duration) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return fmt.Errorf("cannot publish %s: cannot reach a broker at %s: is `simtel broker` running there? (%w)", lf.policy, lf.brokers, err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("cannot publish %s within %v: is a broker reachable at %s? (%w)", lf.policy, timeout, lf.brokers, err)
	}
	return fmt.Errorf("cannot publish %s: %w", lf.policy, err)
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
