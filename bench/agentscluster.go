package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// What `simtel bench agents --spawn N` runs: N `simtel broker` processes
// of the given binary on loopback, forming one cluster (as
// bench/cluster-lib.sh starts them), which the run can stop, kill and
// start again on the same data directories and ports.

// spawnedBroker is one broker process.
type spawnedBroker struct {
	id                       int32
	addr, http, raft, gossip string
	dir, logPath             string
	cmd                      *exec.Cmd
	exited                   chan struct{} // closed once cmd has been waited for
}

// spawnedCluster is the brokers of one run.
type spawnedCluster struct {
	bin     string
	dir     string
	removes bool // dir was made for the run and goes with it
	log     *slog.Logger
	brokers []*spawnedBroker
}

// spawnCluster starts n brokers and waits until each of them reports all
// n with a controller. Ports are base+i (Kafka), base+10+i (raft),
// base+20+i (gossip) and base+30+i (HTTP), or free ports the system
// picks when base is 0. dir holds the brokers' data and logs; "" makes a
// temporary directory that close removes.
func spawnCluster(ctx context.Context, bin string, n, base int, dir string, log *slog.Logger) (*spawnedCluster, error) {
	c := &spawnedCluster{bin: bin, dir: dir, log: log}
	if dir == "" {
		d, err := os.MkdirTemp("", "simtel-bench-agents-")
		if err != nil {
			return nil, fmt.Errorf("cannot make a directory for the brokers: %w", err)
		}
		c.dir, c.removes = d, true
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cannot make a directory for the brokers: %w", err)
	}
	used := map[string]bool{}
	port := func(i, off int) (string, error) {
		if base != 0 {
			return "127.0.0.1:" + strconv.Itoa(base+off+i), nil
		}
		return freeLoopbackPort(used)
	}
	for i := range n {
		b := &spawnedBroker{id: int32(i), dir: filepath.Join(c.dir, "broker"+strconv.Itoa(i)),
			logPath: filepath.Join(c.dir, "broker"+strconv.Itoa(i)+".log")}
		var err error
		for _, p := range []struct {
			dst *string
			off int
		}{{&b.addr, 0}, {&b.raft, 10}, {&b.gossip, 20}, {&b.http, 30}} {
			if *p.dst, err = port(i, p.off); err != nil {
				c.close()
				return nil, err
			}
		}
		c.brokers = append(c.brokers, b)
	}
	for _, b := range c.brokers {
		if err := c.start(ctx, b); err != nil {
			c.close()
			return nil, err
		}
	}
	for _, b := range c.brokers {
		if _, err := waitCluster(ctx, b.addr, n, 90*time.Second); err != nil {
			c.close()
			return nil, fmt.Errorf("broker %d: %w (log: %s)", b.id, err, b.logPath)
		}
	}
	return c, nil
}

// freeLoopbackPort returns a loopback port that was free a moment ago,
// from below the kernel's ephemeral port range: a broker started again
// binds its port anew, and a port from that range could meanwhile be the
// local end of one of the agents' thousands of connections.
func freeLoopbackPort(used map[string]bool) (string, error) {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var lo, hi int
		if n, _ := fmt.Sscan(string(b), &lo, &hi); n == 2 && lo > 11000 {
			low = lo
		}
	}
	for range 200 {
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(10000+rand.IntN(low-10000)))
		if err != nil {
			continue
		}
		addr := ln.Addr().String()
		ln.Close()
		if !used[addr] {
			used[addr] = true
			return addr, nil
		}
	}
	return "", errors.New("cannot find a free loopback port below the ephemeral range")
}

// addrs are the brokers' Kafka listeners.
func (c *spawnedCluster) addrs() []string {
	var a []string
	for _, b := range c.brokers {
		a = append(a, b.addr)
	}
	return a
}

func (c *spawnedCluster) broker(id int32) *spawnedBroker {
	for _, b := range c.brokers {
		if b.id == id {
			return b
		}
	}
	return nil
}

// start starts b's process and waits until its Kafka port accepts.
func (c *spawnedCluster) start(ctx context.Context, b *spawnedBroker) error {
	args := []string{"broker", "--node-id", strconv.Itoa(int(b.id)), "--data-dir", b.dir,
		"--listen", b.addr, "--http-listen", b.http, "--raft-listen", b.raft,
		"--gossip-listen", b.gossip, "--bootstrap-expect", strconv.Itoa(len(c.brokers)),
		"--log-level", "warn"}
	if b.id != c.brokers[0].id {
		args = append(args, "--join", c.brokers[0].gossip)
	}
	lf, err := os.OpenFile(b.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("cannot open broker %d's log: %w", b.id, err)
	}
	cmd := exec.Command(c.bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		lf.Close()
		return fmt.Errorf("cannot start broker %d (%s): %w", b.id, c.bin, err)
	}
	b.cmd, b.exited = cmd, make(chan struct{})
	go func(exited chan struct{}) {
		_ = cmd.Wait()
		lf.Close()
		close(exited)
	}(b.exited)
	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", b.addr, time.Second)
		if err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-b.exited:
			return fmt.Errorf("broker %d exited at start (%s); its log: %s", b.id, cmd.ProcessState, b.logPath)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("broker %d does not listen on %s after 60 s; its log: %s", b.id, b.addr, b.logPath)
		}
	}
}

// running reports whether b's process is alive.
func (b *spawnedBroker) running() bool {
	if b.cmd == nil {
		return false
	}
	select {
	case <-b.exited:
		return false
	default:
		return true
	}
}

func (b *spawnedBroker) pid() int {
	if !b.running() {
		return 0
	}
	return b.cmd.Process.Pid
}

// stop ends b with SIGTERM, or SIGKILL after within.
func (c *spawnedCluster) stop(b *spawnedBroker, within time.Duration) error {
	if !b.running() {
		return nil
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.exited:
		return nil
	case <-time.After(within):
		c.kill(b)
		return fmt.Errorf("broker %d did not stop within %s of SIGTERM and was killed", b.id, within)
	}
}

// kill ends b with SIGKILL and waits for it.
func (c *spawnedCluster) kill(b *spawnedBroker) {
	if !b.running() {
		return
	}
	_ = b.cmd.Process.Kill()
	<-b.exited
}

// close stops every broker and removes a temporary directory.
func (c *spawnedCluster) close() {
	for _, b := range c.brokers {
		if err := c.stop(b, 30*time.Second); err != nil {
			c.log.Warn("cannot stop broker", "err", err)
		}
	}
	if c.removes {
		if err := os.RemoveAll(c.dir); err != nil {
			c.log.Warn("cannot remove the brokers' directory", "dir", c.dir, "err", err)
		}
	}
}

// waitCluster asks the broker at addr for metadata until it reports want
// brokers and a controller among them, and returns the controller's id.
// It asks that broker directly: a client's own metadata request may be
// answered by any broker.
func waitCluster(ctx context.Context, addr string, want int, within time.Duration) (int32, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return -1, err
	}
	defer cl.Close()
	deadline := time.Now().Add(within)
	var last error
	for {
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		r, err := cl.SeedBrokers()[0].RetriableRequest(rctx, kmsg.NewPtrMetadataRequest())
		cancel()
		if err == nil {
			m := r.(*kmsg.MetadataResponse)
			var ids []int32
			for _, b := range m.Brokers {
				ids = append(ids, b.NodeID)
			}
			if len(ids) == want && slices.Contains(ids, m.ControllerID) {
				return m.ControllerID, nil
			}
			err = fmt.Errorf("brokers %v, controller %d", ids, m.ControllerID)
		}
		last = err
		if ctx.Err() != nil {
			return -1, ctx.Err()
		}
		if time.Now().After(deadline) {
			return -1, fmt.Errorf("no cluster of %d brokers with a controller within %s: %w", want, within, last)
		}
		select {
		case <-ctx.Done():
			return -1, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// errNoSpawn: the fault phases need brokers the run started.
var errNoSpawn = errors.New("stopping and killing brokers needs brokers this run starts (--spawn)")
