package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// checkPartitions: the mix of messages confluent-kafka-go's own producer
// tests send — six to partition 0 (with and without key, value, empty
// ones), one to RD_KAFKA_PARTITION_UA (the client partitions it) and one to
// partition 10000, which the client refuses with UNKNOWN_PARTITION. Every
// message reported delivered must be in the log, where the report says:
// the watermarks grow by the number of successful reports, per partition.
func checkPartitions(ctx context.Context, broker string) (string, error) {
	adm, err := kafka.NewAdminClient(conf(broker))
	if err != nil {
		return "", err
	}
	defer adm.Close()
	topic := "lrk-partitions"
	const partitions = 4
	if err := createTopic(ctx, adm, topic, partitions, nil); err != nil {
		return "", err
	}
	before, err := watermarks(broker, topic)
	if err != nil {
		return "", err
	}

	p, err := kafka.NewProducer(conf(broker, "acks", "all", "queue.buffering.max.messages", 8))
	if err != nil {
		return "", err
	}
	defer p.Close()
	msgs := []*kafka.Message{
		{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0}},
		{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0}, Opaque: "op1"},
		{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0}, Value: []byte{}, Key: []byte{}, Opaque: "op2"},
		{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0}, Value: []byte("value3"), Key: []byte("key3"), Opaque: "op3"},
		{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0}, Key: []byte("key4"), Opaque: "op4"},
		{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0}, Value: []byte("value5"), Opaque: "op5"},
		{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny}, Value: []byte("value6"), Key: []byte("key6"), Opaque: "op6"},
		{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 10000}, Value: []byte("value7"), Key: []byte("key7"), Opaque: "op7"},
	}
	dr := make(chan kafka.Event, len(msgs))
	// The message to partition 10000 is refused with UNKNOWN_PARTITION:
	// in its delivery report, or by Produce itself when the client
	// already holds the topic's metadata.
	errs, reportsDue := 0, len(msgs)
	for _, m := range msgs {
		if err := p.Produce(m, dr); err != nil {
			var kerr kafka.Error
			if m.TopicPartition.Partition == 10000 && errors.As(err, &kerr) && kerr.Code() == kafka.ErrUnknownPartition {
				errs++
				reportsDue--
				continue
			}
			return "", fmt.Errorf("produce %v: %w", m.Opaque, err)
		}
	}
	if n := p.Flush(30000); n > 0 {
		return "", fmt.Errorf("%d messages not delivered after 30 s", n)
	}
	delivered := map[int32]int64{}
	positions := map[string]string{} // "partition/offset" -> value
	var reports []string
	for range reportsDue {
		var ev kafka.Event
		select {
		case ev = <-dr:
		case <-time.After(30 * time.Second):
			return "", fmt.Errorf("delivery reports missing; got %v", reports)
		}
		m := ev.(*kafka.Message)
		reports = append(reports, fmt.Sprintf("%v:%v", m.Opaque, m.TopicPartition))
		if m.TopicPartition.Error != nil {
			errs++
			if m.TopicPartition.Partition != 10000 {
				return "", fmt.Errorf("message %v failed: %v", m.Opaque, m.TopicPartition)
			}
			continue
		}
		if m.TopicPartition.Partition == 10000 || m.TopicPartition.Partition == kafka.PartitionAny {
			return "", fmt.Errorf("message %v reported delivered to %v", m.Opaque, m.TopicPartition)
		}
		delivered[m.TopicPartition.Partition]++
		positions[fmt.Sprintf("%d/%d", m.TopicPartition.Partition, m.TopicPartition.Offset)] = string(m.Value)
	}
	if errs != 1 {
		return "", fmt.Errorf("%d failed delivery reports, want 1 (partition 10000): %v", errs, reports)
	}
	after, err := watermarks(broker, topic)
	if err != nil {
		return "", err
	}
	for part := range int32(partitions) {
		if got, want := after[part]-before[part], delivered[part]; got != want {
			return "", fmt.Errorf("partition %d grew by %d messages, %d reported delivered there (reports %v; before %v after %v)",
				part, got, want, reports, before, after)
		}
	}
	// And each delivered message reads back at its reported place.
	got, err := consumeAll(ctx, broker, topic, partitions, len(msgs)-1)
	if err != nil {
		return "", err
	}
	for _, m := range got {
		pos := fmt.Sprintf("%d/%d", m.TopicPartition.Partition, m.TopicPartition.Offset)
		v, ok := positions[pos]
		if !ok {
			return "", fmt.Errorf("read %q at %s, where no delivery report put a message (reports %v)", m.Value, pos, reports)
		}
		if v != string(m.Value) {
			return "", fmt.Errorf("read %q at %s, the delivery report said %q", m.Value, pos, v)
		}
		delete(positions, pos)
	}
	if len(positions) > 0 {
		return "", fmt.Errorf("reported delivered but not read back: %v", positions)
	}
	return fmt.Sprintf("7 of 8 delivered (partition 10000 refused), watermarks agree per partition %v; %d read back", delivered, len(got)), nil
}
