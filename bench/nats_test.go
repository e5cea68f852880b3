package bench

import (
	"os"
	"path/filepath"
	"testing"
)

// The testdata files are the unedited output of natscli v0.5.0 against
// nats-server v2.15.2 on this kind of machine.
func TestParseJetStreamBench(t *testing.T) {
	for _, c := range []struct {
		file      string
		benchmark string
		clients   int
		msgs      int64
		msgsPerS  float64
		mib       float64
		lat       JetStreamLatency
	}{
		{"nats-js-pub-async-1client.txt", "JetStream asynchronous publisher", 1, 200000, 147680, 144,
			JetStreamLatency{MinUS: 2220.29, AvgUS: 3383.16, P50US: 3185.70, P90US: 4478.15, P99US: 6255.17, P999US: 8580.12, MaxUS: 8580.12}},
		{"nats-js-pub-async-2clients.txt", "JetStream asynchronous publisher", 2, 400000, 183751, 179,
			JetStreamLatency{MinUS: 2012.48, AvgUS: 5392.36, P50US: 5233.43, P90US: 7490.84, P99US: 11625.07, P999US: 15441.22, MaxUS: 15441.22}},
		{"nats-js-pub-sync.txt", "JetStream synchronous publisher", 1, 20000, 11713, 11,
			JetStreamLatency{MinUS: 24.57, AvgUS: 85.26, P50US: 81.11, P90US: 119.01, P99US: 160.62, P999US: 1022.49, MaxUS: 4448.60}},
	} {
		out, err := os.ReadFile(filepath.Join("testdata", c.file))
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseJetStreamBench(string(out))
		if err != nil {
			t.Errorf("%s: %v", c.file, err)
			continue
		}
		if got.Benchmark != c.benchmark {
			t.Errorf("%s: benchmark %q, want %q", c.file, got.Benchmark, c.benchmark)
		}
		if got.Clients != c.clients || got.Msgs != c.msgs || got.MsgSize != 1024 {
			t.Errorf("%s: clients %d msgs %d size %d, want %d %d 1024", c.file, got.Clients, got.Msgs, got.MsgSize, c.clients, c.msgs)
		}
		if got.MsgsPerS != c.msgsPerS || got.ReportedMiBPerS != c.mib {
			t.Errorf("%s: %v msgs/s %v MiB/s, want %v %v", c.file, got.MsgsPerS, got.ReportedMiBPerS, c.msgsPerS, c.mib)
		}
		if want := c.msgsPerS * 1024 / 1e6; !within(got.MBPerS, want, 1e-9) {
			t.Errorf("%s: %v MB/s, want %v", c.file, got.MBPerS, want)
		}
		if got.Latency != c.lat {
			t.Errorf("%s: latency %+v, want %+v", c.file, got.Latency, c.lat)
		}
		if got.Params["storage"] != "file" {
			t.Errorf("%s: params %v lack storage=file", c.file, got.Params)
		}
	}
}

func TestParseJetStreamBenchErrors(t *testing.T) {
	for _, in := range []string{
		"",
		"nats: error: nats: no servers available for connection\n",
		"13:07:11 Starting JetStream asynchronous publisher benchmark [clients=1, msg-size=1.0 KiB]\n",
		"13:07:11 Starting JetStream asynchronous publisher benchmark [clients=1]\nNATS JetStream asynchronous publisher stats: lots msgs/sec\n",
	} {
		if got, err := ParseJetStreamBench(in); err == nil {
			t.Errorf("ParseJetStreamBench(%q): got %+v, want an error", in, got)
		}
	}
}

func TestParseSizeAndUnits(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{{"1.0 KiB", 1024}, {"128 B", 128}, {"1KB", 1024}, {"1.5 MiB", 1572864}, {"4 KiB", 4096}} {
		got, err := parseSize(c.in)
		if err != nil || got != c.want {
			t.Errorf("parseSize(%q): got %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	out := "x Starting JetStream synchronous publisher benchmark [clients=1, msgs=10, msg-size=128 B]\n" +
		"NATS JetStream synchronous publisher stats: 1,000 msgs/sec ~ 125 KiB/sec ~ min: 1.5ms ~ P50: 2ms ~ P99: 1s ~ P99.9: 500ns\n"
	got, err := ParseJetStreamBench(out)
	if err != nil {
		t.Fatal(err)
	}
	if !within(got.ReportedMiBPerS, 125.0/1024, 1e-9) {
		t.Errorf("KiB/sec: got %v MiB/s, want %v", got.ReportedMiBPerS, 125.0/1024)
	}
	want := JetStreamLatency{MinUS: 1500, P50US: 2000, P99US: 1e6, P999US: 0.5}
	if got.Latency != want {
		t.Errorf("time units: got %+v, want %+v", got.Latency, want)
	}
}
