package producer

import (
	"bytes"

	"github.com/twmb/franz-go/pkg/kgo"
)

// keyPartitioner picks a record's partition as Kafka's default
// partitioner does for a keyed record (murmur2 of the key, as
// kgo.StickyKeyPartitioner computes it), and remembers the pick for the
// last key seen. The agent's records all carry the key "<run>/<host>",
// nearly always the same one, so one hash per key and partition count
// replaces one per record. A key keeps its partition while the partition
// count stays, so a node's samples stay in order.
type keyPartitioner struct {
	hash kgo.TopicPartitioner
	key  []byte
	n    int
	pick int32
}

func newKeyPartitioner(topic string) *keyPartitioner {
	return &keyPartitioner{hash: kgo.StickyKeyPartitioner(nil).ForTopic(topic), n: -1}
}

// partition is key's partition among n.
func (t *keyPartitioner) partition(key []byte, n int) int32 {
	if n == t.n && bytes.Equal(key, t.key) {
		return t.pick
	}
	t.pick = int32(t.hash.Partition(&kgo.Record{Key: key}, n))
	t.n = n
	t.key = append(t.key[:0], key...)
	return t.pick
}
