package testutil

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// S3Server is a real S3-compatible server (versitygw with its posix
// backend) on a loopback port, holding one bucket.
type S3Server struct {
	Endpoint string // http://127.0.0.1:<port>
	Access   string
	Secret   string
	Region   string
	Bucket   string
	URL      string // s3://<bucket>/lake, a lake URL inside the bucket
	Dir      string // the backend's root directory (one subdirectory per bucket)

	t    testing.TB
	bin  string
	addr string
	logs string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// versitygwPath finds the versitygw binary: $SIMTEL_VERSITYGW, the repo's
// .bin/, the user cache where scripts/install-deps.sh puts it, then PATH.
func versitygwPath() (string, []string) {
	tried := []string{"$SIMTEL_VERSITYGW"}
	if p := os.Getenv("SIMTEL_VERSITYGW"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", []string{"$SIMTEL_VERSITYGW=" + p}
		}
		return p, nil
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		if home, err := os.UserHomeDir(); err == nil {
			cache = filepath.Join(home, ".cache")
		}
	}
	cands := []string{filepath.Join(root, ".bin", "versitygw")}
	if cache != "" {
		cands = append(cands, filepath.Join(cache, "simtel", "bin", "versitygw"))
	}
	for _, c := range cands {
		tried = append(tried, c)
		if fi, err := os.Stat(c); err == nil && !fi.IsDir() {
			return c, nil
		}
	}
	tried = append(tried, "$PATH")
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	return "", tried
}

// StartS3 starts versitygw for the test and creates a bucket. Without the
// binary the test is skipped, or fails when CI=true. The server is killed
// when the test ends.
func StartS3(t testing.TB) *S3Server {
	t.Helper()
	bin, tried := versitygwPath()
	if bin == "" {
		msg := fmt.Sprintf("versitygw not found (looked in %v); install it with scripts/install-deps.sh or "+
			"GOBIN=$PWD/.bin go install github.com/versity/versitygw/cmd/versitygw@v1.8.0", tried)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	dir := t.TempDir()
	s := &S3Server{
		Access: "simtel-test",
		Secret: "simtel-test-secret-key",
		Region: "us-east-1",
		Bucket: "simtel-lake",
		Dir:    filepath.Join(dir, "root"),
		logs:   filepath.Join(dir, "versitygw.log"),
		t:      t,
		bin:    bin,
		addr:   FreePort(t),
	}
	s.Endpoint = "http://" + s.addr
	s.URL = "s3://" + s.Bucket + "/lake"
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.kill)
	s.Start()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := s.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &s.Bucket}); err != nil {
		t.Fatalf("cannot create bucket %s on versitygw: %v\n%s", s.Bucket, err, s.Log())
	}
	return s
}

// Client is an SDK client for the server with the root credentials.
func (s *S3Server) Client() *s3.Client {
	return s3.New(s3.Options{
		Region:       s.Region,
		BaseEndpoint: aws.String(s.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s.Access, s.Secret, ""),
	})
}

// Env is the environment a child process (or, through SetEnv, this test
// process) needs to reach the server with the standard AWS credential chain.
func (s *S3Server) Env() []string {
	return []string{
		"AWS_ACCESS_KEY_ID=" + s.Access,
		"AWS_SECRET_ACCESS_KEY=" + s.Secret,
		"AWS_REGION=" + s.Region,
		"AWS_EC2_METADATA_DISABLED=true",
		// Keep a developer's own profile and files out of the test.
		"AWS_CONFIG_FILE=" + os.DevNull,
		"AWS_SHARED_CREDENTIALS_FILE=" + os.DevNull,
	}
}

// SetEnv sets Env in this process for the rest of the test.
func (s *S3Server) SetEnv(t testing.TB) {
	t.Helper()
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_SESSION_TOKEN", "")
	for _, kv := range s.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}

// Start (re)starts the server on the same port and data directory and
// waits until it answers. It does nothing if the server is running.
func (s *S3Server) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return
	}
	logf, err := os.OpenFile(s.logs, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.t.Fatal(err)
	}
	cmd := exec.Command(s.bin, "--port", s.addr, "--access", s.Access, "--secret", s.Secret,
		"--region", s.Region, "--quiet", "posix", s.Dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		s.t.Fatalf("cannot start versitygw (%s): %v", s.bin, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	s.cmd, s.done = cmd, done
	deadline := time.Now().Add(20 * time.Second)
	hc := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-done:
			s.cmd = nil
			s.t.Fatalf("versitygw exited at start:\n%s", s.Log())
		default:
		}
		if c, err := net.DialTimeout("tcp", s.addr, 200*time.Millisecond); err == nil {
			c.Close()
			if resp, err := hc.Get(s.Endpoint + "/"); err == nil {
				resp.Body.Close()
				return
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("versitygw does not answer on %s after 20s:\n%s", s.addr, s.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop ends the server (SIGTERM, then SIGKILL after 5 s) and waits for it;
// its data stays for Start.
func (s *S3Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
	s.cmd = nil
}

func (s *S3Server) kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
	s.cmd = nil
}

// Log returns what the server printed, for failure messages.
func (s *S3Server) Log() string {
	b, _ := os.ReadFile(s.logs)
	return string(b)
}
