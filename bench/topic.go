package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// setUpTopic opens a run's admin client and ensures its topic with it
// (see ensureTopic); the caller closes the client, which it may use
// first to read the topic back.
func setUpTopic(ctx context.Context, brokers []string, sec []kgo.Opt, log *slog.Logger, topic string, partitions int32) (*kgo.Client, int32, error) {
	admin, err := newAdminClient(brokers, sec, log)
	if err != nil {
		return nil, 0, err
	}
	parts, err := ensureTopic(ctx, admin, log, topic, partitions)
	if err != nil {
		admin.Close()
		return nil, 0, err
	}
	return admin, parts, nil
}

// ensureTopic creates topic with partitions partitions (broker default
// replication factor) unless it exists, and returns the partition count the
// topic has afterwards. An existing topic with another partition count is
// used as it is, with a warning: deleting or growing it would change what a
// concurrent run sees.
func ensureTopic(ctx context.Context, cl *kgo.Client, log *slog.Logger, topic string, partitions int32) (int32, error) {
	adm := kadm.NewClient(cl)
	details, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("cannot list topic %q: %w", topic, err)
	}
	if d, ok := details[topic]; ok && d.Err == nil {
		n := int32(len(d.Partitions))
		if n != partitions {
			log.Warn("topic exists with another partition count", "topic", topic, "partitions", n, "wanted", partitions)
		}
		return n, nil
	}
	resp, err := adm.CreateTopic(ctx, partitions, -1, nil, topic)
	switch {
	case errors.Is(err, kerr.TopicAlreadyExists):
		// Created concurrently (or auto-created by the metadata request
		// above): read back what it has.
		return topicPartitions(ctx, adm, topic)
	case err != nil:
		return 0, fmt.Errorf("cannot create topic %q with %d partitions: %w", topic, partitions, err)
	}
	log.Info("created topic", "topic", topic, "partitions", partitions)
	if resp.NumPartitions > 0 {
		return resp.NumPartitions, nil
	}
	return partitions, nil
}

func topicPartitions(ctx context.Context, adm *kadm.Client, topic string) (int32, error) {
	details, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("cannot list topic %q: %w", topic, err)
	}
	d, ok := details[topic]
	if !ok {
		return 0, fmt.Errorf("topic %q is missing from metadata", topic)
	}
	if d.Err != nil {
		return 0, fmt.Errorf("cannot load topic %q: %w", topic, d.Err)
	}
	return int32(len(d.Partitions)), nil
}

// partitionInfo is what the raw consumer needs to know about one partition.
type partitionInfo struct {
	partition int32
	leader    int32
	start     int64 // log start offset when the run began
	end       int64 // high watermark when the run began
}

// describeTopic returns the topic's id and its partitions, sorted, with
// leaders and start and end offsets.
func describeTopic(ctx context.Context, adm *kadm.Client, topic string) ([16]byte, []partitionInfo, error) {
	var id [16]byte
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		return id, nil, fmt.Errorf("cannot read metadata of topic %q: %w", topic, err)
	}
	d, ok := md.Topics[topic]
	if !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
		return id, nil, fmt.Errorf("topic %q does not exist", topic)
	}
	if d.Err != nil {
		return id, nil, fmt.Errorf("cannot load topic %q: %w", topic, d.Err)
	}
	id = d.ID
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return id, nil, fmt.Errorf("cannot list start offsets of topic %q: %w", topic, err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return id, nil, fmt.Errorf("cannot list end offsets of topic %q: %w", topic, err)
	}
	var parts []partitionInfo
	for _, p := range d.Partitions {
		if p.Err != nil {
			return id, nil, fmt.Errorf("partition %s/%d: %w", topic, p.Partition, p.Err)
		}
		s, ok1 := starts.Lookup(topic, p.Partition)
		e, ok2 := ends.Lookup(topic, p.Partition)
		if !ok1 || !ok2 {
			return id, nil, fmt.Errorf("partition %s/%d has no listed offsets", topic, p.Partition)
		}
		if s.Err != nil {
			return id, nil, fmt.Errorf("cannot list start offset of %s/%d: %w", topic, p.Partition, s.Err)
		}
		if e.Err != nil {
			return id, nil, fmt.Errorf("cannot list end offset of %s/%d: %w", topic, p.Partition, e.Err)
		}
		parts = append(parts, partitionInfo{partition: p.Partition, leader: p.Leader, start: s.Offset, end: e.Offset})
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].partition < parts[j].partition })
	return id, parts, nil
}
