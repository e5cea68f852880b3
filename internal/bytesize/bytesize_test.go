package bytesize

import "testing"

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		bad  bool
	}{
		{"64MiB", 64 << 20, false},
		{"2 MiB", 2 << 20, false},
		{"1.5GiB", 3 << 29, false},
		{"1048576", 1 << 20, false},
		{"512B", 512, false},
		{"4KiB", 4096, false},
		{"100MB", 100e6, false},
		{"1kB", 1000, false},
		{"128 MB", 128e6, false},
		{"1GiB", 1 << 30, false},
		{"0", 0, false},
		{"", 0, true},
		{"MiB", 0, true},
		{"64 mib", 0, true},
		{"-1", 0, true},
		{"1.2.3MiB", 0, true},
		{"2PiB", 0, true},
		{"999999999GiB", 0, true},
	} {
		got, err := Parse(c.in)
		if c.bad {
			if err == nil {
				t.Errorf("Parse(%q) = %d, want an error", c.in, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("Parse(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
}
