package agent_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/agent"
	"github.com/simtel/simtel/internal/lineproto"
	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest"
)

type testAgent struct {
	addrs map[string]string
	stop  func()
}

// testConfig is an agent with every listener on a free port or in dir,
// its spool in dir, shipping to brokerAddr.
func testConfig(brokerAddr, dir string) agent.Config {
	return agent.Config{
		Brokers:         []string{brokerAddr},
		ListenUDP:       "127.0.0.1:0",
		ListenTCP:       "127.0.0.1:0",
		ListenUnix:      filepath.Join(dir, "agent.sock"),
		ListenHTTP:      "127.0.0.1:0",
		ListenStatsD:    "127.0.0.1:0",
		SpoolDir:        filepath.Join(dir, "spool"),
		CollectInterval: -1,
		Linger:          time.Millisecond,
		Tags:            lineproto.DefaultTags{Host: "node7", Job: "4242", Run: "run-a"},
		Logger:          testutil.Logger(),
	}
}

func startAgent(t *testing.T, brokerAddr string, mod func(*agent.Config)) *testAgent {
	t.Helper()
	cfg := testConfig(brokerAddr, t.TempDir())
	if mod != nil {
		mod(&cfg)
	}
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	ta := &testAgent{addrs: a.Addrs()}
	ta.stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent stopped with error: %v", err)
		}
	}
	t.Cleanup(func() {
		if ta.stop != nil {
			ta.stop()
		}
	})
	return ta
}

// topicReader is a client that reads topic from its start; the caller
// closes it.
func topicReader(t *testing.T, brokerAddr, topic string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokerAddr), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// readTopic reads every record of topic until want records arrived or the
// deadline passes; it returns values by count and the keys seen.
func readTopic(t *testing.T, brokerAddr, topic string, want int, d time.Duration) (map[string]int, map[string]string) {
	t.Helper()
	cl := topicReader(t, brokerAddr, topic)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	counts := map[string]int{}
	keys := map[string]string{}
	n := 0
	for n < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			break
		}
		fs.EachRecord(func(r *kgo.Record) {
			counts[string(r.Value)]++
			keys[string(r.Value)] = string(r.Key)
			n++
		})
	}
	return counts, keys
}

// find returns the stored line whose text contains sub.
func find(counts map[string]int, sub string) (string, bool) {
	for v := range counts {
		if strings.Contains(v, sub) {
			return v, true
		}
	}
	return "", false
}

func TestEveryListenerShipsTaggedSamples(t *testing.T) {
	br := brokertest.Start(t, brokertest.GroupDelay(0)).Addr
	a := startAgent(t, br, nil)

	send := map[string]func(line string){
		"udp": func(line string) {
			c, _ := net.Dial("udp", a.addrs["udp"])
			c.Write([]byte(line + "\n"))
			c.Close()
		},
		"tcp": func(line string) {
			c, _ := net.Dial("tcp", a.addrs["tcp"])
			c.Write([]byte(line + "\n"))
			c.Close()
		},
		"unix": func(line string) {
			c, err := net.Dial("unix", a.addrs["unix"])
			if err != nil {
				t.Fatal(err)
			}
			c.Write([]byte(line + "\n"))
			c.Close()
		},
		"http-v1": func(line string) { post(t, "http://"+a.addrs["http"]+"/write?db=x", line, 204) },
		"http-v2": func(line string) { post(t, "http://"+a.addrs["http"]+"/api/v2/write?bucket=x&precision=s", line, 204) },
	}
	for name, f := range send {
		f(fmt.Sprintf("via_%s,rank=0 value=1i", strings.ReplaceAll(name, "-", "_")))
	}
	// The sender's own host tag wins over the agent's.
	post(t, "http://"+a.addrs["http"]+"/write?db=x", "own_host,host=login1 value=2", 204)
	c, _ := net.Dial("udp", a.addrs["statsd"])
	c.Write([]byte("episodes:1|c\n"))
	c.Close()

	counts, keys := readTopic(t, br, "telemetry", 7, 30*time.Second)
	for name := range send {
		m := "via_" + strings.ReplaceAll(name, "-", "_") + ","
		v, ok := find(counts, m)
		if !ok {
			t.Fatalf("%s: line not in the topic; got %v", name, counts)
		}
		for _, tag := range []string{"host=node7", "job=4242", "run=run-a", "rank=0"} {
			if !strings.Contains(v, tag) {
				t.Errorf("%s: stored line %q lacks %s", name, v, tag)
			}
		}
		if keys[v] != "run-a/node7" {
			t.Errorf("%s: key %q, want run-a/node7", name, keys[v])
		}
	}
	if v, ok := find(counts, "own_host,"); !ok || !strings.Contains(v, "host=login1") || strings.Contains(v, "host=node7") {
		t.Errorf("sender's host tag: got %q, want host=login1 kept", v)
	} else if keys[v] != "run-a/login1" {
		t.Errorf("key of own_host: got %q, want run-a/login1", keys[v])
	}
	if _, ok := find(counts, "episodes"); !ok {
		t.Errorf("statsd counter not shipped; got %v", counts)
	}
	if v, ok := find(counts, "via_http_v2,"); ok && !strings.HasSuffix(v, "000000000") {
		t.Errorf("precision=s: timestamp of %q should be whole seconds in ns", v)
	}
}

func post(t *testing.T, url, body string, want int) string {
	t.Helper()
	b, _ := postBody(t, url, body, want)
	return string(b)
}

// postBody posts body to url as text, fails the test unless the answer
// has status want, and returns the answer's body and header.
func postBody(t *testing.T, url, body string, want int) ([]byte, http.Header) {
	t.Helper()
	resp, err := http.Post(url, "text/plain", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("POST %s %q: status %d (%s), want %d", url, body, resp.StatusCode, b, want)
	}
	return b, resp.Header
}

func TestHTTPAnswersLikeInfluxDB(t *testing.T) {
	br := brokertest.Start(t, brokertest.GroupDelay(0)).Addr
	a := startAgent(t, br, func(c *agent.Config) { c.MaxBodyBytes = 4096 })
	base := "http://" + a.addrs["http"]

	// A bad line among good ones: 400 naming it; the good lines are kept.
	body := post(t, base+"/write?db=x", "good1 v=1\nbroken line\ngood2 v=2i", 400)
	if !strings.Contains(body, `"error"`) || !strings.Contains(body, "line 2") || !strings.Contains(body, "broken line") {
		t.Errorf("v1 error body %q should name line 2 and its text", body)
	}
	body = post(t, base+"/api/v2/write?bucket=b", "good3 v=3\nbad,tag value", 400)
	if !strings.Contains(body, `"code":"invalid"`) || !strings.Contains(body, "line 2") {
		t.Errorf("v2 error body %q should have code invalid and name line 2", body)
	}
	post(t, base+"/write", "m v=1", 400)                              // no db
	post(t, base+"/api/v2/write", "m v=1", 400)                       // no bucket
	post(t, base+"/write?db=x&precision=fortnights", "m v=1", 400)    // bad precision
	post(t, base+"/write?db=x", strings.Repeat("m v=1\n", 1000), 413) // over MaxBodyBytes

	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte("zipped v=1"))
	zw.Close()
	req, _ := http.NewRequest("POST", base+"/write?db=x", &gz)
	req.Header.Set("Content-Encoding", "gzip")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 204 {
		t.Fatalf("gzip body: %v %v", resp.StatusCode, err)
	}
	// A gzip bomb: small on the wire, too large inflated.
	gz.Reset()
	zw = gzip.NewWriter(&gz)
	zw.Write(bytes.Repeat([]byte("m v=1\n"), 100_000))
	zw.Close()
	req, _ = http.NewRequest("POST", base+"/write?db=x", &gz)
	req.Header.Set("Content-Encoding", "gzip")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 413 {
		t.Fatalf("gzip bomb: got %v %v, want 413", resp.StatusCode, err)
	}
	if resp, _ := http.Get(base + "/write?db=x"); resp.StatusCode != 405 {
		t.Errorf("GET /write: %d, want 405", resp.StatusCode)
	}
	if resp, _ := http.Get(base + "/ping"); resp.StatusCode != 204 || resp.Header.Get("X-Influxdb-Version") == "" {
		t.Errorf("/ping: %d %v", resp.StatusCode, resp.Header)
	}
	if resp, _ := http.Post(base+"/query?q=CREATE+DATABASE+telegraf", "", nil); resp.StatusCode != 200 {
		t.Errorf("/query CREATE DATABASE: %d, want 200", resp.StatusCode)
	}
	counts, _ := readTopic(t, br, "telemetry", 4, 20*time.Second)
	for _, m := range []string{"good1,", "good2,", "good3,", "zipped,"} {
		if _, ok := find(counts, m); !ok {
			t.Errorf("%s missing from the topic: %v", m, counts)
		}
	}
	if _, ok := find(counts, "broken"); ok {
		t.Error("the malformed line was shipped")
	}
	resp, _ := http.Get(base + "/metrics")
	m, _ := io.ReadAll(resp.Body)
	for _, series := range []string{`simtel_agent_parse_errors_total{listener="http"} 2`, "simtel_agent_spool_bytes", "simtel_agent_samples_sent_total"} {
		if !bytes.Contains(m, []byte(series)) {
			t.Errorf("/metrics lacks %s", series)
		}
	}
}

// TestRefusedSamplesAreDroppedAlone: a topic whose batches may not exceed
// 2,000 bytes refuses the agent's batch; the shipper halves it until the
// one line too large for the topic is alone, drops and counts that line,
// and delivers every other one.
func TestRefusedSamplesAreDroppedAlone(t *testing.T) {
	br := brokertest.Start(t, brokertest.GroupDelay(0)).Addr
	cl, err := kgo.NewClient(kgo.SeedBrokers(br))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": kadm.StringPtr("2000")}, "telemetry"); err != nil {
		t.Fatal(err)
	}
	ta := startAgent(t, br, nil)

	rng := rand.New(rand.NewPCG(7, 8))
	noise := make([]byte, 8000) // does not compress below 2,000 bytes
	for i := range noise {
		noise[i] = "abcdefghijklmnopqrstuvwxyz0123456789"[rng.IntN(36)]
	}
	var body strings.Builder
	for i := range 400 {
		if i == 250 {
			fmt.Fprintf(&body, "big,rank=%d blob=\"%s\"\n", i, noise)
		}
		fmt.Fprintf(&body, "small,rank=%d v=%di\n", i, i)
	}
	post(t, "http://"+ta.addrs["http"]+"/write?db=sim", body.String(), http.StatusNoContent)

	counts, _ := readTopic(t, br, "telemetry", 400, 20*time.Second)
	for i := range 400 {
		if _, ok := find(counts, fmt.Sprintf("small,host=node7,job=4242,rank=%d,run=run-a v=%di ", i, i)); !ok {
			t.Fatalf("line %d did not arrive (%d lines arrived)", i, len(counts))
		}
	}
	if _, ok := find(counts, "big,"); ok {
		t.Fatal("the line the topic cannot take arrived")
	}
	testutil.WaitFor(t, 10*time.Second, "metrics of 1 dropped and 400 sent", func() error {
		m := metrics(t, ta.addrs["http"])
		dropped := grepLines(m, `simtel_agent_samples_dropped_total{reason="rejected_by_broker"}`)
		sent := grepLines(m, "simtel_agent_samples_sent_total")
		if !strings.HasSuffix(dropped, " 1") || !strings.HasSuffix(sent, " 400") {
			return fmt.Errorf("%q and %q", dropped, sent)
		}
		return nil
	})
}

// TestSamplesOfSeveralRunsGoToTheirPartitions: lines whose own run tag
// differs (the sender's tags win) carry different keys; one spool read
// holding them all is split per partition, and every record lands in the
// partition Kafka's default partitioner picks for its key, in order.
func TestSamplesOfSeveralRunsGoToTheirPartitions(t *testing.T) {
	br := brokertest.Start(t, brokertest.GroupDelay(0)).Addr
	cl := topicReader(t, br, "telemetry")
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 4, 1, nil, "telemetry"); err != nil {
		t.Fatal(err)
	}
	ta := startAgent(t, br, func(c *agent.Config) { c.Linger = 200 * time.Millisecond })
	const n = 600
	var body strings.Builder
	for i := range n {
		fmt.Fprintf(&body, "m,run=r%d seq=%di\n", i%6, i)
	}
	post(t, "http://"+ta.addrs["http"]+"/write?db=sim", body.String(), http.StatusNoContent)

	hash := kgo.StickyKeyPartitioner(nil).ForTopic("telemetry")
	last := map[string]int{} // key → last seq seen
	parts := map[int32]bool{}
	got := 0
	for got < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%d of %d records arrived", got, n)
		}
		fs.EachRecord(func(r *kgo.Record) {
			got++
			parts[r.Partition] = true
			if want := int32(hash.Partition(&kgo.Record{Key: r.Key}, 4)); r.Partition != want {
				t.Errorf("key %q in partition %d, Kafka's partitioner picks %d", r.Key, r.Partition, want)
			}
			var seq int
			if _, err := fmt.Sscanf(string(r.Value[strings.Index(string(r.Value), "seq="):]), "seq=%di", &seq); err != nil {
				t.Fatalf("record %q: %v", r.Value, err)
			}
			k := string(r.Key)
			if prev, ok := last[k]; ok && seq <= prev {
				t.Errorf("key %q: seq %d after %d", k, seq, prev)
			}
			last[k] = seq
		})
	}
	if len(last) != 6 || len(parts) < 2 {
		t.Errorf("%d keys in %d partitions, want 6 keys in more than one", len(last), len(parts))
	}
}
