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
		// 120 datagrams of 8 KiB a second into 32 MiB: a quarter fills
		// in 7 s.
		{"low rate waits the full gather", 200 * ms, 32 << 20, 6, 6 * 8192, 50 * ms, 200 * ms},
		{"off", -1, 32 << 20, 1, 100, 50 * ms, 0},
		{"unknown buffer", 200 * ms, 0, 1, 100, 50 * ms, 0},
		{"no time passed", 200 * ms, 32 << 20, 1, 100, 0, 0},
		// 1,200 a second (100k lines/s): 256 arrive in 213 ms.
		{"medium rate waits the full gather", 200 * ms, 32 << 20, 12, 12 * 8192, 10 * ms, 200 * ms},
		// 12,000 a second: 256 arrive in 21 ms (a quarter of the buffer
		// would take 76 ms).
		{"high rate waits for 256 datagrams", 200 * ms, 32 << 20, 12, 12 * 8192, ms, 21333333 * time.Nanosecond},
		// 12,000 a second into 4 MiB: a quarter fills in 9.5 ms.
		{"high rate, small buffer", 200 * ms, 4 << 20, 12, 12 * 8192, ms, 9481 * time.Microsecond},
		// 1.2 million tiny datagrams a second into 208 KiB: under a
		// millisecond, read at once.
		{"very high rate reads at once", 200 * ms, 208 << 10, 12, 12 * 100, 10 * time.Microsecond, 0},
		// 200 datagrams a second of 63 KiB (12.5 MiB/s as the kernel
		// counts) into 1 MiB: a quarter fills in 20 ms.
		{"cut to the buffer", 200 * ms, 1 << 20, 2, 2 * (63 << 10), 10 * ms, 20 * ms},
	} {
		got := packetGatherWait(c.gather, c.rcvbuf, c.n, c.size, c.elapsed)
		if diff := got - c.want; diff < -time.Microsecond || diff > time.Microsecond {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}
