package bench

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// Chart geometry, in SVG user units (pixels).
const (
	chartWidth  = 880
	labelWidth  = 330 // bar labels, right-aligned against the bars
	barAreaW    = 430 // longest bar; the value is printed after it
	barHeight   = 18
	barGap      = 8
	panelTitleH = 34
	panelGap    = 18
)

// Colours: one per system, lighter for the weaker variant.
const (
	colSimtel      = "#1f77b4"
	colSimtelLight = "#7fb3e0"
	colJS          = "#ff7f0e"
	colJSLight     = "#ffbf86"
	colDisk        = "#7f7f7f"
	colConsume     = "#2ca02c"
	colConsumeLite = "#98df8a"
)

type bar struct {
	label string
	value float64
	text  string // printed after the bar
	color string
}

type panel struct {
	title string
	log   bool // log10 scale (latencies spanning decades)
	bars  []bar
}

// ChartSVG draws the run's throughput and latency figures as a standalone
// SVG document: horizontal bars, one panel each, values printed.
func ChartSVG(r *Run) string {
	s := r.Summary
	var produceLat, pacedLat *LatencySummary
	var jsDefault *JetStreamResult
	var disk *DiskResult
	for _, st := range r.Steps {
		if st.Error != "" {
			continue
		}
		switch {
		case st.Produce != nil && st.Produce.Settings.Rate == 0 && produceLat == nil:
			produceLat = &st.Produce.Latency
		case st.Produce != nil && st.Produce.Settings.Rate > 0 && pacedLat == nil:
			pacedLat = &st.Produce.Latency
		case st.JetStream != nil && st.Label == s.JSLabel && jsDefault == nil:
			jsDefault = st.JetStream
		case st.Disk != nil && (disk == nil || st.Disk.AppendsPS > disk.AppendsPS):
			disk = st.Disk
		}
	}

	tp := panel{title: "Throughput, MB/s (10^6 bytes/s), higher is better"}
	add := func(p *panel, label string, v float64, text, color string) {
		if v > 0 {
			p.bars = append(p.bars, bar{label: label, value: v, text: text, color: color})
		}
	}
	mb := func(v float64) string { return fmtMB(v) + " MB/s" }
	add(&tp, "disk: 1 MiB writes + fdatasync, 512 MiB", s.DiskSeqMBPerS, mb(s.DiskSeqMBPerS), colDisk)
	add(&tp, "disk: the same, sustained", s.DiskSustainMBPerS, mb(s.DiskSustainMBPerS), colDisk)
	add(&tp, "simtel produce, acks="+s.ProduceAcks, s.ProduceMBPerS,
		fmt.Sprintf("%s (%s msgs/s)", mb(s.ProduceMBPerS), fmtCount(s.ProduceMsgsPerS)), colSimtel)
	add(&tp, "simtel produce, last 3 s", s.ProduceTailMBPerS,
		fmt.Sprintf("%s (%s msgs/s)", mb(s.ProduceTailMBPerS), fmtCount(s.ProduceTailMsgsPS)), colSimtelLight)
	add(&tp, "JetStream publish, default sync", s.JSMBPerS,
		fmt.Sprintf("%s (%s msgs/s)", mb(s.JSMBPerS), fmtCount(s.JSMsgsPerS)), colJS)
	add(&tp, "JetStream publish, sync_interval always", s.JSAlwaysMBPerS,
		fmt.Sprintf("%s (%s msgs/s)", mb(s.JSAlwaysMBPerS), fmtCount(s.JSAlwaysMsgsPerS)), colJSLight)
	add(&tp, "simtel consume, raw fetch", s.ConsumeRawMBPS, mb(s.ConsumeRawMBPS), colConsume)
	add(&tp, "simtel consume, kgo poll", s.ConsumeMBPS, mb(s.ConsumeMBPS), colConsumeLite)

	lp := panel{title: "Latency, ms (log scale), lower is better", log: true}
	ms := func(v float64) string { return fmtMS(v) + " ms" }
	addProduce := func(l *LatencySummary, label, color string) {
		for _, q := range []struct {
			name string
			us   int64
		}{{"p50", l.P50US}, {"p99", l.P99US}, {"p999", l.P999US}} {
			v := float64(q.us) / 1e3
			add(&lp, label+" "+q.name, v, ms(v), color)
		}
	}
	if produceLat != nil {
		addProduce(produceLat, "simtel produce, full speed", colSimtel)
	}
	if pacedLat != nil {
		addProduce(pacedLat, fmt.Sprintf("simtel produce at %s/s", fmtCount(s.PacedRate)), colSimtelLight)
	}
	if jsDefault != nil {
		for _, q := range []struct {
			name string
			us   float64
		}{{"p50", jsDefault.Latency.P50US}, {"p99", jsDefault.Latency.P99US}, {"p99.9", jsDefault.Latency.P999US}} {
			v := q.us / 1e3
			op := "op"
			if b := jsDefault.Params["batch"]; b != "" && b != "0" {
				op = "batch of " + b
			}
			add(&lp, "JetStream "+op+" "+q.name, v, ms(v), colJS)
		}
	}
	if disk != nil {
		for _, q := range []struct {
			name string
			us   int64
		}{{"p50", disk.AppendLat.P50US}, {"p99", disk.AppendLat.P99US}} {
			v := float64(q.us) / 1e3
			add(&lp, "disk: 4 KiB append + fdatasync "+q.name, v, ms(v), colDisk)
		}
	}

	var body strings.Builder
	y := 56
	for _, p := range []panel{tp, lp} {
		if len(p.bars) == 0 {
			continue
		}
		y = drawPanel(&body, p, y) + panelGap
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		chartWidth, y, chartWidth, y)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="10" y="22" font-size="15" font-weight="bold">%s</text>`+"\n",
		html.EscapeString("simtel vs NATS JetStream, run "+r.ID))
	fmt.Fprintf(&b, `<text x="10" y="40" font-size="11" fill="#555">%s</text>`+"\n", html.EscapeString(r.Host))
	b.WriteString(body.String())
	b.WriteString("</svg>\n")
	return b.String()
}

// drawPanel writes one panel starting at y and returns the y below it.
func drawPanel(b *strings.Builder, p panel, y int) int {
	fmt.Fprintf(b, `<text x="10" y="%d" font-size="13" font-weight="bold">%s</text>`+"\n", y+18, html.EscapeString(p.title))
	y += panelTitleH
	scale := barScale(p)
	x0 := labelWidth
	for _, br := range p.bars {
		w := scale(br.value)
		fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", x0-8, y+barHeight-5, html.EscapeString(br.label))
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", x0, y, w, barHeight, br.color)
		fmt.Fprintf(b, `<text x="%.1f" y="%d">%s</text>`+"\n", float64(x0)+w+6, y+barHeight-5, html.EscapeString(br.text))
		y += barHeight + barGap
	}
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n", x0, y-len(p.bars)*(barHeight+barGap)-4, x0, y-barGap+4)
	return y
}

// barScale maps values to bar widths: linear from 0 to the largest value,
// or for log panels logarithmic over the decades the values span (at
// least one), with the smallest decade boundary at width 0.
func barScale(p panel) func(float64) float64 {
	maxV := 0.0
	minV := math.Inf(1)
	for _, br := range p.bars {
		maxV = max(maxV, br.value)
		minV = min(minV, br.value)
	}
	if maxV <= 0 {
		return func(float64) float64 { return 0 }
	}
	if !p.log {
		return func(v float64) float64 { return barAreaW * v / maxV }
	}
	lo := math.Floor(math.Log10(minV)) - 0.3 // the smallest value still gets a visible bar
	hi := math.Log10(maxV)
	if hi-lo < 1 {
		lo = hi - 1
	}
	return func(v float64) float64 {
		if v <= 0 {
			return 0
		}
		return max(0, barAreaW*(math.Log10(v)-lo)/(hi-lo))
	}
}
