package agent

import (
	"testing"
	"time"
)

func TestPacketGatherWait(t *testing.T) {
	const ms = time.Millisecond
	for _, c := range []struct {
		name            string
		gather          time.Duration
		rcvbuf, n, size int
		elapsed, want   time.Duration
	}{
		// 120 datagrams a second: 16 more would take 133 ms.
		{"low rate waits the full gather", 50 * ms, 32 << 20, 6, 6 * 8192, 50 * ms, 50 * ms},
		{"off", -1, 32 << 20, 1, 100, 50 * ms, 0},
		{"unknown buffer", 50 * ms, 0, 1, 100, 50 * ms, 0},
		{"no time passed", 50 * ms, 32 << 20, 1, 100, 0, 0},
		// 1,200 datagrams a second: 16 more arrive in 13.33 ms.
		{"medium rate waits for one read's worth", 50 * ms, 32 << 20, 12, 12 * 8192, 10 * ms, 13333333 * time.Nanosecond},
		// 12,000 a second: 16 arrive in 1.33 ms.
		{"high rate waits briefly", 50 * ms, 32 << 20, 12, 12 * 8192, ms, 1333333 * time.Nanosecond},
		// 120,000 a second: under a millisecond, read at once.
		{"very high rate reads at once", 50 * ms, 32 << 20, 12, 12 * 100, 100 * time.Microsecond, 0},
		// 200 datagrams a second of 63 KiB (12.5 MiB/s as the kernel
		// counts) into 1 MiB: a quarter fills in 20 ms, before 16 more
		// datagrams (80 ms) or the gather time.
		{"cut to the buffer", 50 * ms, 1 << 20, 2, 2 * (63 << 10), 10 * ms, 20 * ms},
	} {
		got := packetGatherWait(c.gather, c.rcvbuf, c.n, c.size, c.elapsed)
		if diff := got - c.want; diff < -time.Microsecond || diff > time.Microsecond {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}
