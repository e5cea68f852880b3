// Package testutil builds and runs the real simtel binary for tests that
// need a separate process (crash tests, CLI tests), and holds what many
// packages' tests share: free ports, waiting, a test CA, an S3 server.
//
// To start a broker, use its sub-packages: brokertest starts `simtel
// broker` processes and clusters of them (and does not link the broker,
// so the agent's tests may use it); brokertest/inproc runs a broker in
// the test's own process, for the tests of packages that may link it.
package testutil

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// BinaryEnv names a simtel binary built from this tree that Binary
// returns instead of building one: scripts/test.sh builds it once for all
// the packages' test processes, each of which would otherwise link its own.
const BinaryEnv = "SIMTEL_TEST_BINARY"

// Binary returns the path of a simtel binary: $SIMTEL_TEST_BINARY when
// set, else ./cmd/simtel built once per test process.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		if p := os.Getenv(BinaryEnv); p != "" {
			if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
				buildErr = fmt.Errorf("%s=%s is not an executable file (unset it to build ./cmd/simtel)", BinaryEnv, p)
			}
			binPath = p
			return
		}
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		dir, err := binDir()
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "simtel")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/simtel")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/simtel: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// binDir returns this test process's directory for the built binary,
// <tmp>/simtel-test-bin/<pid>, and removes the directories of test
// processes that are gone. A test binary has no hook that runs when it
// exits, so without this every package's test run left a 130 MB binary
// behind and repeated runs filled the disk.
func binDir() (string, error) {
	parent := filepath.Join(os.TempDir(), "simtel-test-bin")
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", err
	}
	entries, _ := os.ReadDir(parent)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			_ = os.RemoveAll(filepath.Join(parent, e.Name()))
		}
	}
	dir := filepath.Join(parent, strconv.Itoa(os.Getpid()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	return dir, nil
}

// FreePort returns a loopback host:port that was free a moment ago.
//
// The port comes from below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range): a port the kernel hands out to the
// outgoing connections of busy tests could be taken again between this
// call and the process under test binding it, which made tests fail with
// "address already in use". Below that range only another explicit bind
// can take it, and each call picks a different random port.
func FreePort(t testing.TB) string {
	t.Helper()
	low := ephemeralLow()
	portMu.Lock()
	defer portMu.Unlock()
	for range 200 {
		p := 10000 + rand.IntN(low-10000)
		if portUsed[p] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		_ = ln.Close()
		portUsed[p] = true
		return ln.Addr().String()
	}
	// Crowded: fall back to a port the kernel picks.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

var (
	portMu   sync.Mutex
	portUsed = map[int]bool{}
)

// ephemeralLow is the first port of the kernel's ephemeral range, or
// 32768 when it cannot be read.
func ephemeralLow() int {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var lo, hi int
		if n, _ := fmt.Sscan(string(b), &lo, &hi); n == 2 && lo > 11000 {
			low = lo
		}
	}
	return low
}

// Proc is a running simtel process.
type Proc struct {
	Cmd  *exec.Cmd
	Log  string
	done chan struct{}
}

// Start runs the simtel binary with args, logging to a file in dir.
func Start(t testing.TB, dir string, args ...string) *Proc {
	t.Helper()
	logf, err := os.CreateTemp(dir, "simtel-*.log")
	if err != nil {
		t.Fatal(err)
	}
	return StartCmd(t, exec.Command(Binary(t), args...), logf)
}

// StartCmd is Start for any command (a test binary may run itself in a
// worker role): cmd's output goes to logf, which is closed when cmd
// exits, and the process is killed at the end of the test.
func StartCmd(t testing.TB, cmd *exec.Cmd, logf *os.File) *Proc {
	t.Helper()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Proc{Cmd: cmd, Log: logf.Name(), done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	t.Cleanup(func() { p.Kill() })
	return p
}

// Kill sends SIGKILL and waits for the process to exit.
func (p *Proc) Kill() {
	_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM and waits up to d for a clean exit.
func (p *Proc) Stop(d time.Duration) error {
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		if !p.Cmd.ProcessState.Success() {
			return fmt.Errorf("exited with %v", p.Cmd.ProcessState)
		}
		return nil
	case <-time.After(d):
		p.Kill()
		return fmt.Errorf("did not exit within %v", d)
	}
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// WaitPort waits until addr accepts TCP connections, failing the test if
// p (nil for none) exits first or nothing listens within 20 s.
func WaitPort(t testing.TB, addr string, p *Proc) {
	t.Helper()
	if err := WaitListening(addr, p, 20*time.Second); err != nil {
		t.Fatal(err)
	}
}

// Pause sends SIGSTOP to p and returns once every thread of it has
// stopped. kill(2) returns before that: on a busy machine the process
// went on answering requests for a few milliseconds after it. A test
// that pauses a process to see what its peers do must not start before
// it has stopped. SIGCONT resumes it.
func Pause(t testing.TB, p *os.Process) {
	t.Helper()
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		stopped, err := allThreadsStopped(p.Pid)
		if err != nil {
			t.Fatal(err)
		}
		if stopped {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d not stopped 10 s after SIGSTOP", p.Pid)
		}
		time.Sleep(time.Millisecond)
	}
}

// allThreadsStopped reads the state of each of pid's threads in /proc.
func allThreadsStopped(pid int) (bool, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, task := range tasks {
		st, err := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
		if errors.Is(err, fs.ErrNotExist) {
			continue // the thread has exited
		}
		if err != nil {
			return false, err
		}
		// The state follows the command name, which is in parentheses
		// and may hold spaces.
		i := bytes.LastIndexByte(st, ')')
		if i < 0 || i+2 >= len(st) {
			return false, fmt.Errorf("cannot read the state of thread %s of process %d: %q", task.Name(), pid, st)
		}
		switch st[i+2] {
		case 'T', 't', 'Z', 'X': // stopped, or exiting
		default:
			return false, nil
		}
	}
	return true, nil
}
