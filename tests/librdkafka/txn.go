package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// checkTransactions runs the transactions of confluent-kafka-go's own
// TestTransactionalProducer: produce, send offsets, flush, commit or
// abort, in the combinations an application uses. A read_committed
// consumer then sees exactly the committed transactions' messages, and
// the group's committed offsets are those of the last committed
// SendOffsetsToTransaction.
func checkTransactions(ctx context.Context, broker string) (string, error) {
	adm, err := kafka.NewAdminClient(conf(broker))
	if err != nil {
		return "", err
	}
	defer adm.Close()
	const in, out, group = "lrk-txn-in", "lrk-txn-out", "lrk-txn-group"
	for _, t := range []string{in, out} {
		if err := createTopic(ctx, adm, t, 3, nil); err != nil {
			return "", err
		}
	}
	p, err := kafka.NewProducer(conf(broker, "transactional.id", "lrk-txn"))
	if err != nil {
		return "", err
	}
	defer p.Close()
	if err := p.InitTransactions(ctx); err != nil {
		return "", fmt.Errorf("InitTransactions: %w", err)
	}
	const msgCnt = 10
	txns := []string{
		"produce,send,commit",
		"produce,flush,send,commit",
		"produce,commit",
		"send,commit",
		"produce,flush,send,abort",
		"produce,abort",
		"send,abort",
	}
	committed := map[string]bool{}
	var pendingAtFlush []int
	var lastOffsets []kafka.TopicPartition
	for n, how := range txns {
		if err := p.BeginTransaction(); err != nil {
			return "", fmt.Errorf("%s: BeginTransaction: %w", how, err)
		}
		dr := make(chan kafka.Event, msgCnt)
		if strings.Contains(how, "produce") {
			for i := range msgCnt {
				topic := out
				m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny},
					Value: fmt.Appendf(nil, "txn%d-%d", n, i)}
				if err := p.Produce(m, dr); err != nil {
					return "", fmt.Errorf("%s: produce: %w", how, err)
				}
			}
		}
		var offsets []kafka.TopicPartition
		if strings.Contains(how, "send") {
			topic := in
			offsets = []kafka.TopicPartition{
				{Topic: &topic, Partition: 0, Offset: kafka.Offset(100 + n)},
				{Topic: &topic, Partition: 1, Offset: kafka.Offset(200 + n)},
			}
			md, err := kafka.NewTestConsumerGroupMetadata(group)
			if err != nil {
				return "", err
			}
			if err := p.SendOffsetsToTransaction(ctx, offsets, md); err != nil {
				return "", fmt.Errorf("%s: SendOffsetsToTransaction: %w", how, err)
			}
		}
		if strings.Contains(how, "flush") {
			// confluent-kafka-go's test calls Flush(-1), which returns
			// at once with this count: it passes only if the messages
			// were delivered while SendOffsetsToTransaction ran.
			pendingAtFlush = append(pendingAtFlush, p.Len())
		}
		if strings.Contains(how, "flush") {
			// The application's flush before commit: every message
			// of the transaction gets its delivery report.
			if left := p.Flush(30000); left > 0 {
				return "", fmt.Errorf("%s: Flush: %d messages still not delivered after 30 s", how, left)
			}
			if err := reports(dr, msgCnt, false); err != nil {
				return "", fmt.Errorf("%s: %w", how, err)
			}
		}
		abort := strings.Contains(how, "abort")
		if abort {
			err = p.AbortTransaction(ctx)
		} else {
			err = p.CommitTransaction(ctx)
		}
		if err != nil {
			return "", fmt.Errorf("%s: end transaction: %w", how, err)
		}
		if strings.Contains(how, "produce") && !strings.Contains(how, "flush") {
			// Commit flushes first; abort fails what was not sent.
			if err := reports(dr, msgCnt, abort); err != nil && !abort {
				return "", fmt.Errorf("%s: %w", how, err)
			}
		}
		if !abort && strings.Contains(how, "produce") {
			for i := range msgCnt {
				committed[fmt.Sprintf("txn%d-%d", n, i)] = true
			}
		}
		if !abort && offsets != nil {
			lastOffsets = offsets
		}
	}

	// read_committed sees exactly the committed messages.
	got, err := consumeAll(ctx, broker, out, 3, len(committed), "isolation.level", "read_committed")
	if err != nil {
		return "", err
	}
	for _, m := range got {
		if !committed[string(m.Value)] {
			return "", fmt.Errorf("read_committed read %q, which was not committed (or read twice)", m.Value)
		}
		delete(committed, string(m.Value))
	}
	// Nothing more: an aborted message would show up within a moment.
	xctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if extra, err := consumeAll(xctx, broker, out, 3, len(got)+1, "isolation.level", "read_committed"); err == nil {
		return "", fmt.Errorf("read_committed read %d messages, want %d", len(extra), len(got))
	}

	res, err := adm.ListConsumerGroupOffsets(ctx, []kafka.ConsumerGroupTopicPartitions{{Group: group,
		Partitions: []kafka.TopicPartition{{Topic: lastOffsets[0].Topic, Partition: 0}, {Topic: lastOffsets[1].Topic, Partition: 1}}}})
	if err != nil {
		return "", fmt.Errorf("ListConsumerGroupOffsets: %w", err)
	}
	for i, tp := range res.ConsumerGroupsTopicPartitions[0].Partitions {
		if tp.Offset != lastOffsets[i].Offset {
			return "", fmt.Errorf("group %s committed %v, want offset %v from the last committed transaction", group, tp, lastOffsets[i].Offset)
		}
	}
	return fmt.Sprintf("%d transactions; read_committed read the %d committed messages; group offsets %v/%v; undelivered when Flush was called %v",
		len(txns), len(got), lastOffsets[0].Offset, lastOffsets[1].Offset, pendingAtFlush), nil
}

// reports waits for n delivery reports, all failed or all delivered.
func reports(dr chan kafka.Event, n int, wantErr bool) error {
	for i := range n {
		select {
		case ev := <-dr:
			m := ev.(*kafka.Message)
			if (m.TopicPartition.Error != nil) != wantErr {
				return fmt.Errorf("delivery report %d: %v, want error=%v", i, m.TopicPartition, wantErr)
			}
		case <-time.After(30 * time.Second):
			return fmt.Errorf("%d of %d delivery reports after 30 s", i, n)
		}
	}
	return nil
}
