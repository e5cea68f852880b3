package wal

import (
	"fmt"
	"sync"
	"testing"

	"github.com/hashicorp/raft"
)

// BenchmarkStoreLogs: each of G groups appends entries of 64 KiB (about
// one produce request's records for one partition) one StoreLogs call at
// a time, as raft leaders do; reports MB/s and appends per fsync.
func BenchmarkStoreLogs(b *testing.B) {
	benchStoreLogs(b, 64<<10, []int{1, 6, 32})
}

// BenchmarkStoreLogsSmall: each of G groups appends one 1 KiB entry a
// call, as a leader or follower does for one client sending a record at
// a time; reports the mean fsync too.
func BenchmarkStoreLogsSmall(b *testing.B) {
	benchStoreLogs(b, 1<<10, []int{1, 6})
}

// benchStoreLogs runs one sub-benchmark per group count, each group
// appending entries of size bytes one StoreLogs call at a time.
func benchStoreLogs(b *testing.B, size int, groupCounts []int) {
	for _, groups := range groupCounts {
		b.Run(fmt.Sprintf("groups=%d", groups), func(b *testing.B) {
			w, err := Open(b.TempDir(), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			data := make([]byte, size)
			b.SetBytes(int64(len(data)))
			var wg sync.WaitGroup
			per := b.N/groups + 1
			b.ResetTimer()
			for g := range groups {
				wg.Go(func() {
					s := w.Store(uint64(g + 1))
					for i := 1; i <= per; i++ {
						if err := s.StoreLogs([]*raft.Log{{Index: uint64(i), Term: 1, Data: data}}); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			st := w.Stats()
			b.ReportMetric(float64(st.SyncTime.Microseconds())/float64(max(st.Syncs, 1)), "µs/fsync")
			b.ReportMetric(float64(st.Appends)/float64(max(st.Syncs, 1)), "appends/fsync")
		})
	}
}
