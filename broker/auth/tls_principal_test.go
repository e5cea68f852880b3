package auth_test

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"testing"

	"github.com/simtel/simtel/broker/auth"
)

func TestPrincipalMapping(t *testing.T) {
	alice := pkix.Name{CommonName: "Alice", OrganizationalUnit: []string{"jobs"}, Organization: []string{"hpc"}}
	noCN := pkix.Name{Organization: []string{"hpc"}}
	for _, tc := range []struct {
		rules   string
		subject pkix.Name
		want    auth.Principal // "": no rule matches
	}{
		{"", alice, "User:Alice"},
		{"DEFAULT", alice, "User:Alice"},
		{`RULE:^CN=([^,]*),OU=jobs,.*$/job-$1/L,DEFAULT`, alice, "User:job-alice"},
		{`RULE:^CN=([^,]*),OU=jobs,.*$/$1/U`, alice, "User:ALICE"},
		{`RULE:^CN=([^,]*),OU=staff,.*$/$1/, DEFAULT`, alice, "User:Alice"},
		{`RULE:^CN=([^,]*),OU=staff,.*$/$1/`, alice, ""},
		{`RULE:^CN=(.*)\,OU=(.*)\,O=hpc$/${2}.$1/`, alice, "User:jobs.Alice"},
		{`RULE:^O=(.*)$/org\/$1/`, noCN, "User:org/hpc"},
		{"DEFAULT", noCN, ""},
	} {
		m, err := auth.ParsePrincipalMapping(tc.rules)
		if err != nil {
			t.Fatalf("ParsePrincipalMapping(%q): %v", tc.rules, err)
		}
		got, err := m.Principal(&x509.Certificate{Subject: tc.subject})
		switch {
		case tc.want == "" && !errors.Is(err, auth.ErrNoMappingRule):
			t.Errorf("rules %q, subject %q: got %q, %v; want ErrNoMappingRule", tc.rules, tc.subject, got, err)
		case tc.want != "" && (err != nil || got != tc.want):
			t.Errorf("rules %q, subject %q: got %q, %v; want %q", tc.rules, tc.subject, got, err, tc.want)
		}
	}
}

func TestParsePrincipalMappingErrors(t *testing.T) {
	for _, rules := range []string{
		"RULE:^CN=(.*)$",      // no slash after the pattern
		"RULE:^CN=(.*)$/$1",   // no slash after the replacement
		"RULE:^CN=((.*)$/$1/", // bad pattern
		"RULE:^CN=(.*)$/$1/X", // neither L nor U, nor a comma
		"DEFAULT RULE:a/b/",   // no comma
		"CN",                  // neither RULE nor DEFAULT
	} {
		if _, err := auth.ParsePrincipalMapping(rules); err == nil {
			t.Errorf("ParsePrincipalMapping(%q) succeeded, want an error", rules)
		}
	}
}
