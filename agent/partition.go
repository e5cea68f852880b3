package agent

import (
	"bytes"

	"github.com/twmb/franz-go/pkg/kgo"
)

// keyPartitioner sends every record to the partition Kafka's default
// partitioner picks for its key (murmur2, as kgo.StickyKeyPartitioner
// computes it), and remembers the pick for the last key seen. The agent's
// records all carry the key "<run>/<host>", nearly always the same one,
// so one hash per key and partition count replaces one per record (the
// producer's default partitioner hashed every record and weighed
// partitions by backlog before it looked at the key).
type keyPartitioner struct{ hash kgo.Partitioner }

func newKeyPartitioner() kgo.Partitioner {
	return keyPartitioner{hash: kgo.StickyKeyPartitioner(nil)}
}

func (p keyPartitioner) ForTopic(topic string) kgo.TopicPartitioner {
	return &topicKeyPartitioner{hash: p.hash.ForTopic(topic), n: -1}
}

// topicKeyPartitioner is used by one record at a time (kgo.Partitioner).
type topicKeyPartitioner struct {
	hash kgo.TopicPartitioner
	key  []byte
	n    int
	pick int
}

// RequiresConsistency is true: a key keeps its partition even while that
// partition is unavailable, so a node's samples stay in order.
func (*topicKeyPartitioner) RequiresConsistency(*kgo.Record) bool { return true }

func (t *topicKeyPartitioner) Partition(r *kgo.Record, n int) int {
	if n == t.n && r.Key != nil && bytes.Equal(r.Key, t.key) {
		return t.pick
	}
	t.pick = t.hash.Partition(r, n)
	t.n = n
	t.key = append(t.key[:0], r.Key...)
	return t.pick
}
