package retention_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/simtel/simtel/lake/retention"
	"github.com/simtel/simtel/lake/store/storetest"
)

func TestParseKeep(t *testing.T) {
	const day = 24 * time.Hour
	for _, c := range []struct {
		in   string
		want time.Duration
		err  string
	}{
		{"30d", 30 * day, ""},
		{"12w", 84 * day, ""},
		{"2y", 730 * day, ""},
		{"36h", 36 * time.Hour, ""},
		{"forever", retention.Forever, ""},
		{"off", retention.Forever, ""},
		{"30x", 0, "is not a retention"},
		{"-5d", 0, "is negative"},
		{"-1h", 0, "is negative"},
		{"0d", 0, "is zero"},
		{"10s", 0, "shorter than a minute"},
		{"", 0, "is not a retention"},
		{"99999999999y", 0, "too long"},
	} {
		got, err := retention.ParseKeep(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseKeep(%q) = %v, %v; want an error saying %q", c.in, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ParseKeep(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
		if back, _ := retention.ParseKeep(retention.FormatKeep(got)); back != got {
			t.Errorf("FormatKeep(%v) = %q reads back as %v", got, retention.FormatKeep(got), back)
		}
	}
}

// A measurement's policy wins over its topic's, a topic's over the lake's,
// the lake's over the defaults; "inherit" unsets a tier.
func TestPolicyPrecedence(t *testing.T) {
	ctx := context.Background()
	st := storetest.Dir(t)
	set := func(scope, name string, keep map[retention.Tier]string) {
		t.Helper()
		if _, err := retention.Set(ctx, st, scope, name, keep, now); err != nil {
			t.Fatal(err)
		}
	}
	set(retention.ScopeLake, "", map[retention.Tier]string{retention.TierRaw: "60d", retention.TierSummary: "10y"})
	set(retention.ScopeTopic, "telemetry", map[retention.Tier]string{retention.TierRaw: "14d", retention.Tier1h: "2y"})
	set(retention.ScopeTopic, "other", map[retention.Tier]string{retention.TierRaw: "20d"})
	set(retention.ScopeMeasurement, "cpu", map[retention.Tier]string{retention.TierRaw: "7d", retention.Tier10s: "30d"})
	set(retention.ScopeMeasurement, "gpu", map[retention.Tier]string{retention.Tier10s: "30d"})
	set(retention.ScopeMeasurement, "gpu", map[retention.Tier]string{retention.Tier10s: "inherit", retention.Tier1m: "1y"})
	ps, err := retention.LoadPolicies(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	const day = 24 * time.Hour
	for _, c := range []struct {
		tier   retention.Tier
		m      string
		topics []string
		want   time.Duration
	}{
		{retention.TierRaw, "cpu", []string{"telemetry"}, 7 * day},
		{retention.TierRaw, "mem", []string{"telemetry"}, 14 * day},
		{retention.TierRaw, "mem", []string{"telemetry", "other"}, 20 * day}, // the longest
		{retention.TierRaw, "mem", []string{"logs"}, 60 * day},
		{retention.Tier10s, "cpu", []string{"rollup_10s"}, 30 * day},
		{retention.Tier10s, "gpu", []string{"rollup_10s"}, 90 * day}, // inherited again
		{retention.Tier1m, "gpu", nil, 365 * day},
		{retention.Tier1h, "cpu", []string{"telemetry"}, 730 * day},
		{retention.Tier1h, "cpu", []string{"rollup_1h"}, retention.Forever},
		{retention.TierSummary, "runs", nil, 3650 * day},
	} {
		if got := ps.Keep(c.tier, c.m, c.topics); got != c.want {
			t.Errorf("Keep(%s, %q, %v) = %v, want %v", c.tier, c.m, c.topics, got, c.want)
		}
	}
	for _, c := range []struct {
		scope, name string
		keep        map[retention.Tier]string
		err         string
	}{
		{retention.ScopeMeasurement, "cpu", map[retention.Tier]string{retention.TierRaw: "30x"}, "--raw: retention \"30x\""},
		{retention.ScopeMeasurement, "cpu", map[retention.Tier]string{retention.TierRaw: "-3d"}, "negative"},
		{retention.ScopeMeasurement, "rollup_1m.cpu", map[retention.Tier]string{retention.Tier1m: "3d"}, "on measurement \"cpu\""},
		{retention.ScopeMeasurement, "cpu", map[retention.Tier]string{retention.TierSummary: "3d"}, "per lake or topic"},
		{retention.ScopeMeasurement, "", map[retention.Tier]string{retention.TierRaw: "3d"}, "needs the measurement's name"},
		{"bucket", "x", map[retention.Tier]string{retention.TierRaw: "3d"}, "unknown retention scope"},
		{retention.ScopeLake, "", map[retention.Tier]string{"5m": "3d"}, "unknown tier"},
	} {
		if _, err := retention.Set(ctx, st, c.scope, c.name, c.keep, now); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("Set(%s, %q, %v) = %v; want an error saying %q", c.scope, c.name, c.keep, err, c.err)
		}
	}
}

func TestClassify(t *testing.T) {
	for in, want := range map[string][2]string{
		"cpu": {"raw", "cpu"}, "rollup_10s.cpu": {"10s", "cpu"}, "rollup_1m.gpu.util": {"1m", "gpu.util"},
		"rollup_1h.cpu": {"1h", "cpu"}, "summary.runs": {"summary", "runs"}, "gpu.util": {"raw", "gpu.util"},
	} {
		tier, base := retention.Classify(in)
		if string(tier) != want[0] || base != want[1] {
			t.Errorf("Classify(%q) = %s, %q; want %s, %q", in, tier, base, want[0], want[1])
		}
	}
}
