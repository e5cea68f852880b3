package txn

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/group"
	"github.com/simtel/simtel/broker/internal/batchtest"
	"github.com/simtel/simtel/broker/storage"
)

// testBroker is a single node for the coordinator alone: partitions are
// bare logs in a directory (opened again by a restart), the group
// coordinator keeps its offsets in memory and lives across restarts.
type testBroker struct {
	t      *testing.T
	dir    string
	groups *group.Coordinator

	mu    sync.Mutex
	parts map[string]*testPartition
	pid   int64
}

type testPartition struct {
	topic string
	index int32
	log   *storage.Log
}

func newTestBroker(t *testing.T) *testBroker {
	t.Helper()
	g, err := group.New(group.Config{Logger: slog.New(slog.DiscardHandler), Store: group.NewMemStore()})
	if err != nil {
		t.Fatal(err)
	}
	b := &testBroker{t: t, dir: t.TempDir(), groups: g, parts: map[string]*testPartition{}}
	t.Cleanup(func() {
		b.closeLogs()
		g.Close()
	})
	return b
}

// open starts a coordinator on the broker's logs, as a broker's New does.
func (b *testBroker) open() *coordinator {
	b.t.Helper()
	s := New(Config{Logger: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry(), Broker: b})
	if err := s.Open(); err != nil {
		b.t.Fatal(err)
	}
	return s.single
}

// restart closes every log and opens them again, as a broker restart
// does; the group coordinator stays (its state is durable in a broker).
func (b *testBroker) restart() *coordinator {
	b.t.Helper()
	b.mu.Lock()
	var parts []testPartition
	for _, p := range b.parts {
		parts = append(parts, testPartition{topic: p.topic, index: p.index})
	}
	b.mu.Unlock()
	b.closeLogs()
	for _, p := range parts {
		b.addPartition(p.topic, p.index)
	}
	return b.open()
}

func (b *testBroker) closeLogs() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, p := range b.parts {
		p.log.Close()
		delete(b.parts, k)
	}
}

func (b *testBroker) addPartition(topic string, i int32) *testPartition {
	b.t.Helper()
	l, err := storage.Open(storage.Config{Dir: filepath.Join(b.dir, fmt.Sprintf("%s-%d", topic, i))})
	if err != nil {
		b.t.Fatal(err)
	}
	p := &testPartition{topic: topic, index: i, log: l}
	b.mu.Lock()
	b.parts[p.String()] = p
	b.mu.Unlock()
	return p
}

func (b *testBroker) part(topic string, i int32) *testPartition {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.parts[fmt.Sprintf("%s-%d", topic, i)]
}

func (b *testBroker) StatePartition(i int32) StatePartition {
	if p := b.part(StateTopic, i); p != nil {
		return p
	}
	return nil
}

func (b *testBroker) StatePartitions() []StatePartition {
	return []StatePartition{b.StatePartition(0)}
}

func (b *testBroker) CreateTopic(_ context.Context, name string, partitions int32, _ map[string]string) error {
	for i := range partitions {
		b.addPartition(name, i)
	}
	return nil
}

func (b *testBroker) Partition(topic string, i int32) Partition {
	if p := b.part(topic, i); p != nil {
		return p
	}
	return nil
}

func (b *testBroker) PartitionKnown(topic string, i int32) bool { return b.part(topic, i) != nil }
func (b *testBroker) ClusterPartitions(string) int              { return 0 }
func (b *testBroker) LeaderOf(string, int32) (int32, string, bool) {
	return 0, "", false
}

func (b *testBroker) GroupCoordinator(string) (*group.Coordinator, int16) { return b.groups, 0 }
func (b *testBroker) GroupCoordinatorAddr(g string) (string, error) {
	return "", fmt.Errorf("single node: no other coordinator of group %q", g)
}
func (b *testBroker) GroupCoordinatorSince(string) (time.Time, bool) { return time.Time{}, false }

func (b *testBroker) NewProducerID() (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pid++
	return b.pid, nil
}

func (p *testPartition) String() string    { return fmt.Sprintf("%s-%d", p.topic, p.index) }
func (p *testPartition) Log() *storage.Log { return p.log }
func (p *testPartition) Replicated() bool  { return false }
func (p *testPartition) IsLeader() bool    { return true }
func (p *testPartition) Term() uint64      { return 0 }
func (p *testPartition) Propose(uint64, []byte) func() error {
	return func() error { return fmt.Errorf("%s is not replicated", p) }
}
func (p *testPartition) Commit(ctx context.Context, last int64) error { return p.log.Sync(ctx, last) }
func (p *testPartition) CommitLater()                                 {}

func (p *testPartition) AppendMarker(pid int64, epoch int16, ct storage.ControlType) (int64, error) {
	return p.append(storage.AppendControlBatch(nil, pid, epoch, ct, 0, time.Now().UnixMilli()), nil)
}

func (p *testPartition) WriteMarker(ctx context.Context, pid int64, epoch int16, ct storage.ControlType, _ int32) error {
	last, err := p.AppendMarker(pid, epoch, ct)
	if err != nil {
		return err
	}
	return p.Commit(ctx, last)
}

// append appends batch after check accepted its headers.
func (p *testPartition) append(batch []byte, check func([]storage.BatchHeader) error) (int64, error) {
	hdrs, err := storage.ParseBatches(batch, 0)
	if err != nil {
		return 0, err
	}
	if check != nil {
		if err := check(hdrs); err != nil {
			return 0, err
		}
	}
	_, last, err := p.log.Append(batch, hdrs, 0)
	return last, err
}

// produceTo appends a transactional batch through the coordinator's check.
func (c *coordinator) produceTo(p *testPartition, txnID string, batch []byte) error {
	return c.s.Produce(txnID, p.topic, p.index, func(check func([]storage.BatchHeader) error) error {
		_, err := p.append(batch, check)
		return err
	})
}

// lastStableOffset is the offset below which every transaction of p has
// ended (its end if none is open).
func (p *testPartition) lastStableOffset() int64 {
	if first, ok := p.log.FirstUnstableOffset(); ok {
		return first
	}
	return p.log.EndOffset()
}

// txnRecords encodes one transactional batch of n records.
func txnRecords(pid int64, epoch int16, seq int32, n int) []byte {
	return batchtest.Encode(kmsg.RecordBatch{
		PartitionLeaderEpoch: -1, Magic: 2, Attributes: 0x10, FirstTimestamp: 1, MaxTimestamp: 1,
		ProducerID: pid, ProducerEpoch: epoch, FirstSequence: seq,
	}, slices.Repeat([]string{"v"}, n)...)
}
