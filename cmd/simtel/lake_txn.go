package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/pflag"

	"github.com/simtel/simtel/lake/replay"
)

// lakeTxnFlags are the output flags of replay --to-topic and backfill.
type lakeTxnFlags struct {
	noTxn    bool
	id       string
	records  int
	interval time.Duration
	timeout  time.Duration
	restart  bool
	sec      clientSecFlags
}

func (t *lakeTxnFlags) add(fl *pflag.FlagSet, idHelp string) {
	fl.BoolVar(&t.noTxn, "no-transactions", false, "produce with the idempotent producer, without transactions (for brokers that lack them): a crash leaves partial output and a rerun starts over, duplicating it")
	fl.StringVar(&t.id, "transactional-id", "", "transactional id of the job, also the name of the group that keeps its progress (default: "+idHelp+")")
	fl.IntVar(&t.records, "commit-records", replay.DefaultCommitRecords, "commit a transaction after this many records")
	fl.DurationVar(&t.interval, "commit-interval", replay.DefaultCommitInterval, "commit a transaction once it has been open this long: how late read_committed consumers see the output")
	fl.DurationVar(&t.timeout, "transaction-timeout", replay.DefaultTxnTimeout, "the broker aborts a transaction open longer than this (a crashed run's transaction at the latest after this; a rerun aborts it at once)")
	fl.BoolVar(&t.restart, "restart", false, "ignore the job's committed progress and produce everything again (duplicates what earlier runs committed)")
	t.sec.register(fl)
}

// open starts the output: a transactional producer resuming the job
// defID/job, or with --no-transactions the idempotent one. It reports a
// resume on stderr.
func (t *lakeTxnFlags) open(ctx context.Context, brokers []string, topic, defID, job string, log *slog.Logger, stderr io.Writer) (replay.Output, error) {
	sec, err := t.sec.opts()
	if err != nil {
		return nil, err
	}
	if t.noTxn {
		if t.restart || t.id != "" {
			return nil, errors.New("--restart and --transactional-id need transactions: drop --no-transactions")
		}
		return replay.NewProducer(brokers, topic, sec...)
	}
	id := t.id
	if id == "" {
		id = defID
	}
	tp, err := replay.OpenTxn(ctx, replay.TxnConfig{Brokers: brokers, ClientOpts: sec, Topic: topic, TransactionalID: id, Job: job,
		CommitRecords: t.records, CommitInterval: t.interval, TxnTimeout: t.timeout, Restart: t.restart, Logger: log})
	if err != nil {
		return nil, err
	}
	if last, n, ok := tp.Resumed(); ok {
		fmt.Fprintf(stderr, "resuming job %s: %d records committed by earlier runs, up to %s\n", id, n, last)
	}
	return tp, nil
}

// openInto is open followed by the job's metrics on metricsListen (with
// stats, if any); stop ends the metrics server. On failure out is finished.
func (t *lakeTxnFlags) openInto(ctx context.Context, brokers []string, topic, defID, job, metricsListen string, stats *replay.Stats, log *slog.Logger, stderr io.Writer) (out replay.Output, stop func(), err error) {
	out, err = t.open(ctx, brokers, topic, defID, job, log, stderr)
	if err != nil {
		return nil, nil, err
	}
	stop, err = serveLakeMetrics(ctx, metricsListen, stats, out)
	if err != nil {
		return nil, nil, err
	}
	return out, stop, nil
}

// finishInto waits for out's last records after the run that produced into
// it ended with runErr, and ends prog. It returns how many records are
// durable and, on a failure of the run or of the finish, an error that says
// how far what (e.g. "backfill into T") got, counting in unit.
func finishInto(ctx context.Context, out replay.Output, prog *lakeProgress, runErr error, what, unit string) (int64, error) {
	acked, err := replay.Finish(ctx, out)
	prog.finish()
	if err = errors.Join(runErr, err); err != nil {
		return acked, fmt.Errorf("%s stopped after %d %s %s: %w", what, acked, durableWord(out), unit, err)
	}
	return acked, nil
}

// skippedNote says how many records an earlier run had committed.
func skippedNote(out replay.Output) string {
	if tp, ok := out.(*replay.TxnProducer); ok && tp.Skipped() > 0 {
		return fmt.Sprintf(" (%d skipped: committed by an earlier run)", tp.Skipped())
	}
	return ""
}

// durableWord says what Acked counts: committed with transactions,
// acknowledged without.
func durableWord(out replay.Output) string {
	if _, ok := out.(*replay.TxnProducer); ok {
		return "committed"
	}
	return "acknowledged"
}
