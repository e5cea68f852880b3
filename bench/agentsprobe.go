package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// What `simtel bench agents` reads of each broker: its Go runtime and
// process figures from its /metrics (client_golang's Go and process
// collectors, which every simtel broker registers), and, for a broker
// the run started, its memory from /proc/<pid>/status.

// BrokerSample is one reading of one broker. Zero fields could not be
// read.
type BrokerSample struct {
	ID int32 `json:"id"`
	// RSSBytes is VmRSS from /proc (brokers the run started), else
	// process_resident_memory_bytes from /metrics.
	RSSBytes        int64 `json:"rss_bytes"`
	HeapInuseBytes  int64 `json:"go_memstats_heap_inuse_bytes"`
	GoSysBytes      int64 `json:"go_memstats_sys_bytes"`
	StackInuseBytes int64 `json:"go_memstats_stack_inuse_bytes"`
	Goroutines      int64 `json:"goroutines"`
	OpenFDs         int64 `json:"open_fds"`
	MaxFDs          int64 `json:"max_fds"`
	// Error says why the broker could not be read (down, say).
	Error string `json:"error,omitempty"`
}

// brokerRuntime are the /metrics gauges BrokerSample takes.
var brokerRuntime = map[string]func(*BrokerSample) *int64{
	"process_resident_memory_bytes": func(s *BrokerSample) *int64 { return &s.RSSBytes },
	"go_memstats_heap_inuse_bytes":  func(s *BrokerSample) *int64 { return &s.HeapInuseBytes },
	"go_memstats_sys_bytes":         func(s *BrokerSample) *int64 { return &s.GoSysBytes },
	"go_memstats_stack_inuse_bytes": func(s *BrokerSample) *int64 { return &s.StackInuseBytes },
	"go_goroutines":                 func(s *BrokerSample) *int64 { return &s.Goroutines },
	"process_open_fds":              func(s *BrokerSample) *int64 { return &s.OpenFDs },
	"process_max_fds":               func(s *BrokerSample) *int64 { return &s.MaxFDs },
}

// parseBrokerRuntime reads the gauges of brokerRuntime from a Prometheus
// text exposition. go_goroutines must be there: without it this is not a
// Go program's /metrics.
func parseBrokerRuntime(r io.Reader) (BrokerSample, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return BrokerSample{}, fmt.Errorf("cannot parse metrics: %w", err)
	}
	if _, ok := fams["go_goroutines"]; !ok {
		return BrokerSample{}, fmt.Errorf("metric go_goroutines is missing")
	}
	var s BrokerSample
	for name, field := range brokerRuntime {
		for _, m := range fams[name].GetMetric() {
			*field(&s) = int64(counterValue(m.GetGauge().GetValue(), m.GetUntyped().GetValue()))
		}
	}
	return s, nil
}

// sampleBroker reads one broker: its /metrics at httpAddr ("" for none)
// and, if pid is not 0, its RSS from /proc.
func sampleBroker(ctx context.Context, cl *http.Client, id int32, httpAddr string, pid int) BrokerSample {
	s := BrokerSample{ID: id}
	if httpAddr != "" {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		m, err := scrapeMetrics(ctx, cl, "http://"+httpAddr+"/metrics", "broker", parseBrokerRuntime)
		cancel()
		if err != nil {
			s.Error = err.Error()
		} else {
			m.ID = id
			s = m
		}
	}
	if pid != 0 {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		if err == nil {
			var mem procMem
			if mem, err = parseProcStatus(b); err == nil {
				s.RSSBytes = mem.RSS
			}
		}
		if err != nil && s.Error == "" {
			s.Error = err.Error()
		}
	}
	return s
}

// PrintAgents writes a `simtel bench agents` result for people.
func PrintAgents(w io.Writer, r *AgentsResult) {
	s := r.Settings
	fmt.Fprintf(w, "agents: %d × %g samples/s (%d B) against %d brokers, topic %s (%d partitions, RF %d)\n",
		s.Agents, s.Rate, s.SampleBytes, s.Brokers, s.Topic, s.Partitions, s.Replication)
	fmt.Fprintf(w, "  accepted %d, acked %d, delivered %d, lost %d (%d agents), duplicated %d, refused %d, foreign %d\n",
		r.Accepted, r.Acked, r.Delivered, r.Lost, r.AgentsLost, r.Duplicated, r.Refused, r.Foreign)
	fmt.Fprintf(w, "  every agent delivering %.1f s after its start; drained in %.1f s, read back in %.1f s; %d shipper warnings\n",
		r.ConnectS, r.DrainS, r.ReadBackS, r.AgentWarnings)
	fmt.Fprintf(w, "  brokers per agent: RSS %.1f KiB, heap+stacks %.1f KiB, %.2f goroutines, %.2f fds; this process: RSS %.1f MiB, %d goroutines\n",
		float64(r.RSSPerAgentBytes)/1024, float64(r.HeapPerAgentBytes)/1024, r.GoroutinesPerAgent, r.FDsPerAgent,
		float64(r.ClientRSSBytes)/(1<<20), r.ClientGoroutines)
	for _, p := range r.Phases {
		fmt.Fprintf(w, "  %s", p.Name)
		if p.Broker >= 0 {
			fmt.Fprintf(w, " (broker %d)", p.Broker)
		}
		fmt.Fprintf(w, ": %.1f s, %d accepted, %d acked; latency ms p50 %.1f p99 %.1f max %.1f\n",
			p.DurationS, p.Accepted, p.Acked, float64(p.Latency.P50US)/1e3, float64(p.Latency.P99US)/1e3, float64(p.Latency.MaxUS)/1e3)
		if p.Broker >= 0 {
			fmt.Fprintf(w, "    broker down %.1f s (stop took %.1f s); every agent delivering again after %.1f s (median %.1f s), %d not back\n",
				p.DownS, p.StopS, p.RecoverMaxS, p.RecoverP50S, p.AgentsNotBack)
		}
		for _, b := range p.Brokers {
			if b.Error != "" && b.RSSBytes == 0 {
				fmt.Fprintf(w, "    broker %d: %s\n", b.ID, b.Error)
				continue
			}
			fmt.Fprintf(w, "    broker %d: RSS %.1f MiB, heap %.1f MiB, Go sys %.1f MiB, %d goroutines, %d of %d fds\n",
				b.ID, float64(b.RSSBytes)/(1<<20), float64(b.HeapInuseBytes)/(1<<20), float64(b.GoSysBytes)/(1<<20), b.Goroutines, b.OpenFDs, b.MaxFDs)
		}
	}
}
