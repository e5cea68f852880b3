package lineproto

import (
	"fmt"
	"math"
	"time"
)

// Precision is the unit of the timestamps of a write, as given by the
// precision parameter of InfluxDB's /write and /api/v2/write. The zero value
// is Nanosecond.
type Precision int

const (
	Nanosecond Precision = iota
	Microsecond
	Millisecond
	Second
	Minute // InfluxDB v1 only ("m")
	Hour   // InfluxDB v1 only ("h")
)

// ParsePrecision parses the precision parameter of a write request. It
// accepts what InfluxDB v1 (/write: n, u, ms, s, m, h; "ns" too) and v2
// (/api/v2/write: ns, us, ms, s) accept; "" means nanoseconds.
func ParsePrecision(s string) (Precision, error) {
	switch s {
	case "", "n", "ns":
		return Nanosecond, nil
	case "u", "us", "µ", "µs":
		return Microsecond, nil
	case "ms":
		return Millisecond, nil
	case "s":
		return Second, nil
	case "m":
		return Minute, nil
	case "h":
		return Hour, nil
	}
	return Nanosecond, fmt.Errorf("invalid precision %q (use ns, us, ms or s)", s)
}

// String returns the v2 spelling of p (ns, us, ms, s), or m and h.
func (p Precision) String() string {
	switch p {
	case Nanosecond:
		return "ns"
	case Microsecond:
		return "us"
	case Millisecond:
		return "ms"
	case Second:
		return "s"
	case Minute:
		return "m"
	case Hour:
		return "h"
	}
	return fmt.Sprintf("Precision(%d)", int(p))
}

// Duration returns the length of one unit of p, or 0 if p is not a
// valid Precision.
func (p Precision) Duration() time.Duration {
	switch p {
	case Nanosecond:
		return time.Nanosecond
	case Microsecond:
		return time.Microsecond
	case Millisecond:
		return time.Millisecond
	case Second:
		return time.Second
	case Minute:
		return time.Minute
	case Hour:
		return time.Hour
	}
	return 0
}

// The range of timestamps InfluxDB stores (models.MinNanoTime and
// MaxNanoTime): the two smallest and the largest int64 are reserved there,
// so a line carrying them would be refused downstream.
const (
	minNanoTime = math.MinInt64 + 2
	maxNanoTime = math.MaxInt64 - 1
)

// toNanos converts ts, in units of d nanoseconds, to nanoseconds. It
// reports false if the result is outside InfluxDB's time range.
func toNanos(ts int64, d int64) (int64, bool) {
	if d != 1 {
		if ts > maxNanoTime/d || ts < minNanoTime/d {
			return 0, false
		}
		ts *= d
	}
	if ts < minNanoTime || ts > maxNanoTime {
		return 0, false
	}
	return ts, true
}

// truncNanos rounds ns down to a multiple of d (toward negative infinity),
// as InfluxDB does with the receive time of a line without timestamp.
func truncNanos(ns, d int64) int64 {
	if d <= 1 {
		return ns
	}
	r := ns % d
	if r < 0 {
		r += d
	}
	return ns - r
}
