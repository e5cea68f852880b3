package bench

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReplaceResults(t *testing.T) {
	doc := "# Bench\n\nintro\n" + MarkerStart + "\nold table\n" + MarkerEnd + "\n\ntrailer\n"
	got, err := ReplaceResults(doc, "new table\n")
	if err != nil {
		t.Fatal(err)
	}
	want := "# Bench\n\nintro\n" + MarkerStart + "\nnew table\n" + MarkerEnd + "\n\ntrailer\n"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	again, _ := ReplaceResults(got, "new table")
	if again != got {
		t.Errorf("second replacement changed the document: %q", again)
	}
	for _, bad := range []string{"no markers", MarkerEnd + "\n" + MarkerStart, MarkerStart + " only"} {
		if _, err := ReplaceResults(bad, "x"); !errors.Is(err, ErrNoMarkers) {
			t.Errorf("ReplaceResults(%q): got %v, want ErrNoMarkers", bad, err)
		}
	}
}

// sampleRun is a run with every kind of step, as compare.sh makes one.
func sampleRun(t *testing.T) *Run {
	t.Helper()
	async, err := os.ReadFile("testdata/nats-js-pub-async-1client.txt")
	if err != nil {
		t.Fatal(err)
	}
	js, err := ParseJetStreamBench(string(async))
	if err != nil {
		t.Fatal(err)
	}
	js.Label = "js pub async"
	always := *js
	always.Label, always.ServerSync, always.MsgsPerS, always.MBPerS = "js pub async always", SyncAlways, 6000, 6.144
	r := &Run{ID: "2025-01-02-030405", Date: "2025-01-02T03:04:05Z", Host: "2 CPUs", Command: "bench/compare.sh",
		Steps: []Step{
			{Label: "disk", Command: "simtel bench disk --dir /d", Disk: &DiskResult{SeqMBPerS: 400, AppendsPS: 4000,
				AppendLat: LatencySummary{P50US: 250, P99US: 900}}},
			{Label: "disk again", Command: "simtel bench disk --dir /d", Disk: &DiskResult{SeqMBPerS: 80, AppendsPS: 1000, SustainMBPerS: 320,
				AppendLat: LatencySummary{P50US: 900, P99US: 5000}}},
			{Label: "produce", Command: "simtel bench produce --acks all", Produce: &ProduceResult{
				Settings: ProduceSettings{Acks: "all", RecordSize: 1024},
				RecPerS:  300000, MBPerS: 307.2, Latency: LatencySummary{P50US: 2500, P99US: 9000, P999US: 15000},
				Timeline: []float64{600000, 500000, 250000, 200000, 150000}}},
			{Label: "produce paced", Command: "simtel bench produce --rate 150000", Produce: &ProduceResult{
				Settings: ProduceSettings{Acks: "all", RecordSize: 1024, Rate: 150000},
				RecPerS:  149000, MBPerS: 150, Latency: LatencySummary{P50US: 800, P99US: 3000, P999US: 5000}}},
			{Label: "consume raw", Command: "simtel bench consume --raw", Consume: &ConsumeResult{Settings: ConsumeSettings{Mode: "raw"}, MBPerS: 1100}},
			{Label: "consume poll", Command: "simtel bench consume", Consume: &ConsumeResult{Settings: ConsumeSettings{Mode: "poll"}, MBPerS: 450}},
			{Label: js.Label, Command: "nats bench js pub async", JetStream: js},
			{Label: always.Label, Command: "nats bench js pub async (always)", JetStream: &always},
		}}
	r.Summarize()
	return r
}

func TestSummarize(t *testing.T) {
	s := sampleRun(t).Summary
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"produce msgs/s", s.ProduceMsgsPerS, 300000},
		{"p999 ms", s.ProduceP999MS, 15},
		{"jetstream msgs/s", s.JSMsgsPerS, 147680},
		{"ratio", s.Ratio, 300000.0 / 147680},
		{"jetstream always msgs/s", s.JSAlwaysMsgsPerS, 6000},
		{"ratio always", s.RatioAlways, 50},
		{"disk fraction", s.DiskFraction, 307.2 / 400},
		{"consume raw", s.ConsumeRawMBPS, 1100},
		{"consume poll", s.ConsumeMBPS, 450},
		{"disk append p50 ms", s.DiskAppendP50, 0.25},
		{"paced rate", s.PacedRate, 150000},
		{"last 3 s msgs/s", s.ProduceTailMsgsPS, 200000},
		{"last 3 s MB/s", s.ProduceTailMBPerS, 204.8},
		{"sustained disk", s.DiskSustainMBPerS, 320},
		{"sustained fraction", s.DiskSustainedFraction, 0.64},
		{"paced p99 ms", s.PacedP99MS, 3},
	} {
		if !within(c.got, c.want, 1e-9) {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
	if s.JSLabel != "js pub async" || s.JSAlwaysLabel != "js pub async always" {
		t.Errorf("labels: got %q and %q", s.JSLabel, s.JSAlwaysLabel)
	}
}

func TestRenderResults(t *testing.T) {
	r := sampleRun(t)
	earlier := sampleRun(t)
	earlier.ID = "2025-01-01-030405"
	md := RenderResults(r, "results/x.svg", []*Run{earlier, r})
	wantAll(t, "rendered results", md,
		"**300,000 msgs/s**", "**307 MB/s**", "2.50 / 9.00 / 15.00 ms", "147,680 msgs/s", "2.03×", "50×",
		"400 MB/s", "0.77", "1,100 MB/s", "450 MB/s", "![throughput and latency of run 2025-01-02-030405](results/x.svg)",
		"simtel bench produce --acks all", "Earlier runs: 1 more in `bench/results/`",
		"paced at 150,000 msgs/s | 0.800 / 3.00 / 5.00 ms",
		"| simtel produce, last 3 s of the run | 200,000 msgs/s, 205 MB/s |", "sustained (last 3 s of a longer run) | 320 MB/s |",
		"÷ sustained disk fdatasync bandwidth | 0.64 |",
	)
	if strings.Contains(md, earlier.ID) {
		t.Errorf("an earlier run is listed in the README's results:\n%s", md)
	}
}

func TestChartSVGIsWellFormed(t *testing.T) {
	r := sampleRun(t)
	r.Host = `<b>&"host"`
	svg := ChartSVG(r)
	dec := xml.NewDecoder(strings.NewReader(svg))
	var texts []string
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("chart is not well-formed XML: %v\n%s", err, svg)
		}
		if cd, ok := tok.(xml.CharData); ok && strings.TrimSpace(string(cd)) != "" {
			texts = append(texts, string(cd))
		}
	}
	all := strings.Join(texts, "\n")
	wantAll(t, "chart text", all, "simtel produce, acks=all", "307 MB/s (300,000 msgs/s)", "JetStream batch of 500 p50",
		"simtel produce at 150,000/s p99", `<b>&"host"`, "1,100 MB/s")
}

// wantAll fails the test for each of wants that text lacks (what names
// the text in the message).
func wantAll(t *testing.T, what, text string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(text, want) {
			t.Errorf("%s: no %q in\n%s", what, want, text)
		}
	}
}

func TestBarScale(t *testing.T) {
	lin := barScale(panel{bars: []bar{{value: 50}, {value: 200}}})
	if got := lin(200); got != barAreaW {
		t.Errorf("linear max: got %v, want %v", got, barAreaW)
	}
	if got := lin(50); got != float64(barAreaW)/4 {
		t.Errorf("linear quarter: got %v, want %v", got, float64(barAreaW)/4)
	}
	log := barScale(panel{log: true, bars: []bar{{value: 0.25}, {value: 25}}})
	if a, b, c := log(0.25), log(2.5), log(25); !(0 < a && a < b && b < c && c == barAreaW) {
		t.Errorf("log scale not increasing up to the full width: %v %v %v", a, b, c)
	}
}

// TestAddStepAndPublish goes the way compare.sh does: steps from command
// outputs, then the results file, chart and README section.
func TestAddStepAndPublish(t *testing.T) {
	dir := t.TempDir()
	run := filepath.Join(dir, "run.json")
	disk, err := MeasureDisk(context.Background(), DiskConfig{Dir: filepath.Join(dir, "disk"), SeqBytes: 4 << 20, Appends: 20})
	if err != nil {
		t.Fatal(err)
	}
	diskJSON, _ := json.Marshal(disk)
	prod, _ := json.Marshal(&ProduceResult{Kind: "produce", Settings: ProduceSettings{Acks: "all", RecordSize: 1024}, RecPerS: 1000, MBPerS: 1.024})
	nats, err := os.ReadFile("testdata/nats-js-pub-async-2clients.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		kind, label, sync string
		out               []byte
	}{
		{"disk", "disk", "", diskJSON},
		{"produce", "produce", "", prod},
		{"jetstream", "js async", "", nats},
	} {
		if err := AddStep(run, s.kind, s.label, "cmd "+s.label, s.sync, "", s.out); err != nil {
			t.Fatalf("AddStep %s: %v", s.label, err)
		}
	}
	if err := AddStep(run, "jetstream", "broken", "", "", "", []byte("nats: error: no servers")); err == nil {
		t.Error("AddStep of unparsable nats output: got no error")
	}
	if err := AddStep(run, "bogus", "x", "", "", "", nil); err == nil {
		t.Error("AddStep of an unknown kind: got no error")
	}
	// Failed steps are recorded, and their figures, if any, do not count.
	if err := AddStep(run, "jetstream", "js failed", "cmd js failed", "", "exit status 1: ack timeout", []byte("nats: error: ack timeout")); err != nil {
		t.Fatalf("AddStep of a failed nats run: %v", err)
	}
	slow, _ := json.Marshal(&ProduceResult{Kind: "produce", RecPerS: 5, Aborted: "no record acknowledged for 30s"})
	if err := AddStep(run, "produce", "produce stalled", "cmd stalled", "", "exit status 1", slow); err != nil {
		t.Fatalf("AddStep of a failed produce: %v", err)
	}

	readme := filepath.Join(dir, "README.md")
	if err := os.WriteFile(readme, []byte("# b\n"+MarkerStart+"\n"+MarkerEnd+"\nend\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	results := filepath.Join(dir, "results")
	path, err := Publish(PublishConfig{RunPath: run, ResultsDir: results, README: readme, ID: "2025-01-01-000000", Date: "d", Host: "h", Command: "c"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := ReadRun(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Steps) != 5 || r.Steps[3].Error == "" || r.Steps[4].Produce == nil || r.Summary.JSMsgsPerS != 183751 || r.Summary.ProduceMsgsPerS != 1000 || r.Summary.DiskSeqMBPerS <= 0 {
		t.Errorf("published run: %d steps, summary %+v", len(r.Steps), r.Summary)
	}
	if _, err := os.Stat(filepath.Join(results, "2025-01-01-000000.svg")); err != nil {
		t.Errorf("chart: %v", err)
	}
	doc, _ := os.ReadFile(readme)
	for _, want := range []string{"183,751 msgs/s", "(results/2025-01-01-000000.svg)", "# js async\ncmd js async", "\nend\n",
		`**Step "js failed" failed** (its figures are left out): ` + "`exit status 1: ack timeout`"} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("README lacks %q:\n%s", want, doc)
		}
	}
	if _, err := Publish(PublishConfig{RunPath: run, ResultsDir: results, ID: "../x"}); err == nil {
		t.Error("Publish with a path as id: got no error")
	}
}
