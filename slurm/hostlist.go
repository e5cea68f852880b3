// Package slurm is simtel's Slurm glue: parsing of the SLURM_* variables
// and of `scontrol show job -o`, hostlist expansion, and the prolog,
// epilog and job-completion hooks that publish job lifecycle events
// (package scheduler) for slurm.conf's Prolog=, Epilog= and
// JobCompLoc=. The job-script templates live in examples/, the test
// cluster in scripts/slurm-up.sh.
package slurm

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MaxHosts bounds how many names ExpandHostlist produces, so that a
// hostlist such as n[0-999999999] is an error rather than an allocation
// of gigabytes.
const MaxHosts = 1 << 17

// ExpandHostlist expands a Slurm hostlist expression into host names, in
// order, keeping duplicates:
//
//	n[1-3,7]        n1 n2 n3 n7
//	gpu-[01-04]     gpu-01 gpu-02 gpu-03 gpu-04   (zero padding kept)
//	a1,b[2-3]       a1 b2 b3
//	r[1-2]n[01-02]  r1n01 r1n02 r2n01 r2n02       (several ranges: every combination)
//	n[8-10]         n8 n9 n10
//
// A range's width is that of its lower bound when the lower bound has a
// leading zero (Slurm's rule). Whitespace around names is ignored; an
// empty expression gives no hosts.
func ExpandHostlist(expr string) ([]string, error) {
	var out []string
	for _, item := range splitTop(expr) {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		names, err := expandItem(item, MaxHosts-len(out))
		if err != nil {
			return nil, fmt.Errorf("hostlist %q: %w", expr, err)
		}
		out = append(out, names...)
	}
	return out, nil
}

// splitTop splits at commas outside brackets. Unbalanced brackets are left
// for expandItem to report.
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

var errTooMany = fmt.Errorf("expands to more than %d hosts", MaxHosts)

// expandItem expands one name with any number of bracket groups.
func expandItem(item string, budget int) ([]string, error) {
	open := strings.IndexByte(item, '[')
	if open < 0 {
		if strings.IndexByte(item, ']') >= 0 {
			return nil, fmt.Errorf("%q has a ']' without '['", item)
		}
		if budget < 1 {
			return nil, errTooMany
		}
		return []string{item}, nil
	}
	close := strings.IndexByte(item[open:], ']')
	if close < 0 {
		return nil, fmt.Errorf("%q has a '[' without ']'", item)
	}
	close += open
	prefix, body, rest := item[:open], item[open+1:close], item[close+1:]
	if strings.ContainsAny(prefix, "]") || strings.ContainsAny(body, "[") {
		return nil, fmt.Errorf("%q has nested or unbalanced brackets", item)
	}
	values, err := expandRanges(body, budget)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", item, err)
	}
	// The rest may hold more bracket groups: r[1-2]n[1-2].
	tails := []string{""}
	if rest != "" {
		tails, err = expandItem(rest, budget)
		if err != nil {
			return nil, err
		}
	}
	if len(values)*len(tails) > budget {
		return nil, errTooMany
	}
	out := make([]string, 0, len(values)*len(tails))
	for _, v := range values {
		for _, t := range tails {
			out = append(out, prefix+v+t)
		}
	}
	return out, nil
}

// expandRanges expands "1-3,07,10-12" into its numbers as strings.
func expandRanges(body string, budget int) ([]string, error) {
	if strings.TrimSpace(body) == "" {
		return nil, errors.New("empty brackets")
	}
	var out []string
	for part := range strings.SplitSeq(body, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		if !isRange {
			hi = lo
		}
		a, err := parseBound(lo)
		if err != nil {
			return nil, fmt.Errorf("range %q: %w", part, err)
		}
		b, err := parseBound(hi)
		if err != nil {
			return nil, fmt.Errorf("range %q: %w", part, err)
		}
		if b < a {
			return nil, fmt.Errorf("range %q goes down", part)
		}
		if b-a >= uint64(budget-len(out)) {
			return nil, errTooMany
		}
		width := 0
		if len(lo) > 1 && lo[0] == '0' {
			width = len(lo)
		}
		for n := a; n <= b; n++ {
			s := strconv.FormatUint(n, 10)
			if len(s) < width {
				s = strings.Repeat("0", width-len(s)) + s
			}
			out = append(out, s)
		}
	}
	return out, nil
}

func parseBound(s string) (uint64, error) {
	if s == "" {
		return 0, errors.New("missing number")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%q is not a number", s)
		}
	}
	if len(s) > 18 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return strconv.ParseUint(s, 10, 64)
}
