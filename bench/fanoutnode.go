package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sys/unix"

	"github.com/simtel/simtel/learner"
)

// Node mode of `simtel bench fanout`: Nodes emulated nodes in this
// process, each what an agent runs for one policy: a learner.Subscriber
// with its own kgo clients and its own cache directory, and WorkersPerNode
// workers that long-poll Subscriber.Wait and then load the installed file.
//
// Goroutines: one Run per subscriber (stopped by cancelling subCtx, waited
// for by subWG before runNodes returns), one per worker (they end when
// they have read the file or when workCtx ends; waited for by workWG) and
// the progress watch (stopped and waited for at the end of the measured
// part).

func (r *fanoutRun) runNodes(ctx context.Context, p *fanoutPublish) error {
	cfg := r.cfg
	root, err := os.MkdirTemp(cfg.Dir, "simtel-fanout-")
	if err != nil {
		return fmt.Errorf("cannot create the node cache directory: %w", err)
	}
	defer os.RemoveAll(root)

	subCtx, stopSubs := context.WithCancel(ctx)
	var subWG sync.WaitGroup
	defer func() {
		stopSubs()
		subWG.Wait()
	}()
	subs := make([]*learner.Subscriber, cfg.Nodes)
	runErrs := make([]error, cfg.Nodes)
	for i := range subs {
		s, err := learner.NewSubscriber(learner.SubscriberConfig{
			Brokers: cfg.Brokers,
			Policy:  p.policy,
			Dir:     filepath.Join(root, fmt.Sprintf("node-%04d", i)),
			Logger:  r.log.With("node", i),
			ClientOpts: append([]kgo.Opt{
				kgo.ClientID(fmt.Sprintf("simtel-bench-fanout-node-%d", i)),
				kgo.WithLogger(kgoLogger{r.log}),
			}, cfg.ClientOpts...),
		})
		if err != nil {
			return fmt.Errorf("cannot create the subscriber of node %d: %w", i, err)
		}
		subs[i] = s
		subWG.Add(1)
		go func() {
			defer subWG.Done()
			runErrs[i] = s.Run(subCtx)
		}()
	}

	r.progressf("%d nodes started; waiting for each to hold warm-up version %d", cfg.Nodes, p.base.Version)
	setup, cancel := context.WithTimeout(ctx, cfg.SetupTimeout)
	defer cancel()
	for i, s := range subs {
		if _, _, err := s.Wait(setup, p.base.Version-1); err != nil {
			return fmt.Errorf("node %d did not get warm-up version %d within %s (run error: %v): %w",
				i, p.base.Version, cfg.SetupTimeout, runErrs[i], err)
		}
	}
	cancel()
	received := make([]int64, len(subs))
	for i, s := range subs {
		received[i] = s.Stats().Received
	}

	// Workers: each blocks in Wait for a version newer than the warm-up,
	// then opens the file the subscriber installed (atomically, after
	// verifying it), checks its size against the manifest and maps it
	// read-only, as a worker sharing the node's copy does; or, with
	// WorkerRead, reads it to the end into a reused buffer.
	workers := cfg.Nodes * cfg.WorkersPerNode
	outs := make([]workerOutcome, workers)
	defer func() {
		for i := range outs {
			if len(outs[i].mapped) > 0 {
				unix.Munmap(outs[i].mapped)
				outs[i].mapped = nil
			}
		}
	}()
	workCtx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	var workWG, ready sync.WaitGroup
	for n, s := range subs {
		for w := range cfg.WorkersPerNode {
			i := n*cfg.WorkersPerNode + w
			workWG.Add(1)
			ready.Add(1)
			go func() {
				defer workWG.Done()
				var buf []byte
				if cfg.WorkerLoad == WorkerRead {
					buf = make([]byte, cfg.ReadBuffer)
				}
				ready.Done()
				m, path, err := s.Wait(workCtx, p.base.Version)
				if err != nil {
					outs[i].err = fmt.Errorf("node %d: %w", n, err)
					return
				}
				var want []byte
				if cfg.VerifyReads {
					want = p.blob
				}
				var o workerOutcome
				if cfg.WorkerLoad == WorkerRead {
					o.bytes, o.err = readWeights(path, buf, want)
				} else {
					o.mapped, o.err = mapWeights(path, m.Size, want)
					o.bytes = int64(len(o.mapped))
				}
				o.done, o.version, o.path = time.Now(), m.Version, path
				outs[i] = o
				if o.err == nil {
					r.held.Add(1)
				}
			}()
		}
	}
	ready.Wait()
	// Count installs as they happen, for the progress line only; the
	// install times come from the subscribers' own stats.
	for _, s := range subs {
		workWG.Add(1)
		go func() {
			defer workWG.Done()
			if _, _, err := s.Wait(workCtx, p.base.Version); err == nil {
				r.installed.Add(1)
			}
		}()
	}

	m, t0, t1, cerr, err := r.measurePublish(ctx, p, "worker",
		fmt.Sprintf("%d workers waiting; publishing %d bytes as version %d", workers, cfg.Size, p.base.Version+1),
		func() {}, stopWork, &workWG)
	if err != nil {
		return err
	}

	r.collect(outs, m, t0, t1)
	var installs []time.Duration
	var sum FanoutSubscribers
	for _, s := range subs {
		st := s.Stats()
		sum.Fetched += st.Fetched
		sum.Corrupt += st.Corrupt
		sum.Skipped += st.Skipped
		if st.Held == m.Version {
			installs = append(installs, st.HeldAt.Sub(t0))
		}
	}
	s := summarize(installs)
	r.res.NodeInstall = &s
	r.res.Subscribers = &sum
	if cfg.Delta > 0 {
		d := deltaOf(m)
		for i, s := range subs {
			got := s.Stats().Received - received[i]
			d.NodeReceivedMean += float64(got) / float64(len(subs))
			d.NodeReceivedMax = max(d.NodeReceivedMax, got)
		}
		r.res.Delta = d
	}
	if len(installs) < cfg.Nodes {
		r.res.Notes = append(r.res.Notes, fmt.Sprintf("%d of %d nodes installed version %d", len(installs), cfg.Nodes, m.Version))
	}
	if sum.Corrupt > 0 {
		r.res.Notes = append(r.res.Notes, fmt.Sprintf("the subscribers rejected %d versions as corrupt", sum.Corrupt))
	}

	// Step 6: what the workers read is what was published. Each node's
	// file is hashed once (the workers read the same immutable file).
	if cfg.VerifyReads {
		r.res.Verified = "every worker compared each byte it " + map[string]string{WorkerMap: "mapped", WorkerRead: "read"}[cfg.WorkerLoad] + " with the published version"
	} else {
		r.progressf("hashing each node's installed file")
		paths := map[string]bool{}
		for _, o := range outs {
			if o.err == nil && o.path != "" {
				paths[o.path] = true
			}
		}
		for path := range paths {
			if err := hashFile(path, m.SHA256); err != nil {
				r.res.Failures++
				r.res.FirstErr = err.Error()
				return err
			}
		}
		verb := "read"
		if cfg.WorkerLoad == WorkerMap {
			verb = "mapped"
		}
		r.res.Verified = fmt.Sprintf("every worker %s %d bytes; the %d node files they %s hash to the published SHA-256", verb, m.Size, len(paths), verb)
	}
	if cerr != nil {
		return cerr
	}
	return nil
}

// readCounters reads the broker's counters, or nothing without a probe.
func (r *fanoutRun) readCounters(ctx context.Context) (brokerCounters, error) {
	if r.probe == nil {
		return brokerCounters{}, nil
	}
	return r.probe.read(ctx)
}

// readWeights opens path and reads it to the end into buf, as a worker
// loads weights; with want, every byte read is compared with want. It
// returns the bytes read.
func readWeights(path string, buf, want []byte) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("cannot open %s: %w", path, err)
	}
	defer f.Close()
	var n int64
	for {
		k, err := f.Read(buf)
		if k > 0 && want != nil {
			if n+int64(k) > int64(len(want)) || !bytes.Equal(buf[:k], want[n:n+int64(k)]) {
				return n, fmt.Errorf("%s differs from the published bytes in [%d, %d)", path, n, n+int64(k))
			}
		}
		n += int64(k)
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("cannot read %s: %w", path, err)
		}
	}
}

// mapWeights opens path, checks that it holds size bytes and maps it
// read-only, as a worker holds weights shared with the other workers of
// its node: no copy, the pages are the node's page cache (tmpfs), read
// when touched. With want, every mapped byte is compared with want. The
// caller unmaps the result (unix.Munmap). A file of size 0 is not mapped
// (mmap refuses a length of 0): the result is then an empty, non-nil
// slice.
func mapWeights(path string, size int64, want []byte) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cannot open %s: %w", path, err)
	}
	// The mapping outlives the descriptor.
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("cannot stat %s: %w", path, err)
	}
	if fi.Size() != size {
		return nil, fmt.Errorf("%s holds %d bytes, the manifest says %d", path, fi.Size(), size)
	}
	if size == 0 {
		return []byte{}, nil
	}
	if size > math.MaxInt {
		return nil, fmt.Errorf("%s holds %d bytes, more than this process can map", path, size)
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("cannot map %s: %w", path, err)
	}
	if want != nil && !bytes.Equal(b, want) {
		i := 0
		for i < len(b) && i < len(want) && b[i] == want[i] {
			i++
		}
		unix.Munmap(b)
		return nil, fmt.Errorf("%s differs from the published bytes at byte %d", path, i)
	}
	return b, nil
}

// hashFile checks that the file at path has the SHA-256 want (hex).
func hashFile(path, want string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("cannot open %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("cannot read %s: %w", path, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("%s has sha256 %s, the published version %s", path, got, want)
	}
	return nil
}

// deltaOf is what the publisher sent of the delta version m.
func deltaOf(m learner.Manifest) *FanoutDelta {
	d := &FanoutDelta{Base: m.Base, Chunks: m.Chunks, Sent: m.Sent}
	for _, c := range m.ChunkList {
		if m.Sent > 0 && c.Offset >= m.FirstChunkOffset {
			d.SentBytes += int64(c.Size)
		}
	}
	return d
}
