// Command librdkafka-compat checks a simtel broker with librdkafka, the C
// client under confluent-kafka-go, confluent-kafka-python, kcat and many
// others. It lives in a module of its own so the simtel module and binary
// do not depend on cgo or on librdkafka; broker/librdkafka_test.go builds
// it and runs each check against a real `simtel broker` process.
//
//	librdkafka-compat -broker 127.0.0.1:9092 -check listgroups
//
// Each check prints "OK: <check>: <what it saw>" and exits 0, or prints
// what went wrong and exits 1.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

var checks = map[string]func(ctx context.Context, broker string) (string, error){
	"listgroups":    checkListGroups,
	"logappendtime": checkLogAppendTime,
	"txn":           checkTransactions,
	"partitions":    checkPartitions,
}

func main() {
	broker := flag.String("broker", os.Getenv("SIMTEL_BROKER"), "broker address host:port")
	check := flag.String("check", "", "check to run: "+strings.Join(checkNames(), ", "))
	debug := flag.String("debug", "", "librdkafka debug contexts (e.g. eos,protocol,msg)")
	flag.Parse()
	debugContexts = *debug
	f, ok := checks[*check]
	if !ok || *broker == "" {
		fmt.Fprintf(os.Stderr, "usage: librdkafka-compat -broker HOST:PORT -check {%s}\n", strings.Join(checkNames(), ","))
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	msg, err := f(ctx, *broker)
	if err != nil {
		fmt.Printf("FAIL: %s: %v\n", *check, err)
		os.Exit(1)
	}
	fmt.Printf("OK: %s: %s (librdkafka %s)\n", *check, msg, libVersion())
}

var debugContexts string

func checkNames() []string {
	var names []string
	for n := range checks {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func libVersion() string {
	_, v := kafka.LibraryVersion()
	return v
}

// conf returns a client config for broker with the common settings.
func conf(broker string, kv ...any) *kafka.ConfigMap {
	c := &kafka.ConfigMap{"bootstrap.servers": broker}
	if debugContexts != "" {
		(*c)["debug"] = debugContexts
	}
	for i := 0; i+1 < len(kv); i += 2 {
		(*c)[kv[i].(string)] = kv[i+1]
	}
	return c
}

func createTopic(ctx context.Context, adm *kafka.AdminClient, name string, partitions int, configs map[string]string) error {
	res, err := adm.CreateTopics(ctx, []kafka.TopicSpecification{{
		Topic: name, NumPartitions: partitions, ReplicationFactor: 1, Config: configs,
	}})
	if err != nil {
		return fmt.Errorf("create topic %s: %w", name, err)
	}
	for _, r := range res {
		if r.Error.Code() != kafka.ErrNoError {
			return fmt.Errorf("create topic %s: %v", name, r.Error)
		}
	}
	return nil
}

// watermarks sums high-low over every partition of topic, as
// confluent-kafka-go's own integration tests count a topic's messages.
func watermarks(broker, topic string) (map[int32]int64, error) {
	c, err := kafka.NewConsumer(conf(broker, "group.id", "watermarks"))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	md, err := c.GetMetadata(&topic, false, 10000)
	if err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	out := map[int32]int64{}
	for _, p := range md.Topics[topic].Partitions {
		lo, hi, err := c.QueryWatermarkOffsets(topic, p.ID, 10000)
		if err != nil {
			return nil, fmt.Errorf("watermarks of %s[%d]: %w", topic, p.ID, err)
		}
		out[p.ID] = hi - lo
	}
	return out, nil
}

// consumeAll reads n messages of topic from the beginning with an assigned
// (not subscribed) consumer.
func consumeAll(ctx context.Context, broker, topic string, partitions, n int, kv ...any) ([]*kafka.Message, error) {
	c, err := kafka.NewConsumer(conf(broker, append([]any{"group.id", "reader-" + topic, "enable.auto.commit", false}, kv...)...))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var tps []kafka.TopicPartition
	for p := range partitions {
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: int32(p), Offset: kafka.OffsetBeginning})
	}
	if err := c.Assign(tps); err != nil {
		return nil, err
	}
	var out []*kafka.Message
	for len(out) < n {
		if ctx.Err() != nil {
			return out, fmt.Errorf("read %d of %d messages of %s: %w", len(out), n, topic, ctx.Err())
		}
		m, err := c.ReadMessage(200 * time.Millisecond)
		if err != nil {
			if e, ok := err.(kafka.Error); ok && e.IsTimeout() {
				continue
			}
			return out, fmt.Errorf("read %s: %w", topic, err)
		}
		out = append(out, m)
	}
	return out, nil
}
