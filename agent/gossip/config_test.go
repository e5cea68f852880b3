package gossip

import (
	"strings"
	"testing"

	"github.com/hashicorp/memberlist"
)

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     Config
		wantErr string
		bind    string
	}{
		{name: "defaults", cfg: Config{NodeName: "n1"}, bind: "0.0.0.0:7947"},
		{name: "port zero", cfg: Config{NodeName: "n1", Bind: "127.0.0.1:0"}, bind: "127.0.0.1:0"},
		{name: "no name", cfg: Config{}, wantErr: "node name"},
		{name: "bind hostname", cfg: Config{NodeName: "n1", Bind: "localhost:7947"}, wantErr: "IP address"},
		{name: "bind bad port", cfg: Config{NodeName: "n1", Bind: "127.0.0.1:99999"}, wantErr: "bad port"},
		{name: "advertise bad port", cfg: Config{NodeName: "n1", Advertise: "h:x"}, wantErr: "advertise"},
		{name: "empty seed", cfg: Config{NodeName: "n1", Join: []string{"a:1", " "}}, wantErr: "seed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error about %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || tc.cfg.Bind != tc.bind || tc.cfg.Logger == nil {
				t.Fatalf("got %v, Bind %q, Logger %v; want nil, %q, a logger", err, tc.cfg.Bind, tc.cfg.Logger, tc.bind)
			}
		})
	}
}

func TestLabel(t *testing.T) {
	if a, b := label("run-1"), label("run-2"); a == b {
		t.Fatalf("different runs share label %q", a)
	}
	long := strings.Repeat("x", 300)
	if l := label(long); len(l) > memberlist.LabelMaxSize || l == label(long+"y") {
		t.Fatalf("long cluster names: got %q (%d bytes), want distinct labels of at most %d", l, len(l), memberlist.LabelMaxSize)
	}
}
