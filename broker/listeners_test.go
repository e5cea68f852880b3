package broker_test

import (
	"context"
	"crypto/tls"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker"
	"github.com/simtel/simtel/broker/server"
	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest"
	"github.com/simtel/simtel/internal/tlsfiles"
)

// startListeners runs an in-process broker with cfg (its data directory,
// logger and HTTP listener filled in) until the test ends.
func startListeners(t *testing.T, cfg broker.Config) *broker.Broker {
	t.Helper()
	cfg.DataDir = t.TempDir()
	cfg.HTTPListen = "127.0.0.1:0"
	cfg.GroupInitialRebalanceDelaySet = true
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	b, err := broker.New(cfg)
	if err != nil {
		t.Fatalf("cannot start broker: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("broker stopped with an error: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("broker did not stop within 30s")
		}
	})
	return b
}

func listenerClient(t *testing.T, addr string, tc *tls.Config, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	opts = append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)
	if tc != nil {
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// produceOne produces a record and reports the error.
func produceOne(ctx context.Context, cl *kgo.Client, topic, value string) error {
	return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(value)}).FirstErr()
}

// readListener reads n records of topic from the start.
func readListener(t *testing.T, ctx context.Context, addr string, tc *tls.Config, topic string, n int) []string {
	t.Helper()
	var opts []kgo.Opt
	if tc != nil {
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	return brokertest.Values(brokertest.Read(t, ctx, []string{addr}, topic, n, brokertest.ReadClient(opts...)))
}

func authFailures(t *testing.T, b *broker.Broker, reason string) float64 {
	t.Helper()
	v, err := metricSum(b.HTTPAddr().String(), "simtel_broker_auth_failures_total", `mechanism="tls"`, `reason="`+reason+`"`)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// testCerts makes a CA, a broker certificate for loopback and a client
// certificate of User:alice.
func testCerts(t *testing.T) (*testutil.CA, testutil.Cert, testutil.Cert) {
	ca := testutil.NewCA(t)
	return ca, ca.Server(t, "broker"), ca.Client(t, pkix.Name{CommonName: "alice"})
}

// serverSerial is the serial number of the certificate a TLS listener
// presents to a new connection.
func serverSerial(t *testing.T, addr string, tc *tls.Config) string {
	t.Helper()
	nc, err := tls.Dial("tcp", addr, tc)
	if err != nil {
		t.Fatalf("TLS dial %s: %v", addr, err)
	}
	defer nc.Close()
	return nc.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

func TestTLSListener(t *testing.T) {
	ca, srv, alice := testCerts(t)
	b := startListeners(t, broker.Config{
		Listeners: []broker.ListenerSpec{
			{Name: "plain", Proto: broker.ProtoPlaintext, Addr: "127.0.0.1:0"},
			{Name: "secure", Proto: broker.ProtoSSL, Addr: "127.0.0.1:0"},
		},
		TLS:               tlsfiles.Files{Cert: srv.CertFile, Key: srv.KeyFile, CA: ca.CAFile, ClientAuth: tlsfiles.ClientAuthRequired},
		TLSReloadInterval: 50 * time.Millisecond,
	})
	plain, secure := b.ListenerAddr("plain").String(), b.ListenerAddr("secure").String()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// A client with a certificate produces and consumes over TLS: the
	// addresses Metadata gives it are the TLS listener's, or its
	// connections to the partition leader would fail.
	withCert := listenerClient(t, secure, ca.ClientTLS(alice))
	if _, err := kadm.NewClient(withCert).CreateTopic(ctx, 1, 1, nil, "tls-topic"); err != nil {
		t.Fatalf("create a topic over TLS: %v", err)
	}
	for i := range 3 {
		if err := produceOne(ctx, withCert, "tls-topic", fmt.Sprint("before-", i)); err != nil {
			t.Fatalf("produce over TLS with a client certificate: %v", err)
		}
	}
	if got := readListener(t, ctx, secure, ca.ClientTLS(alice), "tls-topic", 3); strings.Join(got, ",") != "before-0,before-1,before-2" {
		t.Fatalf("consumed over TLS %v, want before-0..2", got)
	}
	// The plaintext listener serves the same topic.
	if got := readListener(t, ctx, plain, nil, "tls-topic", 3); len(got) != 3 {
		t.Fatalf("consumed over PLAINTEXT %v, want 3 records", got)
	}

	// Required client auth refuses a client without a certificate, and a
	// client that does not speak TLS at all; both are counted.
	failFast := []kgo.Opt{kgo.RequestRetries(1), kgo.RetryTimeout(3 * time.Second), kgo.RecordDeliveryTimeout(5 * time.Second)}
	noCert := listenerClient(t, secure, ca.ClientTLS(), failFast...)
	if err := produceOne(ctx, noCert, "tls-topic", "refused"); err == nil {
		t.Fatal("a client without a certificate produced to a listener that requires one")
	}
	if n := authFailures(t, b, "no_client_cert"); n < 1 {
		t.Fatalf("auth failures no_client_cert = %v, want at least 1", n)
	}
	plainToTLS := listenerClient(t, secure, nil, failFast...)
	if err := produceOne(ctx, plainToTLS, "tls-topic", "refused"); err == nil {
		t.Fatal("a plaintext client produced to a TLS listener")
	}
	if n := authFailures(t, b, "not_tls"); n < 1 {
		t.Fatalf("auth failures not_tls = %v, want at least 1", n)
	}

	// A renewed certificate is served to new connections once its files
	// change; the connections of the old one keep working.
	old := serverSerial(t, secure, ca.ClientTLS(alice))
	renewed := ca.Server(t, "broker")
	want := renewed.TLS.Leaf.SerialNumber.String()
	testutil.WaitFor(t, 10*time.Second, "the renewed certificate served", func() error {
		if got := serverSerial(t, secure, ca.ClientTLS(alice)); got != want {
			return fmt.Errorf("serial %s, want %s", got, want)
		}
		return nil
	})
	if old == want {
		t.Fatal("the renewed certificate has the old serial")
	}
	if err := produceOne(ctx, withCert, "tls-topic", "after"); err != nil {
		t.Fatalf("produce on a connection made before the renewal: %v", err)
	}
	// SIGHUP's reload: an explicit one keeps the current files.
	if err := b.ReloadTLS(); err != nil {
		t.Fatal(err)
	}
	if got := serverSerial(t, secure, ca.ClientTLS(alice)); got != want {
		t.Fatalf("after ReloadTLS the serial is %s, want %s", got, want)
	}
}

// TestTLSListenerRequested: with requested client auth a client without a
// certificate is served too, one whose certificate does not verify is not.
func TestTLSListenerRequested(t *testing.T) {
	ca, srv, alice := testCerts(t)
	b := startListeners(t, broker.Config{
		Listeners: []broker.ListenerSpec{{Name: "secure", Proto: broker.ProtoSSL, Addr: "127.0.0.1:0"}},
		TLS:       tlsfiles.Files{Cert: srv.CertFile, Key: srv.KeyFile, CA: ca.CAFile, ClientAuth: tlsfiles.ClientAuthRequested},
	})
	addr := b.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	noCert := listenerClient(t, addr, ca.ClientTLS())
	if _, err := kadm.NewClient(noCert).CreateTopic(ctx, 1, 1, nil, "requested"); err != nil {
		t.Fatalf("create a topic over TLS without a client certificate: %v", err)
	}
	if err := produceOne(ctx, noCert, "requested", "anonymous"); err != nil {
		t.Fatalf("produce without a client certificate: %v", err)
	}
	if err := produceOne(ctx, listenerClient(t, addr, ca.ClientTLS(alice)), "requested", "alice"); err != nil {
		t.Fatalf("produce with a client certificate: %v", err)
	}
	if got := readListener(t, ctx, addr, ca.ClientTLS(), "requested", 2); strings.Join(got, ",") != "anonymous,alice" {
		t.Fatalf("read %v, want anonymous,alice", got)
	}
	other := testutil.NewCA(t)
	mallory := other.Client(t, pkix.Name{CommonName: "mallory"})
	foreign := listenerClient(t, addr, ca.ClientTLS(mallory), kgo.RequestRetries(1), kgo.RetryTimeout(3*time.Second), kgo.RecordDeliveryTimeout(5*time.Second))
	if err := produceOne(ctx, foreign, "requested", "refused"); err == nil {
		t.Fatal("a client whose certificate does not verify produced")
	}
	if n := authFailures(t, b, "bad_client_cert"); n < 1 {
		t.Fatalf("auth failures bad_client_cert = %v, want at least 1", n)
	}
}

// TestMetadataPerListener: a client learns the addresses of the listener
// it is connected to, from Metadata, FindCoordinator and DescribeCluster.
func TestMetadataPerListener(t *testing.T) {
	pa, pb := testutil.FreePort(t), testutil.FreePort(t)
	_, portA, _ := net.SplitHostPort(pa)
	_, portB, _ := net.SplitHostPort(pb)
	startListeners(t, broker.Config{
		Listeners: []broker.ListenerSpec{
			{Name: "a", Proto: broker.ProtoPlaintext, Addr: pa},
			{Name: "b", Proto: broker.ProtoPlaintext, Addr: pb},
		},
		// "b" is advertised as localhost, so the two answers differ in
		// host as well as port.
		AdvertisedListeners: []broker.ListenerSpec{{Name: "b", Addr: "localhost:" + portB}},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		seed, host string
		port       string
	}{
		{pa, "127.0.0.1", portA},
		{pb, "localhost", portB},
	} {
		want := net.JoinHostPort(tc.host, tc.port)
		cl := listenerClient(t, tc.seed, nil)
		seed := cl.SeedBrokers()[0]
		mr, err := seed.Request(ctx, kmsg.NewPtrMetadataRequest())
		if err != nil {
			t.Fatal(err)
		}
		m := mr.(*kmsg.MetadataResponse)
		if len(m.Brokers) != 1 || net.JoinHostPort(m.Brokers[0].Host, strconv.Itoa(int(m.Brokers[0].Port))) != want {
			t.Errorf("Metadata through %s: brokers %+v, want one at %s", tc.seed, m.Brokers, want)
		}
		fr := kmsg.NewPtrFindCoordinatorRequest()
		fr.CoordinatorKey = "g"
		r, err := seed.Request(ctx, fr)
		if err != nil {
			t.Fatal(err)
		}
		f := r.(*kmsg.FindCoordinatorResponse)
		if got := net.JoinHostPort(f.Host, strconv.Itoa(int(f.Port))); got != want {
			t.Errorf("FindCoordinator through %s: %s, want %s", tc.seed, got, want)
		}
		r, err = seed.Request(ctx, kmsg.NewPtrDescribeClusterRequest())
		if err != nil {
			t.Fatal(err)
		}
		d := r.(*kmsg.DescribeClusterResponse)
		if len(d.Brokers) != 1 || net.JoinHostPort(d.Brokers[0].Host, strconv.Itoa(int(d.Brokers[0].Port))) != want {
			t.Errorf("DescribeCluster through %s: brokers %+v, want one at %s", tc.seed, d.Brokers, want)
		}
	}
}

func TestListenerConfigValidate(t *testing.T) {
	l := func(s string) []broker.ListenerSpec {
		ls, err := server.ParseListeners(s)
		if err != nil {
			t.Fatalf("ParseListeners(%q): %v", s, err)
		}
		return ls
	}
	var long []string
	for i := range 8 {
		long = append(long, fmt.Sprintf("listener-with-a-long-name-%d=PLAINTEXT://127.0.0.1:%d", i, 9000+i))
	}
	longListeners := strings.Join(long, ",")
	for _, tc := range []struct {
		name string
		cfg  broker.Config
		want string // "" : valid
	}{
		{"two listeners", broker.Config{Listeners: l("a=PLAINTEXT://127.0.0.1:1,b=SSL://127.0.0.1:2"), TLS: tlsfiles.Files{Cert: "c", Key: "k"}}, ""},
		{"unnamed", broker.Config{Listeners: l("PLAINTEXT://127.0.0.1:1")}, ""},
		{"listen besides listeners", broker.Config{Listen: "127.0.0.1:3", Listeners: l("a=PLAINTEXT://127.0.0.1:1")}, "one-listener shorthand"},
		{"unknown protocol", broker.Config{Listeners: l("a=HTTP://127.0.0.1:1")}, "security protocol"},
		{"name twice", broker.Config{Listeners: l("a=PLAINTEXT://127.0.0.1:1,a=SSL://127.0.0.1:2")}, "used twice"},
		{"bad address", broker.Config{Listeners: l("a=PLAINTEXT://nowhere")}, "not host:port"},
		{"ssl without cert", broker.Config{Listeners: l("a=SSL://127.0.0.1:1")}, "--tls-cert"},
		{"advertised unknown", broker.Config{Listeners: l("a=PLAINTEXT://127.0.0.1:1"), AdvertisedListeners: l("b=PLAINTEXT://h:1")}, "names no listener"},
		{"inter-broker unknown", broker.Config{Listeners: l("a=PLAINTEXT://127.0.0.1:1"), InterBrokerListener: "c"}, "inter-broker listener"},
		{"too long to gossip", broker.Config{Listeners: l(longListeners), RaftListen: "127.0.0.1:1", GossipListen: "127.0.0.1:2", BootstrapExpect: 1}, "gossip"},
		{"bad mapping", broker.Config{Listeners: l("a=PLAINTEXT://127.0.0.1:1"), TLSPrincipalMapping: "CN"}, "--tls-principal-mapping"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.DataDir = "d"
			err := tc.cfg.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate: %v, want an error with %q", err, tc.want)
			}
			// A valid config validates again unchanged (New validates a
			// config its caller may have validated already).
			if err == nil {
				if err := tc.cfg.Validate(); err != nil {
					t.Fatalf("second Validate: %v", err)
				}
			}
		})
	}
	if _, err := server.ParseListeners("a=127.0.0.1:1"); err == nil {
		t.Error(`ParseListeners("a=127.0.0.1:1") succeeded, want an error (no protocol)`)
	}
}

// TestKcatSSL: librdkafka produces and consumes over an SSL listener with
// a client certificate, as an operator configures it.
func TestKcatSSL(t *testing.T) {
	kcatPath(t)
	ca, srv, alice := testCerts(t)
	b := startListeners(t, broker.Config{
		Listeners: []broker.ListenerSpec{{Name: "secure", Proto: broker.ProtoSSL, Addr: "127.0.0.1:0"}},
		TLS:       tlsfiles.Files{Cert: srv.CertFile, Key: srv.KeyFile, CA: ca.CAFile, ClientAuth: tlsfiles.ClientAuthRequired},
	})
	ssl := []string{"-b", b.Addr().String(), "-X", "security.protocol=SSL", "-X", "ssl.ca.location=" + ca.CAFile,
		"-X", "ssl.certificate.location=" + alice.CertFile, "-X", "ssl.key.location=" + alice.KeyFile}
	runKcat(t, "one\ntwo\nthree\n", append([]string{"-P", "-t", "kc-ssl"}, ssl...)...)
	out := runKcat(t, "", append([]string{"-C", "-t", "kc-ssl", "-e", "-f", "%s\n"}, ssl...)...)
	if got := strings.Fields(out); strings.Join(got, ",") != "one,two,three" {
		t.Fatalf("kcat read %q over SSL, want one two three", out)
	}
}

// TestClusterListeners: three brokers, each with a PLAINTEXT and an SSL
// listener. A client of either listener learns every broker's address on
// that listener, and a TLS client produces to replicated partitions and
// consumes in a group (FindCoordinator) over TLS alone.
func TestClusterListeners(t *testing.T) {
	if testing.Short() {
		t.Skip("starts broker processes")
	}
	ca, srv, alice := testCerts(t)
	secure := map[int32]string{}
	bs, _ := startClusterWith(t, 3, func(cb *clusterBroker) []string {
		s := testutil.FreePort(t)
		secure[int32(cb.ID)] = s
		return []string{"--listeners", "plain=PLAINTEXT://" + cb.Addr + ",secure=SSL://" + s,
			"--tls-cert", srv.CertFile, "--tls-key", srv.KeyFile, "--tls-ca", ca.CAFile, "--tls-client-auth", "required"}
	})
	// Metadata is asked of broker 1 below: it must know all three too,
	// not only the broker that formed the cluster.
	waitCluster(t, bs[1].Addr, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	brokersOf := func(m *kmsg.MetadataResponse) map[int32]string {
		out := map[int32]string{}
		for _, br := range m.Brokers {
			out[br.NodeID] = net.JoinHostPort(br.Host, strconv.Itoa(int(br.Port)))
		}
		return out
	}
	plain := map[int32]string{}
	for _, cb := range bs {
		plain[int32(cb.ID)] = cb.Addr
	}
	m, err := metadataFrom(ctx, bs[1].Addr)
	if err != nil {
		t.Fatal(err)
	}
	if got := brokersOf(m); fmt.Sprint(got) != fmt.Sprint(plain) {
		t.Fatalf("Metadata on the PLAINTEXT listener: brokers %v, want %v", got, plain)
	}
	tc := ca.ClientTLS(alice)
	// Every broker gossips its listeners: wait until broker 1 knows the
	// secure addresses of all three.
	testutil.WaitFor(t, 30*time.Second, "the SSL listeners of all brokers in Metadata", func() error {
		cl := listenerClient(t, secure[1], tc)
		r, err := cl.SeedBrokers()[0].Request(ctx, kmsg.NewPtrMetadataRequest())
		cl.Close()
		if err != nil {
			return err
		}
		if got := brokersOf(r.(*kmsg.MetadataResponse)); fmt.Sprint(got) != fmt.Sprint(secure) {
			return fmt.Errorf("brokers %v, want %v", got, secure)
		}
		return nil
	})

	cl := listenerClient(t, secure[2], tc)
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 3, 3, nil, "tls-repl"); err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		if err := produceOne(ctx, cl, "tls-repl", fmt.Sprint(i)); err != nil {
			t.Fatalf("produce over TLS to a replicated topic: %v", err)
		}
	}
	g := listenerClient(t, secure[0], tc, kgo.ConsumeTopics("tls-repl"), kgo.ConsumerGroup("tls-group"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	n := 0
	for n < 30 {
		fs := g.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("group read %d of 30 records over TLS: %v", n, ctx.Err())
		}
		n += fs.NumRecords()
	}
	if err := g.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("commit over TLS: %v", err)
	}
}

// TestTLSReloadOnSIGHUP: a broker process given SIGHUP reloads its TLS
// files (its periodic check is an hour away) and keeps serving.
func TestTLSReloadOnSIGHUP(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker process")
	}
	ca, srv, alice := testCerts(t)
	plain, secure := testutil.FreePort(t), testutil.FreePort(t)
	p := testutil.Start(t, t.TempDir(), "broker", "--data-dir", t.TempDir(),
		"--listeners", "plain=PLAINTEXT://"+plain+",secure=SSL://"+secure,
		"--tls-cert", srv.CertFile, "--tls-key", srv.KeyFile, "--tls-ca", ca.CAFile, "--tls-client-auth", "required", "--tls-reload-interval", "1h")
	if err := testutil.WaitListening(secure, p, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	tc := ca.ClientTLS(alice)
	old := serverSerial(t, secure, tc)
	renewed := ca.Server(t, "broker")
	if err := p.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	want := renewed.TLS.Leaf.SerialNumber.String()
	testutil.WaitFor(t, 10*time.Second, "the renewed certificate after SIGHUP", func() error {
		if p.Exited() {
			t.Fatalf("the broker exited on SIGHUP; log %s", p.Log)
		}
		if got := serverSerial(t, secure, tc); got != want {
			return fmt.Errorf("serial %s (old %s), want %s", got, old, want)
		}
		return nil
	})
}
