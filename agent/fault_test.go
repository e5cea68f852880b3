package agent_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest"
)

// Process-level fault tests: a real broker process and a real agent
// process, killed and restarted. A sample counts as accepted when the
// agent answered 204 to the POST that carried it; every accepted sample
// must reach the topic. Duplicates are allowed only across an agent crash
// (at-least-once from the spool) and are reported.

type procs struct {
	t          *testing.T
	brokerAddr string
	spoolDir   string
	httpAddr   string
	broker     *brokertest.Broker // nil until the first startBroker
	agent      *testutil.Proc
}

func newProcs(t *testing.T) *procs {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	dir := t.TempDir()
	return &procs{t: t, brokerAddr: testutil.FreePort(t), spoolDir: filepath.Join(dir, "spool"), httpAddr: testutil.FreePort(t)}
}

// startBroker starts the broker on brokerAddr, the first time on a new
// data directory, then again on the same one.
func (p *procs) startBroker() {
	if p.broker == nil {
		p.broker = brokertest.Start(p.t, brokertest.SkipShort(), brokertest.Listen(p.brokerAddr))
		return
	}
	p.broker.Restart()
}

func (p *procs) startAgent() {
	p.agent = testutil.Start(p.t, p.t.TempDir(), "agent", "--brokers", p.brokerAddr, "--spool-dir", p.spoolDir,
		"--listen-http", p.httpAddr, "--listen-udp", "", "--listen-tcp", "", "--collect-interval", "-1s",
		"--run", "fault", "--host", "n1", "--linger", "2ms", "--log-level", "warn")
	testutil.WaitPort(p.t, p.httpAddr, p.agent)
}

// sender posts batches of uniquely numbered samples until stopped and
// remembers which were accepted.
type sender struct {
	mu       sync.Mutex
	accepted []string
	refused  int
	stop     chan struct{}
	done     chan struct{}
}

func startSender(url, prefix string, perBatch int, every time.Duration) *sender {
	s := &sender{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		client := &http.Client{Timeout: 5 * time.Second}
		for i := 0; ; i++ {
			select {
			case <-s.stop:
				return
			case <-time.After(every):
			}
			var b strings.Builder
			ids := make([]string, perBatch)
			for j := range ids {
				ids[j] = fmt.Sprintf("id=\"%s%d-%d\"", prefix, i, j)
				fmt.Fprintf(&b, "fault_sample seq=%di,%s\n", i*perBatch+j, ids[j])
			}
			resp, err := client.Post(url, "text/plain", strings.NewReader(b.String()))
			if err == nil {
				resp.Body.Close()
			}
			s.mu.Lock()
			if err == nil && resp.StatusCode == 204 {
				s.accepted = append(s.accepted, ids...)
			} else {
				s.refused++
			}
			s.mu.Unlock()
		}
	}()
	return s
}

func (s *sender) halt() []string {
	close(s.stop)
	<-s.done
	return s.accepted
}

// sendAWhile posts samples numbered under prefix to the agent for 1.5 s
// and returns those it accepted. It fails the test if the agent accepted
// none: the test's claim is about accepted samples, and with none it
// would check nothing.
func (p *procs) sendAWhile(prefix string) []string {
	p.t.Helper()
	s := startSender("http://"+p.httpAddr+"/write?db=x", prefix, 100, 5*time.Millisecond)
	time.Sleep(1500 * time.Millisecond)
	accepted := s.halt()
	if len(accepted) == 0 {
		p.t.Fatalf("the agent accepted none of %d POSTs", s.refused)
	}
	return accepted
}

// check reads the topic and reports lost and duplicated accepted samples.
func (p *procs) check(accepted []string) (dups int) {
	p.t.Helper()
	return checkDelivered(p.t, p.brokerAddr, accepted)
}

// checkDelivered reads the telemetry topic from broker and fails the test
// if no sample was accepted (then there is nothing to check) or if an
// accepted sample is missing; it returns the duplicates.
func checkDelivered(t *testing.T, broker string, accepted []string) (dups int) {
	t.Helper()
	if len(accepted) == 0 {
		t.Fatal("the agent accepted no sample: delivery cannot be checked")
	}
	counts, _ := readTopic(t, broker, "telemetry", len(accepted), 60*time.Second)
	byID := map[string]int{}
	for v, n := range counts {
		if i := strings.Index(v, "id=\""); i >= 0 {
			id := v[i:]
			id = id[:strings.Index(id[4:], "\"")+5]
			byID[id] += n
		}
	}
	lost := 0
	for _, id := range accepted {
		switch n := byID[id]; {
		case n == 0:
			lost++
			if lost <= 5 {
				t.Errorf("accepted sample %s never reached the topic", id)
			}
		case n > 1:
			dups += n - 1
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d accepted samples lost", lost, len(accepted))
	}
	return dups
}

func TestBrokerOutageLosesNothing(t *testing.T) {
	p := newProcs(t)
	p.startBroker()
	p.startAgent()
	s := startSender("http://"+p.httpAddr+"/write?db=x", "a", 50, 10*time.Millisecond)
	time.Sleep(time.Second)
	if err := p.broker.Stop(10 * time.Second); err != nil {
		t.Fatalf("broker did not stop cleanly: %v", err)
	}
	time.Sleep(3 * time.Second) // samples keep being accepted into the spool
	p.startBroker()
	time.Sleep(time.Second)
	accepted := s.halt()
	dups := p.check(accepted)
	t.Logf("%d samples accepted across a 3 s broker outage, all delivered, %d duplicates", len(accepted), dups)
	if dups > 0 {
		t.Errorf("%d duplicates within one agent life: the idempotent producer should prevent them", dups)
	}
}

func TestAgentKilledWithSpoolRedelivers(t *testing.T) {
	p := newProcs(t)
	// The broker is not there yet: everything accepted waits in the spool.
	p.startAgent()
	accepted := p.sendAWhile("a")
	p.agent.Kill()
	p.startBroker()
	p.startAgent()
	dups := p.check(accepted)
	t.Logf("%d samples accepted into the spool, agent SIGKILLed, restarted: all delivered, %d duplicates", len(accepted), dups)

	// Kill again while sending to a live broker: at-least-once, duplicates
	// possible (samples sent after the last persisted spool cursor).
	more := p.sendAWhile("b")
	p.agent.Kill()
	p.startAgent()
	dups = p.check(append(accepted, more...))
	t.Logf("second SIGKILL while shipping: %d more accepted, all delivered, %d duplicates (at-least-once across crashes)", len(more), dups)
}

// TestLeaderFailoverLosesNothing: three broker processes, the telemetry
// topic replicated three times; the broker that leads its partition is
// killed while the agent ships. The agent finds the new leader and
// delivers every accepted sample, without duplicates: the new leader
// knows the agent's producer id and sequence numbers from the replicated
// log, so a batch sent again is recognised.
func TestLeaderFailoverLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	nodes := brokertest.StartCluster(t, 3, brokertest.Topic("telemetry", 1))
	seeds := brokertest.Addrs(nodes)
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	leader := func() int32 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		m, err := adm.Metadata(ctx, "telemetry")
		if err != nil {
			return -1
		}
		if p, ok := m.Topics["telemetry"].Partitions[0]; ok && p.Err == nil {
			return p.Leader
		}
		return -1
	}

	httpAddr := testutil.FreePort(t)
	ag := testutil.Start(t, t.TempDir(), "agent", "--brokers", strings.Join(seeds, ","), "--spool-dir", t.TempDir(),
		"--listen-http", httpAddr, "--listen-udp", "", "--listen-tcp", "", "--collect-interval", "-1s",
		"--run", "failover", "--host", "n1", "--linger", "2ms", "--log-level", "warn")
	testutil.WaitPort(t, httpAddr, ag)
	s := startSender("http://"+httpAddr+"/write?db=x", "f", 50, 10*time.Millisecond)
	time.Sleep(1500 * time.Millisecond)
	old := leader()
	if old < 0 {
		s.halt()
		t.Fatal("the topic lost its leader before the test killed it")
	}
	nodes[old].Kill()
	// Until a new leader is elected, accepted samples wait in the spool.
	time.Sleep(4 * time.Second)
	accepted := s.halt()
	survivor := nodes[(old+1)%3].Addr
	dups := checkDelivered(t, survivor, accepted)
	t.Logf("%d samples accepted while broker %d, the partition's leader, was killed: all delivered, %d duplicates", len(accepted), old, dups)
	if dups > 0 {
		t.Errorf("%d duplicates within one agent life: the new leader should recognise batches sent again", dups)
	}
}
