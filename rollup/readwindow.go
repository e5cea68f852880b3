package rollup

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/simtel/simtel/internal/lineproto"
)

// WindowLine is one record of a rollup topic read back: one series in one
// window (appendLine writes it).
type WindowLine struct {
	// Resolution is the window's, one of Resolutions.
	Resolution Resolution
	// Measurement is the series' measurement, without the rollup_<res>.
	// prefix of the line.
	Measurement string
	Tags        map[string]string
	// Start is the window's start.
	Start time.Time
	// Fields are the series' fields in the window, sorted by name.
	Fields []FieldStats
}

// FieldStats are one field's aggregates in one window. The statistics are
// NaN when the line has none (no finite numeric value); Last is a number,
// a string or a boolean, or nil.
type FieldStats struct {
	Field                              string
	Count, Nonfinite                   int64
	Min, Max, Sum, Mean, P50, P95, P99 float64
	Last                               any
}

// windowSuffixes are the column suffixes of a rollup line's fields.
var windowSuffixes = []string{"count", "nonfinite", "min", "max", "sum", "mean", "last", "p50", "p95", "p99"}

// ParseWindowLine parses a record value of a rollup topic; dec is reused.
func ParseWindowLine(dec *lineproto.Decoder, line []byte) (WindowLine, error) {
	if err := dec.Decode(bytes.TrimSuffix(line, []byte{'\n'})); err != nil {
		return WindowLine{}, fmt.Errorf("rollup line: %w", err)
	}
	var w WindowLine
	ns, meas, _ := strings.Cut(string(dec.Measurement), ".")
	for _, r := range Resolutions {
		if r.Topic() == ns {
			w.Resolution = r
		}
	}
	if w.Resolution.Name == "" || meas == "" {
		return WindowLine{}, fmt.Errorf("rollup line: measurement %q is not rollup_<resolution>.<measurement>", dec.Measurement)
	}
	w.Measurement = meas
	w.Start = time.Unix(0, dec.Time).UTC()
	w.Tags = make(map[string]string, len(dec.Tags))
	for _, t := range dec.Tags {
		w.Tags[string(t.Key)] = string(t.Value)
	}
	byName := map[string]*FieldStats{}
	for i := range dec.Fields {
		f := &dec.Fields[i]
		k := string(f.Key)
		j := strings.LastIndexByte(k, '_')
		if j <= 0 || !slices.Contains(windowSuffixes, k[j+1:]) {
			continue // not a column of appendLine
		}
		name, suffix := k[:j], k[j+1:]
		s := byName[name]
		if s == nil {
			nan := math.NaN()
			s = &FieldStats{Field: name, Min: nan, Max: nan, Sum: nan, Mean: nan, P50: nan, P95: nan, P99: nan}
			byName[name] = s
		}
		switch suffix {
		case "count":
			s.Count = f.Int()
		case "nonfinite":
			s.Nonfinite = f.Int()
		case "last":
			s.Last = f.Interface()
		default:
			*s.stat(suffix) = f.Float()
		}
	}
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		w.Fields = append(w.Fields, *byName[name])
	}
	return w, nil
}

// stat is the statistic a column suffix other than count, nonfinite and
// last names.
func (s *FieldStats) stat(suffix string) *float64 {
	switch suffix {
	case "min":
		return &s.Min
	case "max":
		return &s.Max
	case "sum":
		return &s.Sum
	case "mean":
		return &s.Mean
	case "p50":
		return &s.P50
	case "p95":
		return &s.P95
	}
	return &s.P99
}
