package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// EnsureTopics creates JobsTopic (the broker's default retention) and
// RunsTopic (cleanup.policy=compact: one record per run survives) when
// they do not exist yet. Topics that exist are left as they are.
func EnsureTopics(ctx context.Context, cl *kgo.Client) error {
	adm := kadm.NewClient(cl)
	td, err := adm.ListTopics(ctx, JobsTopic, RunsTopic)
	if err != nil {
		return fmt.Errorf("cannot list topics %s and %s: %w", JobsTopic, RunsTopic, err)
	}
	want := []struct {
		topic   string
		configs map[string]*string
	}{
		{JobsTopic, nil},
		{RunsTopic, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}},
	}
	for _, w := range want {
		if d, ok := td[w.topic]; ok && d.Err == nil {
			continue
		}
		resp, err := adm.CreateTopic(ctx, -1, -1, w.configs, w.topic)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("cannot create topic %s: %w", w.topic, err)
		}
	}
	return nil
}

// Publish validates e, fills in its time when zero, and produces it to
// JobsTopic with the run as key and the event time as record timestamp,
// creating the scheduler's topics first when they are missing. It returns
// once the broker has acknowledged the record or ctx ends.
func Publish(ctx context.Context, cl *kgo.Client, e Event) error {
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	if err := e.Validate(); err != nil {
		return fmt.Errorf("cannot publish job event: %w", err)
	}
	if err := EnsureTopics(ctx, cl); err != nil {
		return err
	}
	v, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("cannot encode job event: %w", err)
	}
	rec := &kgo.Record{Topic: JobsTopic, Key: []byte(e.Run), Value: v, Timestamp: e.Time}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("cannot publish %s event of run %s to topic %s: %w", e.Type, e.Run, JobsTopic, err)
	}
	return nil
}

// writeRun produces r to RunsTopic and waits for the acknowledgement.
func writeRun(ctx context.Context, cl *kgo.Client, r Run) error {
	v, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("cannot encode run %s: %w", r.Run, err)
	}
	rec := &kgo.Record{Topic: RunsTopic, Key: []byte(r.Run), Value: v}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("cannot write run %s to topic %s: %w", r.Run, RunsTopic, err)
	}
	return nil
}
