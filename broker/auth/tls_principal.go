package auth

import (
	"crypto/x509"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// PrincipalMapping turns a client certificate into a principal, by rules
// written as Kafka's ssl.principal.mapping.rules:
//
//	RULE:^CN=([^,]*),OU=jobs,.*$/job-$1/L,RULE:^CN=(.*)$/$1/,DEFAULT
//
// Each RULE:pattern/replacement/ is tried in turn against the whole
// subject in RFC 2253 form ("CN=alice,OU=eng,O=hpc"); the first pattern
// that matches all of it gives the user name (the replacement with $1,
// ${name} for its groups; L or U after the last slash lowers or uppers
// it). DEFAULT is the subject's common name. Unlike Kafka, whose DEFAULT
// is the whole subject, DEFAULT is also what no rules at all means. A
// backslash escapes a slash or comma inside a pattern or replacement.
type PrincipalMapping struct {
	rules []mappingRule
}

type mappingRule struct {
	re   *regexp.Regexp // nil: DEFAULT
	repl string
	fold byte // 0, 'L' or 'U'
}

// ErrNoMappingRule is returned by PrincipalMapping.Principal when no rule
// matches a certificate's subject: the connection is refused.
var ErrNoMappingRule = errors.New("no principal mapping rule matches the client certificate's subject")

// ParsePrincipalMapping reads rules; empty means DEFAULT alone.
func ParsePrincipalMapping(s string) (*PrincipalMapping, error) {
	m := &PrincipalMapping{}
	rest := strings.TrimSpace(s)
	for rest != "" {
		switch {
		case strings.HasPrefix(rest, "DEFAULT"):
			m.rules = append(m.rules, mappingRule{})
			rest = rest[len("DEFAULT"):]
		case strings.HasPrefix(rest, "RULE:"):
			pat, after, ok := cutEscaped(rest[len("RULE:"):])
			if !ok {
				return nil, fmt.Errorf("principal mapping rule %q has no / after its pattern", rest)
			}
			repl, after, ok := cutEscaped(after)
			if !ok {
				return nil, fmt.Errorf("principal mapping rule %q has no / after its replacement", rest)
			}
			re, err := regexp.Compile("^(?:" + pat + ")$")
			if err != nil {
				return nil, fmt.Errorf("principal mapping pattern %q: %w", pat, err)
			}
			r := mappingRule{re: re, repl: unescape(repl)}
			if after != "" && (after[0] == 'L' || after[0] == 'U') {
				r.fold, after = after[0], after[1:]
			}
			m.rules = append(m.rules, r)
			rest = after
		default:
			return nil, fmt.Errorf("principal mapping rules: %q is neither RULE:pattern/replacement/[LU] nor DEFAULT", rest)
		}
		rest = strings.TrimSpace(rest)
		if rest != "" {
			if rest[0] != ',' {
				return nil, fmt.Errorf("principal mapping rules: expected a comma before %q", rest)
			}
			rest = strings.TrimSpace(rest[1:])
		}
	}
	if len(m.rules) == 0 {
		m.rules = []mappingRule{{}}
	}
	return m, nil
}

// cutEscaped splits s at its first slash not preceded by a backslash.
// The part before keeps its escapes (a regexp takes \/ and \, as the
// characters themselves).
func cutEscaped(s string) (before, after string, ok bool) {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '/':
			return s[:i], s[i+1:], true
		}
	}
	return "", "", false
}

// unescape drops the backslash of \x.
func unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Principal is the principal of a client certificate.
func (m *PrincipalMapping) Principal(cert *x509.Certificate) (Principal, error) {
	dn := cert.Subject.String()
	for _, r := range m.rules {
		if r.re == nil {
			if cn := cert.Subject.CommonName; cn != "" {
				return User(cn), nil
			}
			continue
		}
		idx := r.re.FindStringSubmatchIndex(dn)
		if idx == nil {
			continue
		}
		name := string(r.re.ExpandString(nil, r.repl, dn, idx))
		switch r.fold {
		case 'L':
			name = strings.ToLower(name)
		case 'U':
			name = strings.ToUpper(name)
		}
		if name != "" {
			return User(name), nil
		}
	}
	return "", fmt.Errorf("%w: %q", ErrNoMappingRule, dn)
}
