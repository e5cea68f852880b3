package broker_test

import (
	"fmt"
	"testing"
	"time"
)

// TestClusterStoppedReplicaCatchesUp: a broker SIGKILLed while producers
// write to a 6-partition RF 3 topic, then restarted once they have
// stopped, reports simtel_broker_partition_in_sync 1 for a partition only
// once its replica has the leader's high watermark and as many bytes
// (sampled until all six are in sync), all six get there, and nothing
// acknowledged is lost, duplicated or reordered.
func TestClusterStoppedReplicaCatchesUp(t *testing.T) {
	bs, _, seeds, ctx := startClusterFor(t, 3, 5*time.Minute)
	const topic = "catchup"
	createTopic(t, ctx, seeds, topic, 6, 3)
	waitLeaders(t, ctx, seeds, topic, 3)
	down := bs[2]
	down.Kill()
	load := startLoad(t, ctx, seeds[:2], topic, 2)
	load.waitMore(t, "records acknowledged with broker 2 down", 20000)
	load.finish(t)
	// The leaders' partitions no longer change.
	want := map[int32]replicaState{}
	for _, b := range bs[:2] {
		st, err := replicaStates(b.HTTPAddr, topic)
		if err != nil {
			t.Fatal(err)
		}
		for p, s := range st {
			if s.hw > want[p].hw {
				want[p] = s
			}
		}
	}
	restartWithJoin(t, down, bs)
	samples := 0
	waitUntil(t, 3*time.Minute, "every replica on the restarted broker in sync", func() string {
		st, err := replicaStates(down.HTTPAddr, topic)
		if err != nil {
			return err.Error()
		}
		samples++
		in := 0
		for p, s := range st {
			if !s.inSync {
				continue
			}
			if s.hw != want[p].hw || s.size != want[p].size {
				t.Fatalf("partition %d reported in sync at high watermark %d and %d bytes; the leader has %d and %d", p, s.hw, s.size, want[p].hw, want[p].size)
			}
			in++
		}
		if in < len(want) {
			return fmt.Sprintf("%d of %d partitions in sync", in, len(want))
		}
		return ""
	})
	t.Logf("in sync after %d samples of the restarted broker's metrics (load %s)", samples, loadAvg())
	load.finishAndCheck(ctx, t, seeds, topic)
}

// replicaState is a replica's line of /metrics.
type replicaState struct {
	hw, size int64
	inSync   bool
}

// replicaStates reads the high watermark, size and in-sync state of every
// replica of topic on the broker whose HTTP listener is addr.
func replicaStates(addr, topic string) (map[int32]replicaState, error) {
	out := map[int32]replicaState{}
	if err := partitionMetrics(addr, topic, func(name string, p int32, v float64) {
		s := out[p]
		switch name {
		case "simtel_broker_partition_high_watermark":
			s.hw = int64(v)
		case "simtel_broker_partition_size_bytes":
			s.size = int64(v)
		case "simtel_broker_partition_in_sync":
			s.inSync = v == 1
		default:
			return
		}
		out[p] = s
	}); err != nil {
		return nil, err
	}
	return out, nil
}
