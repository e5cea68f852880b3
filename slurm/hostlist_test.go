package slurm

import (
	"reflect"
	"strings"
	"testing"
)

func TestExpandHostlist(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"n1", []string{"n1"}},
		{"n[1-3,7]", []string{"n1", "n2", "n3", "n7"}},
		{"gpu-[01-04]", []string{"gpu-01", "gpu-02", "gpu-03", "gpu-04"}},
		{"a1,b[2-3]", []string{"a1", "b2", "b3"}},
		{"n[8-10]", []string{"n8", "n9", "n10"}},
		{"n[098-101]", []string{"n098", "n099", "n100", "n101"}},
		{"r[1-2]n[01-02]", []string{"r1n01", "r1n02", "r2n01", "r2n02"}},
		{"r[1-2]-n[1,3]-gpu", []string{"r1-n1-gpu", "r1-n3-gpu", "r2-n1-gpu", "r2-n3-gpu"}},
		{"n[3],m[0]", []string{"n3", "m0"}},
		{" n1 , n2 ", []string{"n1", "n2"}},
		{"n1,,n2", []string{"n1", "n2"}},
		{"[1-2]", []string{"1", "2"}},
		{"node.cluster,n[1-2].ib", []string{"node.cluster", "n1.ib", "n2.ib"}},
	} {
		got, err := ExpandHostlist(tc.in)
		if err != nil {
			t.Errorf("ExpandHostlist(%q): %v", tc.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ExpandHostlist(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestExpandHostlistErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"n[1-3", "'[' without ']'"},
		{"n1-3]", "']' without '['"},
		{"n[3-1]", "goes down"},
		{"n[]", "empty brackets"},
		{"n[a-b]", `"a" is not a number`},
		{"n[1-]", "missing number"},
		{"n[[1-2]]", "nested or unbalanced"},
		{"n[0-999999999]", "more than"},
		{"a[0-999]b[0-999]", "more than"},
		{"n[1-99999999999999999999]", "too large"},
	} {
		_, err := ExpandHostlist(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ExpandHostlist(%q): got error %v, want one containing %q", tc.in, err, tc.want)
		}
	}
}

// FuzzExpandHostlist: any input gives hosts or an error, never a panic or
// more than MaxHosts names; names never contain brackets or commas; a
// plain list of valid names expands to itself.
func FuzzExpandHostlist(f *testing.F) {
	for _, s := range []string{"n[1-3,7]", "gpu-[01-04]", "a1,b[2-3]", "r[1-2]n[01-02]", "n[0-999999]", "[", "]", ",", "n[1-2],[", "a[1-3]b[09-11]c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		hosts, err := ExpandHostlist(s)
		if err != nil {
			return
		}
		if len(hosts) > MaxHosts {
			t.Fatalf("%q expanded to %d hosts", s, len(hosts))
		}
		for _, h := range hosts {
			if strings.ContainsAny(h, "[],") {
				t.Fatalf("%q expanded to name %q", s, h)
			}
		}
		if !strings.ContainsAny(s, "[]") {
			var want []string
			for p := range strings.SplitSeq(s, ",") {
				if p = strings.TrimSpace(p); p != "" {
					want = append(want, p)
				}
			}
			if !reflect.DeepEqual(hosts, want) {
				t.Fatalf("%q: got %q, want %q", s, hosts, want)
			}
		}
	})
}
