package main

import (
	"context"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// old is the create time the producer puts on every message: far from
// now, so the append time cannot be mistaken for it.
var old = time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)

// checkLogAppendTime: a topic created with message.timestamp.type=
// LogAppendTime gets the broker's clock on every message consumers read
// (the batch's timestamp-type bit and MaxTimestamp); a CreateTime topic keeps the
// producer's time; AlterConfigs and IncrementalAlterConfigs switch a topic
// between the two and DescribeConfigs shows the setting.
func checkLogAppendTime(ctx context.Context, broker string) (string, error) {
	adm, err := kafka.NewAdminClient(conf(broker))
	if err != nil {
		return "", err
	}
	defer adm.Close()
	p, err := kafka.NewProducer(conf(broker, "acks", "all", "linger.ms", 0))
	if err != nil {
		return "", err
	}
	defer p.Close()

	const lat, ct = "lrk-logappend", "lrk-createtime"
	if err := createTopic(ctx, adm, lat, 1, map[string]string{"message.timestamp.type": "LogAppendTime"}); err != nil {
		return "", err
	}
	if err := createTopic(ctx, adm, ct, 1, nil); err != nil {
		return "", err
	}
	if err := wantTimestampConfig(ctx, adm, lat, "LogAppendTime"); err != nil {
		return "", err
	}
	if err := wantTimestampConfig(ctx, adm, ct, "CreateTime"); err != nil {
		return "", err
	}

	// produce sends n messages to topic, each with create time old, and
	// waits for their delivery reports; it returns the wall-clock window the
	// broker's append time must fall in.
	produce := func(topic string, n int) (time.Time, time.Time, error) {
		dr := make(chan kafka.Event, n)
		from := time.Now().Truncate(time.Millisecond)
		for i := range n {
			m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0},
				Value: fmt.Appendf(nil, "%s-%d", topic, i), Timestamp: old}
			if err := p.Produce(m, dr); err != nil {
				return from, from, err
			}
		}
		if left := p.Flush(30000); left > 0 {
			return from, from, fmt.Errorf("%d messages to %s not delivered", left, topic)
		}
		to := time.Now().Add(time.Millisecond).Truncate(time.Millisecond)
		for range n {
			m := (<-dr).(*kafka.Message)
			if m.TopicPartition.Error != nil {
				return from, to, fmt.Errorf("delivery to %s: %w", topic, m.TopicPartition.Error)
			}
			// confluent-kafka-go leaves the timestamp out of delivery
			// reports; broker tests check the produce response's
			// LogAppendTime with franz-go.
		}
		return from, to, nil
	}
	from, to, err := produce(lat, 5)
	if err != nil {
		return "", err
	}
	if _, _, err := produce(ct, 5); err != nil {
		return "", err
	}

	// Switch the CreateTime topic with AlterConfigs, produce, and reset it
	// with IncrementalAlterConfigs (DELETE = back to the default).
	res, err := adm.AlterConfigs(ctx, []kafka.ConfigResource{{Type: kafka.ResourceTopic, Name: ct,
		Config: []kafka.ConfigEntry{{Name: "message.timestamp.type", Value: "LogAppendTime"}}}})
	if err = resultErr(res, err); err != nil {
		return "", fmt.Errorf("AlterConfigs %s: %w", ct, err)
	}
	if err := wantTimestampConfig(ctx, adm, ct, "LogAppendTime"); err != nil {
		return "", err
	}
	from2, to2, err := produce(ct, 3)
	if err != nil {
		return "", err
	}
	res, err = adm.IncrementalAlterConfigs(ctx, []kafka.ConfigResource{{Type: kafka.ResourceTopic, Name: ct,
		Config: []kafka.ConfigEntry{{Name: "message.timestamp.type", IncrementalOperation: kafka.AlterConfigOpTypeDelete}}}})
	if err = resultErr(res, err); err != nil {
		return "", fmt.Errorf("IncrementalAlterConfigs %s: %w", ct, err)
	}
	if err := wantTimestampConfig(ctx, adm, ct, "CreateTime"); err != nil {
		return "", err
	}
	if _, _, err := produce(ct, 2); err != nil {
		return "", err
	}

	// Consumers see what the reports said.
	got, err := consumeAll(ctx, broker, lat, 1, 5)
	if err != nil {
		return "", err
	}
	for _, m := range got {
		if err := wantTimestamp("consumed from "+lat, m, true, from, to); err != nil {
			return "", err
		}
	}
	got, err = consumeAll(ctx, broker, ct, 1, 10)
	if err != nil {
		return "", err
	}
	for i, m := range got {
		wantAppend := i >= 5 && i < 8
		if err := wantTimestamp(fmt.Sprintf("consumed from %s offset %d", ct, i), m, wantAppend, from2, to2); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("append time %s on %s (producer said %s); CreateTime kept on %s; Alter/IncrementalAlterConfigs switch it",
		got[5].Timestamp.UTC().Format(time.RFC3339Nano), lat, old.Format(time.RFC3339), ct), nil
}

func wantTimestamp(what string, m *kafka.Message, wantAppend bool, from, to time.Time) error {
	if !wantAppend {
		if m.TimestampType != kafka.TimestampCreateTime || !m.Timestamp.Equal(old) {
			return fmt.Errorf("%s: timestamp %v %s, want CreateTime %s", what, m.TimestampType, m.Timestamp.UTC(), old)
		}
		return nil
	}
	if m.TimestampType != kafka.TimestampLogAppendTime {
		return fmt.Errorf("%s: timestamp type %v (%s), want LogAppendTime", what, m.TimestampType, m.Timestamp.UTC())
	}
	if m.Timestamp.Before(from) || m.Timestamp.After(to) {
		return fmt.Errorf("%s: append time %s outside the produce window [%s, %s]", what, m.Timestamp.UTC(), from.UTC(), to.UTC())
	}
	return nil
}

func wantTimestampConfig(ctx context.Context, adm *kafka.AdminClient, topic, want string) error {
	res, err := adm.DescribeConfigs(ctx, []kafka.ConfigResource{{Type: kafka.ResourceTopic, Name: topic}})
	if err != nil {
		return fmt.Errorf("DescribeConfigs %s: %w", topic, err)
	}
	for _, r := range res {
		if r.Error.Code() != kafka.ErrNoError {
			return fmt.Errorf("DescribeConfigs %s: %v", topic, r.Error)
		}
		if e, ok := r.Config["message.timestamp.type"]; !ok || e.Value != want {
			return fmt.Errorf("DescribeConfigs %s: message.timestamp.type = %+v, want %s", topic, e, want)
		}
	}
	return nil
}

func resultErr(res []kafka.ConfigResourceResult, err error) error {
	if err != nil {
		return err
	}
	for _, r := range res {
		if r.Error.Code() != kafka.ErrNoError {
			return r.Error
		}
	}
	return nil
}
