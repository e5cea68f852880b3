package agent

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
	ours := newKeyPartitioner().ForTopic("telemetry")
	keys := []string{"run-a/node1", "run-a/node1", "run-a/node2", "run-b/node1", "run-b/node1", "", "x"}
	for _, n := range []int{1, 3, 12, 12, 7} {
		for i := range 40 {
			k := keys[i%len(keys)]
			if i%9 == 8 {
				k = fmt.Sprintf("run-%d/node%d", i, n)
			}
			r := &kgo.Record{Key: []byte(k)}
			want := ref.Partition(r, n)
			if got := ours.Partition(r, n); got != want {
				t.Fatalf("key %q of %d partitions: got partition %d, want %d", k, n, got, want)
			}
		}
	}
	if !ours.RequiresConsistency(&kgo.Record{Key: []byte("k")}) {
		t.Error("a keyed record must keep its partition")
	}
}
