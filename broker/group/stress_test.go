package group

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// slowStore delays every write by a random amount before and after
// applying it, so that concurrent writes reach the underlying store, and
// return from it, in shuffled orders.
type slowStore struct{ Store }

func jitter() { time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond) }

func (s slowStore) Commit(g string, o []CommittedOffset) error {
	jitter()
	defer jitter()
	return s.Store.Commit(g, o)
}

func (s slowStore) DeleteOffsets(g string, tps []TopicPartition) error {
	jitter()
	defer jitter()
	return s.Store.DeleteOffsets(g, tps)
}

func (s slowStore) DeleteGroup(g string) error {
	jitter()
	defer jitter()
	return s.Store.DeleteGroup(g)
}

// TestConcurrentOffsetWritesMatchStore hammers a few groups and partitions
// with concurrent commits, offset deletes, topic deletes and group deletes
// through a store that reorders whatever reaches it concurrently. After
// every round of concurrent operations, what the coordinator serves must
// equal what the store holds: the state a restart would load.
func TestConcurrentOffsetWritesMatchStore(t *testing.T) {
	mem := NewMemStore()
	cfg := testConfig(t, slowStore{mem})
	cfg.Logger = nil
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	groups := []string{"a", "b"}
	topics := []string{"t1", "t2"}
	op := func(w, i int) {
		g := groups[rand.IntN(len(groups))]
		topic := topics[rand.IntN(len(topics))]
		p := int32(rand.IntN(3))
		switch n := rand.IntN(100); {
		case n < 75:
			r := kmsg.NewPtrOffsetCommitRequest()
			r.Version = 8
			r.Group = g
			r.Generation = -1
			c.OffsetCommit(withPartitions(r, topic, map[int32]int64{p: int64(w*1000 + i), (p + 1) % 3: int64(i)}))
		case n < 88:
			r := kmsg.NewPtrOffsetDeleteRequest()
			r.Group = g
			r.Topics = []kmsg.OffsetDeleteRequestTopic{{Topic: topic, Partitions: []kmsg.OffsetDeleteRequestTopicPartition{{Partition: p}}}}
			c.OffsetDelete(r)
		case n < 95:
			r := kmsg.NewPtrDeleteGroupsRequest()
			r.Groups = []string{g}
			c.DeleteGroups(r)
		default:
			c.DeleteTopicOffsets(topic)
		}
	}
	for round := range 150 {
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() { op(w, round) })
		}
		wg.Wait()
		served, stored := servedOffsets(c), storedOffsets(t, mem)
		if !reflect.DeepEqual(served, stored) {
			t.Fatalf("round %d: coordinator serves\n%v\nstore holds\n%v", round, served, stored)
		}
	}
}

func servedOffsets(c *Coordinator) map[string]map[string]int64 {
	served := map[string]map[string]int64{}
	for _, lg := range c.ListGroups(kmsg.NewPtrListGroupsRequest()).Groups {
		fr := kmsg.NewPtrOffsetFetchRequest()
		fr.Version = 7
		fr.Group = lg.Group
		offs := map[string]int64{}
		for _, ft := range c.OffsetFetch(fr).Topics {
			for _, fp := range ft.Partitions {
				offs[fmt.Sprintf("%s/%d", ft.Topic, fp.Partition)] = fp.Offset
			}
		}
		served[lg.Group] = offs
	}
	return served
}

func storedOffsets(t *testing.T, s Store) map[string]map[string]int64 {
	stored := map[string]map[string]int64{}
	for _, gs := range mustLoad(t, s).Groups {
		offs := map[string]int64{}
		for _, o := range gs.Offsets {
			offs[fmt.Sprintf("%s/%d", o.Topic, o.Partition)] = o.Offset
		}
		stored[gs.Meta.Group] = offs
	}
	return stored
}
