package retention

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/simtel/simtel/lake/catalog"
)

// CheckKnown refuses a policy for a measurement or topic (scope
// ScopeMeasurement or ScopeTopic) the lake has no data of, naming those it
// has: a typo would otherwise set a policy nothing follows. A rollup name
// passes, for Set to say which base name to use.
func CheckKnown(snap *catalog.Snapshot, scope, name string) error {
	var known []string
	for _, e := range snap.Entries {
		if scope == ScopeTopic {
			known = append(known, e.Topic)
			continue
		}
		for _, o := range e.Objects {
			if o.Measurement != "" {
				_, base := Classify(o.Measurement)
				known = append(known, base)
			}
		}
	}
	slices.Sort(known)
	known = slices.Compact(known)
	if slices.Contains(known, name) {
		return nil
	}
	if _, base := Classify(name); base != name {
		return nil
	}
	list := strings.Join(known, ", ")
	if len(known) > 20 {
		list = strings.Join(known[:20], ", ") + ", …"
	}
	if list == "" {
		list = "none yet"
	}
	return fmt.Errorf("the lake has no data of %s %q (it has: %s)", scope, name, list)
}

// Describe says the policy's scope and the tiers it sets: "measurement cpu:
// raw 30d, 1m 2y", "the lake: inherited".
func (p Policy) Describe() string {
	scope := p.Scope + " " + p.Name
	if p.Scope == ScopeLake {
		scope = "the lake"
	}
	var parts []string
	for _, t := range Tiers {
		if v, ok := p.Keep[t]; ok {
			parts = append(parts, string(t)+" "+v)
		}
	}
	if len(parts) == 0 {
		return scope + ": inherited"
	}
	return scope + ": " + strings.Join(parts, ", ")
}

// Row is one line of what holds: a scope and, by tier name, the
// retention it gives (FormatKeep's form).
type Row struct {
	Scope string            `json:"scope"` // default, lake, topic, measurement, effective
	Name  string            `json:"name,omitempty"`
	Keep  map[string]string `json:"keep"`
}

// Rows are the built-in defaults, every stored policy, and for each
// measurement with visible data in snap the retention that holds for each
// tier it has (scope "effective").
func Rows(snap *catalog.Snapshot, ps *Policies) []Row {
	def := map[string]string{}
	for tier, d := range Defaults {
		def[string(tier)] = FormatKeep(d)
	}
	rows := []Row{{Scope: "default", Keep: def}}
	for _, p := range ps.Stored {
		keep := map[string]string{}
		for tier, v := range p.Keep {
			keep[string(tier)] = v
		}
		rows = append(rows, Row{Scope: p.Scope, Name: p.Name, Keep: keep})
	}
	tiersOf := map[string]map[Tier]bool{} // by base measurement
	topicsOf := map[string][]string{}     // by measurement
	for _, e := range snap.Entries {
		for _, o := range e.Objects {
			if o.Measurement == "" {
				continue
			}
			tier, base := Classify(o.Measurement)
			if tiersOf[base] == nil {
				tiersOf[base] = map[Tier]bool{}
			}
			tiersOf[base][tier] = true
			if !slices.Contains(topicsOf[o.Measurement], e.Topic) {
				topicsOf[o.Measurement] = append(topicsOf[o.Measurement], e.Topic)
			}
		}
	}
	visible := map[string]bool{}
	for _, o := range snap.Objects(catalog.Filter{}) {
		visible[o.Measurement] = true
	}
	for _, base := range slices.Sorted(maps.Keys(tiersOf)) {
		keep := map[string]string{}
		for tier := range tiersOf[base] {
			name := Measurement(tier, base)
			if !visible[name] {
				continue // everything of it expired already
			}
			m := base
			if tier == TierSummary {
				m = ""
			}
			keep[string(tier)] = FormatKeep(ps.Keep(tier, m, topicsOf[name]))
		}
		if len(keep) > 0 {
			rows = append(rows, Row{Scope: "effective", Name: base, Keep: keep})
		}
	}
	return rows
}
