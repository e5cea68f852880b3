//go:build !race

package lineproto

import (
	"fmt"
	"strings"
	"testing"
)

// The race detector allocates on its own, so these run without it.

func TestNormalizeDoesNotAllocate(t *testing.T) {
	n := newTestNormalizer(t, testDefaults)
	for _, l := range []string{
		"cpu,host=a,cpu=cpu0 usage_user=1.5,usage_system=0.3 1700000000000000000",
		`me\ as,run=r\ x,host=h\,1,z=1,y=2,x=3 f=1i,s="a \"b\" c",b=t`,
		"gpu,rank=3,device=3 util=0.41,mem_used=12345678901i,temp_c=61,power_w=210.5",
		manyTags(40),
	} {
		line := []byte(l)
		dst := make([]byte, 0, 1024)
		allocs := testing.AllocsPerRun(100, func() {
			if _, _, err := n.Normalize(dst[:0], line, Nanosecond, testNow); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("Normalize(%q): got %v allocations, want 0", line, allocs)
		}
	}
}

func TestLinesDoesNotAllocate(t *testing.T) {
	body := []byte("a f=1\r\n# c\n\nb s=\"x\ny\" 1\nc f=2")
	count := 0
	fn := func(int, []byte) error { count++; return nil }
	allocs := testing.AllocsPerRun(100, func() { _ = Lines(body, fn) })
	if allocs != 0 {
		t.Errorf("Lines: got %v allocations, want 0", allocs)
	}
}

func TestAppendStatsDDoesNotAllocate(t *testing.T) {
	dst := make([]byte, 0, 1024)
	line := []byte("lat:1:2|ms|@0.5|#env:prod,role:web,bare,env:x|T1700000000")
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := AppendStatsD(dst[:0], line); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("AppendStatsD: got %v allocations, want 0", allocs)
	}
}

// manyTags is a line with n tags in reverse order, enough to take the
// general sort.
func manyTags(n int) string {
	var b strings.Builder
	b.WriteString("m")
	for i := n; i > 0; i-- {
		fmt.Fprintf(&b, ",k%02d=v", i)
	}
	b.WriteString(" f=1 1")
	return b.String()
}
