package producer

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKeyPartitionerMatchesKafka: the remembered pick is the one Kafka's
// default partitioner makes, for every key and partition count, whether
// the key repeats or changes.
func TestKeyPartitionerMatchesKafka(t *testing.T) {
	ref := kgo.StickyKeyPartitioner(nil).ForTopic("telemetry")
	ours := newKeyPartitioner("telemetry")
	keys := []string{"run-a/node1", "run-a/node1", "run-a/node2", "run-b/node1", "run-b/node1", "", "x"}
	for _, n := range []int{1, 3, 12, 12, 7} {
		for i := range 40 {
			k := keys[i%len(keys)]
			if i%9 == 8 {
				k = fmt.Sprintf("run-%d/node%d", i, n)
			}
			want := ref.Partition(&kgo.Record{Key: []byte(k)}, n)
			if got := ours.partition([]byte(k), n); int(got) != want {
				t.Fatalf("key %q of %d partitions: got partition %d, want %d", k, n, got, want)
			}
		}
	}
}
