//go:build unix

package fdlimit

import (
	"bytes"
	"log/slog"
	"math"
	"strings"
	"testing"
)

// A limit below what is wanted is a warning naming the uses; one at or
// above it an info line with the limit.
func TestLog(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	Log(log, math.MaxUint64, "each test file takes one")
	if out := buf.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "open file limit is low: each test file takes one; raise it") || !strings.Contains(out, "want_at_least=18446744073709551615") {
		t.Errorf("limit below want: %s", out)
	}
	buf.Reset()
	Log(log, 1, "unused")
	if out := buf.String(); !strings.Contains(out, "level=INFO") || !strings.Contains(out, `msg="open file limit" limit=`) {
		t.Errorf("limit above want: %s", out)
	}
}
