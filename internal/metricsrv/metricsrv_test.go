package metricsrv

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/simtel/simtel/internal/testutil"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// A server answers /metrics, /healthz and its extra handlers until its
// context ends, then stops listening; an address in use is an error.
func TestServe(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "simtel_test_total", Help: "A test counter."})
	reg.MustRegister(c)
	c.Add(3)
	addr := testutil.FreePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	wait, err := Serve(ctx, addr, reg, slog.New(slog.DiscardHandler), func(m *http.ServeMux) {
		m.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ready\n")) })
	})
	if err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, "http://"+addr+"/metrics"); code != 200 || !strings.Contains(body, "simtel_test_total 3") {
		t.Errorf("/metrics: %d %q", code, body)
	}
	for path, want := range map[string]string{"/healthz": "ok\n", "/readyz": "ready\n"} {
		if code, body := get(t, "http://"+addr+path); code != 200 || body != want {
			t.Errorf("%s: %d %q, want 200 %q", path, code, body, want)
		}
	}
	if _, err := Serve(ctx, addr, reg, slog.New(slog.DiscardHandler), nil); err == nil {
		t.Error("a second server on the same address started")
	}
	cancel()
	wait()
	if _, err := http.Get("http://" + addr + "/healthz"); err == nil {
		t.Error("the server still answers after its context ended")
	}
}
