// Package retention expires old data from the lake by tier: raw samples,
// each rollup resolution and the run summaries each keep their own number
// of days, per measurement, per topic or for the whole lake.
//
// The policies live in the lake's catalog (_catalog/retention/), so every
// sink and reader of the lake sees the same ones. Apply enforces them in
// three steps:
//
//  1. Plan: every partition — the objects of one measurement, run and day
//     (or of one topic and day for raw and dead-letter objects) — whose day
//     ended at least Keep ago is expired. A day is never cut in half.
//  2. One catalog.Expiration record names every object of every expired
//     partition. It is a single catalog file, written whole, so a reader
//     sees all of them gone or none; from then on Load hides them.
//  3. Once the record is Config.Grace old (readers that loaded the catalog
//     before it have had time to finish), a later Apply deletes the objects
//     and marks the record deleted.
//
// On a lake that also has Iceberg tables (_iceberg/ in the lake) Apply
// needs their catalog (Config.Iceberg, else ErrIceberg): right after step
// 2 the expired objects' data files leave every table in one snapshot per
// table, and step 3 checks again that no table still holds them before
// they are deleted. Older snapshots that still name the files cannot be
// read once they are deleted; simtel lake expire drops those snapshots.
package retention

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/simtel/simtel/lake"
	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/query"
	"github.com/simtel/simtel/lake/store"
)

// Tier is a class of lake data that keeps its own retention.
type Tier string

// The tiers. A measurement's rollups are the measurements rollup_10s.<m>,
// rollup_1m.<m> and rollup_1h.<m>; summaries are the measurements of the
// namespace summary (summary.runs); everything else — telemetry, raw
// topics and dead letters — is raw.
const (
	TierRaw     Tier = "raw"
	Tier10s     Tier = "10s"
	Tier1m      Tier = "1m"
	Tier1h      Tier = "1h"
	TierSummary Tier = "summary"
)

// Tiers lists every tier in display order.
var Tiers = []Tier{TierRaw, Tier10s, Tier1m, Tier1h, TierSummary}

// namespaceOf maps the measurement namespace of a rollup tier.
var namespaceOf = map[Tier]string{Tier10s: "rollup_10s", Tier1m: "rollup_1m", Tier1h: "rollup_1h", TierSummary: "summary"}

// Forever is the Keep of a tier that never expires.
const Forever = time.Duration(math.MaxInt64)

// Defaults is the built-in retention of each tier: raw samples 30 days,
// 10 s rollups 90 days, the coarser rollups and the summaries forever.
var Defaults = map[Tier]time.Duration{
	TierRaw: 30 * day, Tier10s: 90 * day, Tier1m: Forever, Tier1h: Forever, TierSummary: Forever,
}

const day = 24 * time.Hour

// Scopes of a policy, narrowest last: a measurement's policy overrides its
// topic's, which overrides the lake's, which overrides Defaults.
const (
	ScopeLake        = "lake"
	ScopeTopic       = "topic"
	ScopeMeasurement = "measurement"
)

// Policy is the retention set for one scope: Keep holds the tiers set
// there, as written by ParseKeep's inverse (FormatKeep); unset tiers are
// inherited from the wider scope.
type Policy struct {
	Scope   string          `json:"scope"`
	Name    string          `json:"name,omitempty"` // topic or measurement; empty for the lake
	Keep    map[Tier]string `json:"keep"`
	Updated time.Time       `json:"updated"`
}

// Key is the catalog key of the policy of a scope.
func Key(scope, name string) string {
	if scope == ScopeLake {
		return catalog.RetentionPrefix + "lake.json"
	}
	return catalog.RetentionPrefix + scope + "/" + lake.EscapeSegment(name) + ".json"
}

var keepRE = regexp.MustCompile(`^([0-9]+)([dwy])$`)

// ParseKeep reads a retention: N days, weeks or years (30d, 12w, 2y — a
// year is 365 days), a Go duration of at least a minute (36h), or
// "forever" (also "off": retention off). Zero and negative values are
// refused: they would expire everything up to today.
func ParseKeep(s string) (time.Duration, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "forever", "off", "never":
		return Forever, nil
	}
	bad := func(why string) error {
		return fmt.Errorf("retention %q %s: want days, weeks or years (30d, 12w, 2y), a duration (36h) or forever", s, why)
	}
	if strings.HasPrefix(strings.TrimSpace(s), "-") {
		return 0, bad("is negative")
	}
	if m := keepRE.FindStringSubmatch(s); m != nil {
		n, err := strconv.ParseInt(m[1], 10, 64)
		unit := map[string]time.Duration{"d": day, "w": 7 * day, "y": 365 * day}[m[2]]
		if err != nil || n > int64(math.MaxInt64/unit) {
			return 0, bad("is too long")
		}
		if n == 0 {
			return 0, bad("is zero (it would expire every finished day)")
		}
		return time.Duration(n) * unit, nil
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return 0, bad("is not a retention")
	case d < 0:
		return 0, bad("is negative")
	case d < time.Minute:
		return 0, bad("is shorter than a minute")
	}
	return d, nil
}

// FormatKeep writes a retention as ParseKeep reads it.
func FormatKeep(d time.Duration) string {
	switch {
	case d == Forever:
		return "forever"
	case d%(365*day) == 0:
		return strconv.FormatInt(int64(d/(365*day)), 10) + "y"
	case d%day == 0:
		return strconv.FormatInt(int64(d/day), 10) + "d"
	}
	return d.String()
}

// Policies are the retention policies of one lake.
type Policies struct {
	Lake         map[Tier]time.Duration
	Topics       map[string]map[Tier]time.Duration
	Measurements map[string]map[Tier]time.Duration
	// Stored are the policies as read, sorted by scope then name.
	Stored []Policy
}

// LoadPolicies reads every policy of the lake. A policy file that cannot
// be read or parsed is an error: enforcing a partial policy could expire
// what its author meant to keep.
func LoadPolicies(ctx context.Context, st store.Store) (*Policies, error) {
	objs, err := st.List(ctx, catalog.RetentionPrefix)
	if err != nil {
		return nil, fmt.Errorf("cannot list the retention policies of %s: %w", st, err)
	}
	ps := &Policies{Lake: map[Tier]time.Duration{}, Topics: map[string]map[Tier]time.Duration{}, Measurements: map[string]map[Tier]time.Duration{}}
	for _, o := range objs {
		if !strings.HasSuffix(o.Key, ".json") {
			continue
		}
		p, err := readPolicy(ctx, st, o.Key)
		if errors.Is(err, store.ErrNotFound) {
			continue // replaced between list and read: its successor is listed too
		}
		if err != nil {
			return nil, err
		}
		keep, err := p.parse()
		if err != nil {
			return nil, fmt.Errorf("retention policy %s in %s: %w", o.Key, st, err)
		}
		switch p.Scope {
		case ScopeLake:
			ps.Lake = keep
		case ScopeTopic:
			ps.Topics[p.Name] = keep
		case ScopeMeasurement:
			ps.Measurements[p.Name] = keep
		default:
			return nil, fmt.Errorf("retention policy %s in %s has unknown scope %q", o.Key, st, p.Scope)
		}
		ps.Stored = append(ps.Stored, p)
	}
	rank := map[string]int{ScopeLake: 0, ScopeTopic: 1, ScopeMeasurement: 2}
	slices.SortFunc(ps.Stored, func(a, b Policy) int {
		if rank[a.Scope] != rank[b.Scope] {
			return rank[a.Scope] - rank[b.Scope]
		}
		return strings.Compare(a.Name, b.Name)
	})
	return ps, nil
}

func readPolicy(ctx context.Context, st store.Store, key string) (Policy, error) {
	rc, err := st.Get(ctx, key)
	if err != nil {
		return Policy{}, fmt.Errorf("cannot read retention policy %s: %w", key, err)
	}
	defer rc.Close()
	var p Policy
	if err := jsonDecode(rc, &p); err != nil {
		return Policy{}, fmt.Errorf("retention policy %s in %s is corrupt: %w", key, st, err)
	}
	return p, nil
}

func (p Policy) parse() (map[Tier]time.Duration, error) {
	out := map[Tier]time.Duration{}
	for t, s := range p.Keep {
		if !slices.Contains(Tiers, t) {
			return nil, fmt.Errorf("unknown tier %q", t)
		}
		d, err := ParseKeep(s)
		if err != nil {
			return nil, fmt.Errorf("tier %s: %w", t, err)
		}
		out[t] = d
	}
	return out, nil
}

// Keep is the retention of tier for data of measurement m (its base name,
// without a rollup namespace; empty for raw and dead-letter objects) read
// from topics. A measurement's policy wins over its topics', a topic's
// over the lake's; when the topics disagree, the longest retention holds.
func (ps *Policies) Keep(tier Tier, m string, topics []string) time.Duration {
	if tier != TierSummary && m != "" {
		if d, ok := ps.Measurements[m][tier]; ok {
			return d
		}
	}
	var best time.Duration
	found := false
	for _, t := range topics {
		if d, ok := ps.Topics[t][tier]; ok && (!found || d > best) {
			best, found = d, true
		}
	}
	if found {
		return best
	}
	if d, ok := ps.Lake[tier]; ok {
		return d
	}
	return Defaults[tier]
}

// Classify tells the tier of a measurement and its base name:
// rollup_1m.cpu is tier 1m of cpu, summary.runs tier summary of runs, cpu
// tier raw of cpu.
func Classify(measurement string) (Tier, string) {
	if ns, table, ok := query.Namespaced(measurement); ok {
		for t, n := range namespaceOf {
			if n == ns {
				return t, table
			}
		}
	}
	return TierRaw, measurement
}

// Measurement is the name of tier's measurement of base: Measurement(Tier1m,
// "cpu") is rollup_1m.cpu; Classify's inverse.
func Measurement(tier Tier, base string) string {
	if ns, ok := namespaceOf[tier]; ok {
		return ns + "." + base
	}
	return base
}

// Set merges keep into the policy of a scope (creating it) and writes it.
// A tier whose value is "inherit" is removed from the scope. The policy
// written is returned.
//
// Two Set calls on one scope at the same moment: the last one written
// wins whole (a policy file is replaced, never patched in the store).
func Set(ctx context.Context, st store.Store, scope, name string, keep map[Tier]string, now time.Time) (Policy, error) {
	switch scope {
	case ScopeLake:
		if name != "" {
			return Policy{}, fmt.Errorf("the lake's retention policy takes no name (got %q)", name)
		}
	case ScopeTopic, ScopeMeasurement:
		if name == "" {
			return Policy{}, fmt.Errorf("a %s retention policy needs the %s's name", scope, scope)
		}
	default:
		return Policy{}, fmt.Errorf("unknown retention scope %q (want lake, topic or measurement)", scope)
	}
	if scope == ScopeMeasurement {
		if t, base := Classify(name); t != TierRaw {
			return Policy{}, fmt.Errorf("measurement %q is tier %s of %q: set --%s on measurement %q instead", name, t, base, t, base)
		}
		if _, ok := keep[TierSummary]; ok {
			return Policy{}, fmt.Errorf("summaries are kept per lake or topic, not per measurement (%q)", name)
		}
	}
	key := Key(scope, name)
	p, err := readPolicy(ctx, st, key)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return Policy{}, err
	}
	p.Scope, p.Name, p.Updated = scope, name, now.UTC()
	if p.Keep == nil {
		p.Keep = map[Tier]string{}
	}
	for t, s := range keep {
		if !slices.Contains(Tiers, t) {
			return Policy{}, fmt.Errorf("unknown tier %q (want raw, 10s, 1m, 1h or summary)", t)
		}
		if strings.EqualFold(s, "inherit") {
			delete(p.Keep, t)
			continue
		}
		d, err := ParseKeep(s)
		if err != nil {
			return Policy{}, fmt.Errorf("--%s: %w", t, err)
		}
		p.Keep[t] = FormatKeep(d)
	}
	if len(p.Keep) == 0 {
		if err := st.Delete(ctx, key); err != nil {
			return Policy{}, fmt.Errorf("cannot remove retention policy %s: %w", key, err)
		}
		return p, nil
	}
	b, err := jsonEncode(p)
	if err != nil {
		return Policy{}, err
	}
	if err := st.Put(ctx, key, strings.NewReader(string(b)), int64(len(b))); err != nil {
		return Policy{}, fmt.Errorf("cannot write retention policy %s: %w", key, err)
	}
	return p, nil
}
