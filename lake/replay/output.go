package replay

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// String names the position for people: the sample time with its source
// partition and offset, or only the source position of a raw record.
func (p Position) String() string {
	if p.Time == 0 {
		return fmt.Sprintf("source partition %d offset %d", p.Partition, p.Offset)
	}
	return fmt.Sprintf("sample time %s (partition %d offset %d)", time.Unix(0, p.Time).UTC().Format(time.RFC3339Nano), p.Partition, p.Offset)
}

// finishTimeout bounds Finish: long enough for the last acknowledgements
// and a commit, short enough that Ctrl-C still ends the process.
const finishTimeout = 30 * time.Second

// Finish closes out even when ctx was cancelled (Ctrl-C): what was
// produced is committed, so a rerun resumes after it. It returns Close's
// count of durable records and error.
func Finish(ctx context.Context, out Output) (int64, error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	return out.Close(cctx)
}

// RunInto produces every sample of the replay into out, in order, leaving
// out those an earlier run of the job committed. tick, if not nil, is
// called for every sample, skipped ones included. With a pacer the samples
// are spaced out like the original, and a transaction is committed before
// a pause that would outlast its commit interval rather than left open
// (invisible, and aborted by the broker after its timeout).
func (r *Replay) RunInto(ctx context.Context, out Output, pacer *Pacer, tick func()) error {
	tp, _ := out.(*TxnProducer)
	return r.Run(ctx, func(s *Sample) error {
		if tick != nil {
			tick()
		}
		if out.Skip(SamplePosition(s)) {
			return nil
		}
		if pacer != nil {
			if tp != nil {
				if err := tp.Idle(ctx, pacer.Delay(s.Time)); err != nil {
					return err
				}
			}
			if err := pacer.Wait(ctx, s.Time); err != nil {
				return err
			}
		}
		return out.Sample(ctx, s)
	})
}

// RunInto produces every raw record into out, in order, leaving out those
// an earlier run of the job committed. tick, if not nil, is called for
// every record, skipped ones included.
func (rr *RawRecords) RunInto(ctx context.Context, out Output, tick func()) error {
	return rr.Run(ctx, func(rec *kgo.Record) error {
		if tick != nil {
			tick()
		}
		if out.Skip(RecordPosition(rec)) {
			return nil
		}
		return out.Record(ctx, rec)
	})
}
