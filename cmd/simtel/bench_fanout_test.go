package main

import "testing"

func TestParseRate(t *testing.T) {
	for in, want := range map[string]float64{"": 0, "1gbit": 1e9, "100mbit": 1e8, "2.5gbit": 2.5e9, "800kbit": 8e5, "1e9": 1e9, "64bit": 64} {
		if got, err := parseRate(in); err != nil || got != want {
			t.Errorf("parseRate(%q) = %g, %v; want %g", in, got, err, want)
		}
	}
	for _, in := range []string{"gbit", "-1gbit", "0", "1gbps", "fast"} {
		if got, err := parseRate(in); err == nil {
			t.Errorf("parseRate(%q) = %g, want an error", in, got)
		}
	}
}
