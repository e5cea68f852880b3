package lineproto

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

type numbered struct {
	n    int
	line string
}

func collect(t *testing.T, body string) []numbered {
	t.Helper()
	var got []numbered
	err := Lines([]byte(body), func(n int, line []byte) error {
		got = append(got, numbered{n, string(line)})
		return nil
	})
	if err != nil {
		t.Fatalf("Lines(%q): %v", body, err)
	}
	return got
}

func TestLines(t *testing.T) {
	tests := []struct {
		name string
		body string
		want []numbered
	}{
		{"empty", "", nil},
		{"one without newline", "a f=1", []numbered{{1, "a f=1"}}},
		{"one with newline", "a f=1\n", []numbered{{1, "a f=1"}}},
		{"lf", "a f=1\nb f=2\nc f=3", []numbered{{1, "a f=1"}, {2, "b f=2"}, {3, "c f=3"}}},
		{"crlf", "a f=1\r\nb f=2\r\n", []numbered{{1, "a f=1"}, {2, "b f=2"}}},
		{"mixed endings", "a f=1\r\nb f=2\nc f=3\r\n", []numbered{{1, "a f=1"}, {2, "b f=2"}, {3, "c f=3"}}},
		{"final cr", "a f=1\r", []numbered{{1, "a f=1"}}},
		{"blank lines", "\n\na f=1\n\n\r\n  \n\t\nb f=2\n\n", []numbered{{3, "a f=1"}, {8, "b f=2"}}},
		{"comments", "# header\na f=1\n  # indented\n#\nb f=2 # not a comment\n",
			[]numbered{{2, "a f=1"}, {5, "b f=2 # not a comment"}}},
		{"comment with quote and equals", "# x=\"open\nm f=1\n", []numbered{{2, "m f=1"}}},
		{"spaces kept for Normalize", "  a f=1  \n", []numbered{{1, "  a f=1  "}}},
		{"newline in string", "a s=\"x\ny\" 1\nb f=2\n", []numbered{{1, "a s=\"x\ny\" 1"}, {3, "b f=2"}}},
		{"crlf in string", "a s=\"x\r\ny\"\r\nb f=2\r\n", []numbered{{1, "a s=\"x\r\ny\""}, {3, "b f=2"}}},
		{"several newlines in strings", "a s=\"1\n2\",t=\"3\n\n4\" 5\nb f=1",
			[]numbered{{1, "a s=\"1\n2\",t=\"3\n\n4\" 5"}, {5, "b f=1"}}},
		{"escaped quote in string", "a s=\"x\\\"\ny\"\nb f=1", []numbered{{1, "a s=\"x\\\"\ny\""}, {3, "b f=1"}}},
		{"escaped backslash ends string", "a s=\"x\\\\\"\nb f=1", []numbered{{1, "a s=\"x\\\\\""}, {2, "b f=1"}}},
		{"quote in tag is no string", "a,t=\"x f=1\nb f=\"y\"\n", []numbered{{1, "a,t=\"x f=1"}, {2, "b f=\"y\""}}},
		{"quote in measurement is no string", "a\"b f=1\nc f=2", []numbered{{1, "a\"b f=1"}, {2, "c f=2"}}},
		{"quote in field key is no string", "a x\"y=1\nc f=2", []numbered{{1, "a x\"y=1"}, {2, "c f=2"}}},
		{"escaped space in measurement", "a\\ b s=\"x\ny\"\nc f=1", []numbered{{1, "a\\ b s=\"x\ny\""}, {3, "c f=1"}}},
		{"quote in timestamp section", "a f=1 \"x\nb f=2", []numbered{{1, "a f=1 \"x"}, {2, "b f=2"}}},
		{"unterminated string ends at newline", "a s=\"x\nb f=1\nc f=2", []numbered{{1, "a s=\"x"}, {2, "b f=1"}, {3, "c f=2"}}},
		{"stray quote pairs with the next string", "a s=\"x\nb s=\"y\"\nc f=2", []numbered{{1, "a s=\"x\nb s=\"y\""}, {3, "c f=2"}}},
		{"malformed after string", "a s=\"x\ny\"z\nb f=1\nc f=2", []numbered{{1, "a s=\"x\ny\"z"}, {3, "b f=1"}, {4, "c f=2"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := collect(t, tt.body); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Lines(%q)\n got %v\nwant %v", tt.body, got, tt.want)
			}
		})
	}
}

func TestLinesStopsAtError(t *testing.T) {
	stop := errors.New("stop")
	calls := 0
	err := Lines([]byte("a f=1\nb f=2\nc f=3\n"), func(n int, line []byte) error {
		calls++
		if n == 2 {
			return stop
		}
		return nil
	})
	if err != stop || calls != 2 {
		t.Errorf("got error %v after %d calls, want %v after 2", err, calls, stop)
	}
}

// Rows with quotes take the slow path; after a string that is never closed
// each must still cost only itself (a re-scan to the end per row would be
// 200,000 rows × 2.6 MB).
func TestLinesSlowPathIsLinear(t *testing.T) {
	const rows = 200000
	body := []byte("m s=\"open\n" + strings.Repeat("m k\\\"=1,s=\\\"x\n", rows))
	start := time.Now()
	count := 0
	if err := Lines(body, func(int, []byte) error { count++; return nil }); err != nil {
		t.Fatal(err)
	}
	if count != rows+1 {
		t.Errorf("got %d lines, want %d", count, rows+1)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Lines took %v for %d bytes, want linear time", d, len(body))
	}
}

// The way the HTTP layer uses the package: keep the valid lines, report the
// first bad one.
func TestBodyWithBadLine(t *testing.T) {
	n := newTestNormalizer(t, testDefaults)
	body := "cpu v=1 1\ncpu v=oops 2\n\ncpu v=3 3\ncpu v= 4\n"
	var out []byte
	var kept []string
	var first *LineError
	err := Lines([]byte(body), func(no int, line []byte) error {
		start := len(out)
		var err error
		var s Sample
		out, s, err = n.Normalize(out, line, Nanosecond, testNow)
		if err != nil {
			if first == nil {
				first = NewLineError(no, line, err)
			}
			return nil
		}
		out = append(out, '\n')
		kept = append(kept, fmt.Sprintf("%d@%d", s.Time, start))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"1@0", "3@42"}; !reflect.DeepEqual(kept, want) {
		t.Errorf("got kept %v, want %v", kept, want)
	}
	if first == nil || first.Line != 2 || first.Text != "cpu v=oops 2" || !errors.Is(first, ErrInvalidField) {
		t.Errorf("got first error %#v, want line 2 %q, invalid field format", first, "cpu v=oops 2")
	}
}
