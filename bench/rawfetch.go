package bench

import (
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// rawMaxWaitMillis is the long-poll wait of a raw fetch. It only matters at
// the end of a partition or when Records is beyond what was produced.
const rawMaxWaitMillis = 500

// rawReader fetches a set of partitions that share a leader, over one kgo
// client, one request at a time: the next request needs the offsets the
// previous response ended at.
type rawReader struct {
	c      *consumeRun
	cl     *kgo.Client
	leader int32
	// offsets of the partitions this reader still reads, by partition.
	offsets map[int32]int64
}

// runRaw splits the partitions over the consumer clients (partition i to
// client i mod Consumers), starts one reader per client and leader, and
// returns after all have exited.
func (c *consumeRun) runRaw(parts []partitionInfo) {
	var clients []*kgo.Client
	defer func() {
		for _, cl := range clients {
			cl.Close()
		}
	}()
	readers := map[[2]int32]*rawReader{}
	var order [][2]int32
	for i, p := range parts {
		if p.leader < 0 {
			c.abort(fmt.Sprintf("partition %s/%d has no leader", c.cfg.Topic, p.partition))
			return
		}
		if _, ok := c.ends[p.partition]; !ok && c.cfg.Records == 0 {
			continue // empty, and nothing more will be read from it
		}
		ci := i % c.cfg.Consumers
		for len(clients) <= ci {
			n := len(clients)
			cl, err := kgo.NewClient(append(clientOpts(c.cfg.Brokers, c.cfg.ClientOpts, c.cfg.Logger, fmt.Sprintf("simtel-bench-raw-%d", n)),
				kgo.FetchMaxBytes(c.cfg.FetchMaxBytes),
				kgo.BrokerMaxReadBytes(brokerMaxReadBytes(c.cfg.FetchMaxBytes)))...)
			if err != nil {
				c.abort(fmt.Sprintf("cannot create consumer %d: %v", n, err))
				return
			}
			clients = append(clients, cl)
		}
		key := [2]int32{int32(ci), p.leader}
		r, ok := readers[key]
		if !ok {
			r = &rawReader{c: c, cl: clients[ci], leader: p.leader, offsets: map[int32]int64{}}
			readers[key] = r
			order = append(order, key)
		}
		r.offsets[p.partition] = p.start
	}
	var wg sync.WaitGroup
	for _, k := range order {
		r := readers[k]
		wg.Go(r.run)
	}
	wg.Wait()
}

func (r *rawReader) run() {
	c := r.c
	br := r.cl.Broker(int(r.leader))
	for c.ctx.Err() == nil && len(r.offsets) > 0 {
		req := r.request()
		kresp, err := br.RetriableRequest(c.ctx, req)
		if err != nil {
			if c.ctx.Err() == nil {
				c.abort(fmt.Sprintf("fetch from broker %d: %v", r.leader, err))
			}
			return
		}
		resp := kresp.(*kmsg.FetchResponse)
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			c.abort(fmt.Sprintf("fetch from broker %d: %v", r.leader, err))
			return
		}
		var recs, bytes int64
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := r.take(p, &recs, &bytes); err != nil {
					c.abort(err.Error())
					return
				}
			}
		}
		if recs > 0 {
			c.arrived(recs, bytes)
		}
	}
}

// request builds a full fetch (no fetch session) of every partition the
// reader still reads.
func (r *rawReader) request() *kmsg.FetchRequest {
	cfg := r.c.cfg
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = rawMaxWaitMillis
	req.MinBytes = 1
	req.MaxBytes = cfg.FetchMaxBytes
	req.IsolationLevel = 0 // read uncommitted: the benchmark writes no transactions
	req.SessionID = 0
	req.SessionEpoch = -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = cfg.Topic
	rt.TopicID = r.c.topicID // used from v13 on, where the name is not sent
	for p, off := range r.offsets {
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition = p
		rp.FetchOffset = off
		rp.PartitionMaxBytes = cfg.PartitionMaxBytes
		rp.CurrentLeaderEpoch = -1
		rp.LogStartOffset = -1
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	return req
}

// take accounts for one partition of a response and advances its offset.
func (r *rawReader) take(p kmsg.FetchResponseTopicPartition, recs, bytes *int64) error {
	c := r.c
	if _, ok := r.offsets[p.Partition]; !ok {
		return nil // not asked for, or already finished
	}
	if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
		return fmt.Errorf("fetch %s/%d at offset %d: %w", c.cfg.Topic, p.Partition, r.offsets[p.Partition], err)
	}
	w, err := WalkBatches(p.RecordBatches)
	if errors.Is(err, ErrBatchTooLarge) {
		return fmt.Errorf("fetch %s/%d at offset %d: %w: raise the partition max bytes above %d",
			c.cfg.Topic, p.Partition, r.offsets[p.Partition], err, c.cfg.PartitionMaxBytes)
	}
	if err != nil {
		return fmt.Errorf("fetch %s/%d at offset %d: %w", c.cfg.Topic, p.Partition, r.offsets[p.Partition], err)
	}
	if w.Batches == 0 {
		return nil
	}
	if w.NextOffset <= r.offsets[p.Partition] {
		return fmt.Errorf("fetch %s/%d at offset %d returned batches ending at %d", c.cfg.Topic, p.Partition, r.offsets[p.Partition], w.NextOffset)
	}
	*recs += w.Records
	*bytes += w.Bytes
	r.offsets[p.Partition] = w.NextOffset
	c.reached(p.Partition, w.NextOffset)
	if end, ok := c.ends[p.Partition]; ok && w.NextOffset >= end && c.cfg.Records == 0 {
		delete(r.offsets, p.Partition)
	}
	return nil
}
