package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The exactly-once check of `simtel bench agents`: every sample an
// emulated agent took is a record keyed "<run>/node-NNNNN" whose value
// holds "seq=<n>i", n counting the agent's samples from 0. Reading the
// topic back, a tally marks each (agent, n) it sees; one seen twice is a
// duplicate, one never seen is lost.

// sampleKey is agent i's record key in run.
func sampleKey(run string, i int) []byte {
	return fmt.Appendf(nil, "%s/node-%05d", run, i)
}

// appendSample appends agent's sample seq, a line of InfluxDB line
// protocol padded with a string field to about size bytes, as an agent
// spools it.
func appendSample(dst []byte, node []byte, seq uint64, ts int64, size int) []byte {
	start := len(dst)
	dst = append(dst, "bench_agents,node="...)
	dst = append(dst, node...)
	dst = append(dst, " seq="...)
	dst = strconv.AppendUint(dst, seq, 10)
	dst = append(dst, `i,pad="`...)
	// The line ends with `" ` and 19 digits of timestamp.
	for pad := size - (len(dst) - start) - 2 - 19; pad > 0; pad-- {
		dst = append(dst, 'x')
	}
	dst = append(dst, `" `...)
	return strconv.AppendInt(dst, ts, 10)
}

// parseSample returns the agent index and sequence number of a record of
// run, or ok false for a record that is not one.
func parseSample(run []byte, key, value []byte) (agent int, seq uint64, ok bool) {
	rest, found := bytes.CutPrefix(key, run)
	if !found {
		return 0, 0, false
	}
	rest, found = bytes.CutPrefix(rest, []byte("/node-"))
	if !found {
		return 0, 0, false
	}
	a, err := strconv.Atoi(string(rest))
	if err != nil || a < 0 {
		return 0, 0, false
	}
	i := bytes.Index(value, []byte(" seq="))
	if i < 0 {
		return 0, 0, false
	}
	v := value[i+len(" seq="):]
	j := bytes.IndexByte(v, 'i')
	if j < 0 {
		return 0, 0, false
	}
	s, err := strconv.ParseUint(string(v[:j]), 10, 64)
	if err != nil {
		return 0, 0, false
	}
	return a, s, true
}

// tally counts what a read-back saw against what each agent took.
type tally struct {
	taken []uint64   // samples agent i took
	seen  [][]uint64 // bit n of seen[i]: agent i's sample n was read

	delivered  int64 // distinct samples read
	duplicated int64 // reads of a sample already read
	foreign    int64 // records that are no sample of the run's agents
}

func newTally(taken []uint64) *tally {
	t := &tally{taken: taken, seen: make([][]uint64, len(taken))}
	for i, n := range taken {
		t.seen[i] = make([]uint64, (n+63)/64)
	}
	return t
}

func (t *tally) add(agent int, seq uint64) {
	if agent >= len(t.taken) || seq >= t.taken[agent] {
		t.foreign++
		return
	}
	w, bit := seq/64, uint64(1)<<(seq%64)
	if t.seen[agent][w]&bit != 0 {
		t.duplicated++
		return
	}
	t.seen[agent][w] |= bit
	t.delivered++
}

// lost is the samples taken and never read, and the agents that lost any.
func (t *tally) lost() (samples int64, agents int) {
	for i, n := range t.taken {
		var got uint64
		for _, w := range t.seen[i] {
			got += uint64(bits.OnesCount64(w))
		}
		if got < n {
			samples += int64(n - got)
			agents++
		}
	}
	return samples, agents
}

// readBack reads topic from its start to its current end offsets into t.
// It fails if nothing arrives for idle.
func readBack(ctx context.Context, opts []kgo.Opt, topic, run string, t *tally, idle time.Duration) error {
	adm, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	ends, err := kadm.NewClient(adm).ListEndOffsets(ctx, topic)
	adm.Close()
	if err != nil {
		return fmt.Errorf("cannot list end offsets of %s: %w", topic, err)
	}
	if err := ends.Error(); err != nil {
		return fmt.Errorf("cannot list end offsets of %s: %w", topic, err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	cl, err := kgo.NewClient(append(opts,
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxBytes(64<<20),
	)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	runB := []byte(run)
	lastMove := time.Now()
	var lastErr error
	for len(want) > 0 {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		moved := false
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				lastErr = err
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			moved = true
			if a, s, ok := parseSample(runB, r.Key, r.Value); ok {
				t.add(a, s)
			} else {
				t.foreign++
			}
			if end, ok := want[r.Partition]; ok && r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
		if moved {
			lastMove = time.Now()
		}
		if time.Since(lastMove) > idle {
			return fmt.Errorf("read-back of %s: nothing arrived for %s with %d partitions short of their end (last fetch error: %v)", topic, idle, len(want), lastErr)
		}
	}
	return nil
}
