package replay

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Output is where a replay or backfill sends its records: a Producer
// (idempotent) or a TxnProducer (transactions, resumable).
type Output interface {
	// Skip reports whether the record at pos was already committed by an
	// earlier run of the same job and must not be produced again.
	Skip(pos Position) bool
	// Sample produces a telemetry sample as its line.
	Sample(ctx context.Context, s *Sample) error
	// Record produces a raw record; its Partition and Offset are the
	// source's, its position.
	Record(ctx context.Context, rec *kgo.Record) error
	// Acked is how many records are durable in the topic so far: acknowledged
	// (idempotent) or committed (transactions).
	Acked() int64
	// Close finishes: waits for acknowledgements, commits the open
	// transaction, and returns Acked with the first error.
	Close(ctx context.Context) (int64, error)
}

// Position is a record's place in the order a replay or backfill emits:
// telemetry by sample time, source partition, source offset; raw records
// by source partition and offset (Time 0). Positions strictly increase
// along a run, which is what lets a rerun skip what an earlier run
// committed.
type Position struct {
	Time      int64 `json:"time"`
	Partition int32 `json:"partition"`
	Offset    int64 `json:"offset"`
}

// Compare orders positions: -1, 0 or +1.
func (p Position) Compare(q Position) int {
	return cmp.Or(cmp.Compare(p.Time, q.Time), cmp.Compare(p.Partition, q.Partition), cmp.Compare(p.Offset, q.Offset))
}

// SamplePosition is the position of a telemetry sample.
func SamplePosition(s *Sample) Position {
	return Position{Time: s.Time, Partition: s.Partition, Offset: s.Offset}
}

// RecordPosition is the position of a raw record read by RawRecords (its
// source partition and offset).
func RecordPosition(rec *kgo.Record) Position {
	return Position{Partition: rec.Partition, Offset: rec.Offset}
}

// Skip never skips: the idempotent producer keeps no progress.
func (p *Producer) Skip(Position) bool { return false }

// ErrNoTransactions is returned by OpenTxn when the broker does not offer
// the transaction API keys (24-26, 28) in ApiVersions.
var ErrNoTransactions = errors.New("the broker does not support transactions")

// Defaults of TxnConfig.
const (
	DefaultCommitRecords  = 10000
	DefaultCommitInterval = time.Second
	DefaultTxnTimeout     = time.Minute
)

// TxnConfig configures a TxnProducer.
type TxnConfig struct {
	// Brokers to connect to (required).
	Brokers []string
	// ClientOpts are extra franz-go options of the producer (TLS, SASL).
	ClientOpts []kgo.Opt
	// Topic is the output topic (required).
	Topic string
	// TransactionalID names the job (required). A second producer with the
	// same id fences the first; the job's progress is kept under it.
	TransactionalID string
	// Job describes what the job selects (run, filters, source and output
	// topics). Progress stored under TransactionalID by a job with another
	// description is refused, so an id reused for other data does not skip
	// records it never produced.
	Job string
	// CommitRecords commits a transaction after this many records
	// (default DefaultCommitRecords).
	CommitRecords int
	// CommitInterval commits a transaction once it has been open this long,
	// checked when a record is emitted and by Idle (default
	// DefaultCommitInterval).
	CommitInterval time.Duration
	// TxnTimeout is the transaction timeout sent to the broker: a
	// transaction open longer is aborted by the broker (default
	// DefaultTxnTimeout; at most 15 minutes; more than 2×CommitInterval).
	TxnTimeout time.Duration
	// Restart ignores the stored progress and produces everything again.
	Restart bool
	// Logger receives commits and resumes; nil discards them.
	Logger *slog.Logger
}

// Validate checks the config and fills in defaults.
func (c *TxnConfig) Validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("no brokers to produce to")
	}
	if c.Topic == "" {
		return errors.New("no topic to produce to")
	}
	if c.TransactionalID == "" {
		return errors.New("no transactional id")
	}
	c.CommitRecords = cmp.Or(c.CommitRecords, DefaultCommitRecords)
	c.CommitInterval = cmp.Or(c.CommitInterval, DefaultCommitInterval)
	c.TxnTimeout = cmp.Or(c.TxnTimeout, DefaultTxnTimeout)
	if c.CommitRecords < 0 {
		return fmt.Errorf("commit every %d records: want a positive count", c.CommitRecords)
	}
	if c.CommitInterval < 0 {
		return fmt.Errorf("commit interval %v is negative", c.CommitInterval)
	}
	if c.TxnTimeout > 15*time.Minute || c.TxnTimeout < time.Second {
		return fmt.Errorf("transaction timeout %v: want 1s to 15m", c.TxnTimeout)
	}
	if c.TxnTimeout <= 2*c.CommitInterval {
		return fmt.Errorf("transaction timeout %v must exceed twice the commit interval %v, or the broker aborts transactions before they commit", c.TxnTimeout, c.CommitInterval)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// progress is what a committed transaction records with its output, as
// the metadata of an offset the transaction commits for the group named
// TransactionalID (topic Topic, partition 0; the offset itself is the
// number of records committed so far).
type progress struct {
	Job  string   `json:"job"` // hash of TxnConfig.Job
	Last Position `json:"last"`
}

// TxnProducer produces into one topic inside Kafka transactions and
// records, in each transaction, the position of its last record, so
// output and progress become visible together. A crash leaves the open
// transaction to be aborted (by the broker's timeout, or at once by the
// next producer with the same transactional id); a rerun resumes after
// the last committed position.
//
// Record, Sample, Skip and Close are called from one goroutine; the
// delivery callbacks only touch mu and atomics.
type TxnProducer struct {
	cfg     TxnConfig
	cl      *kgo.Client
	job     string
	resume  Position // last position committed by earlier runs
	resumed bool     // resume is valid
	base    int64    // records committed by earlier runs

	// State of the caller's goroutine.
	inTxn    int64 // records produced in the open transaction
	txnStart time.Time
	open     bool
	last     Position
	total    int64 // base + committed by this run
	buf      []byte

	committed atomic.Int64 // records committed by this run
	txns      atomic.Int64 // transactions committed by this run
	skipped   atomic.Int64

	fail firstFailure
}

// OpenTxn connects, checks that the broker supports transactions
// (ErrNoTransactions otherwise), fences any earlier producer with the same
// transactional id — the broker aborts its open transaction — and reads
// the job's committed progress.
func OpenTxn(ctx context.Context, cfg TxnConfig) (*TxnProducer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(cfg.Job))
	t := &TxnProducer{cfg: cfg, job: hex.EncodeToString(sum[:8])}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(cfg.Brokers...), kgo.DefaultProduceTopic(cfg.Topic),
		kgo.TransactionalID(cfg.TransactionalID), kgo.TransactionTimeout(cfg.TxnTimeout),
		kgo.ProducerLinger(5 * time.Millisecond), kgo.MaxBufferedRecords(max(10000, cfg.CommitRecords+1))}, cfg.ClientOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("cannot create a transactional producer for %v: %w", cfg.Brokers, err)
	}
	t.cl = cl
	if err := t.init(ctx); err != nil {
		cl.Close()
		return nil, err
	}
	return t, nil
}

func (t *TxnProducer) init(ctx context.Context) error {
	cfg := t.cfg
	vreq := kmsg.NewPtrApiVersionsRequest()
	vreq.ClientSoftwareName, vreq.ClientSoftwareVersion = "simtel", "1"
	vresp, err := vreq.RequestWith(ctx, t.cl)
	if err != nil {
		return fmt.Errorf("cannot reach the brokers %v (is the broker running?): %w", cfg.Brokers, err)
	}
	for _, key := range []int16{24, 25, 26, 28} {
		if !slices.ContainsFunc(vresp.ApiKeys, func(k kmsg.ApiVersionsResponseApiKey) bool { return k.ApiKey == key }) {
			return fmt.Errorf("%w: brokers %v do not offer API key %d (%s) in ApiVersions; run again with --no-transactions to use the idempotent producer (a crash then leaves partial output and a rerun duplicates it)",
				ErrNoTransactions, cfg.Brokers, key, kmsg.NameForKey(key))
		}
	}
	// InitProducerID: fences a zombie of a crashed run and has the broker
	// abort its open transaction before the progress is read.
	if _, _, err := t.cl.ProducerID(ctx); err != nil {
		return fmt.Errorf("cannot initialize the transactional producer %s on %v: %w", cfg.TransactionalID, cfg.Brokers, err)
	}
	adm := kadm.NewClient(t.cl)
	offs, err := t.fetchProgress(ctx, adm)
	if err != nil {
		return err
	}
	o, ok := offs.Lookup(cfg.Topic, 0)
	if !ok || o.At < 0 {
		return nil
	}
	var pr progress
	if err := json.Unmarshal([]byte(o.Metadata), &pr); err != nil {
		return fmt.Errorf("group %s holds an offset for %s that is not the progress of a simtel job (%q): pick another --transactional-id", cfg.TransactionalID, cfg.Topic, o.Metadata)
	}
	if cfg.Restart {
		cfg.Logger.Info("restarting: ignoring the committed progress", "transactional_id", cfg.TransactionalID, "committed", o.At, "last", pr.Last)
		return nil
	}
	if pr.Job != t.job {
		return fmt.Errorf("transactional id %s holds the progress of another selection (another run, filter or topic): use another --transactional-id, or --restart to produce everything again", cfg.TransactionalID)
	}
	t.resume, t.resumed, t.base = pr.Last, true, o.At
	t.total = o.At
	cfg.Logger.Info("resuming after the last committed transaction", "transactional_id", cfg.TransactionalID, "committed", o.At, "last", pr.Last)
	return nil
}

// fetchProgress reads the job group's offsets. The broker answers
// UNSTABLE_OFFSET_COMMIT while a transaction with offsets for it is still
// ending; that is retried.
func (t *TxnProducer) fetchProgress(ctx context.Context, adm *kadm.Client) (kadm.OffsetResponses, error) {
	for {
		offs, err := adm.FetchOffsets(ctx, t.cfg.TransactionalID)
		if err == nil {
			err = offs.Error()
		}
		if err == nil {
			return offs, nil
		}
		if !errors.Is(err, kerr.UnstableOffsetCommit) {
			return nil, fmt.Errorf("cannot read the progress of job %s (offsets of group %s): %w", t.cfg.TransactionalID, t.cfg.TransactionalID, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Resumed returns the last position earlier runs committed and how many
// records they committed; ok is false for a fresh job.
func (t *TxnProducer) Resumed() (last Position, records int64, ok bool) {
	return t.resume, t.base, t.resumed
}

// Skip reports whether pos was committed by an earlier run.
func (t *TxnProducer) Skip(pos Position) bool {
	if t.resumed && pos.Compare(t.resume) <= 0 {
		t.skipped.Add(1)
		return true
	}
	return false
}

// Skipped is how many records Skip skipped.
func (t *TxnProducer) Skipped() int64 { return t.skipped.Load() }

// Acked is how many records this run committed.
func (t *TxnProducer) Acked() int64 { return t.committed.Load() }

// Transactions is how many transactions this run committed.
func (t *TxnProducer) Transactions() int64 { return t.txns.Load() }

func (t *TxnProducer) done(_ *kgo.Record, err error) {
	switch {
	case err == nil:
	case fenced(err):
		t.fail.keep(t.fencedErr(err))
	default:
		t.fail.keep(produceErr(t.cfg.Topic, err))
	}
}

// fenced reports whether err means a newer producer with the same
// transactional id took over.
func fenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch)
}

func (t *TxnProducer) fencedErr(err error) error {
	return fmt.Errorf("another run with transactional id %s took over this job (this run is fenced and stops; its open transaction is aborted): %w", t.cfg.TransactionalID, err)
}

// Sample produces s as its line (key "<run>/<host>", timestamp the sample
// time) at its position.
func (t *TxnProducer) Sample(ctx context.Context, s *Sample) error {
	rec, err := sampleRecord(s)
	if err != nil {
		return err
	}
	return t.produce(ctx, rec, SamplePosition(s))
}

// Record produces a raw record at its source position.
func (t *TxnProducer) Record(ctx context.Context, rec *kgo.Record) error {
	return t.produce(ctx, rec, RecordPosition(rec))
}

func (t *TxnProducer) produce(ctx context.Context, rec *kgo.Record, pos Position) error {
	if err := t.fail.get(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if t.inTxn > 0 && pos.Compare(t.last) <= 0 {
		return fmt.Errorf("record at %+v does not come after %+v: the job's order is broken", pos, t.last)
	}
	if !t.open {
		if err := t.cl.BeginTransaction(); err != nil {
			return fmt.Errorf("cannot begin a transaction of %s: %w", t.cfg.TransactionalID, err)
		}
		t.open, t.txnStart = true, time.Now()
	}
	rec.Topic, rec.Partition, rec.Offset = t.cfg.Topic, 0, 0
	// A cancelled ctx (Ctrl-C) stops the caller, but the records already
	// handed over are still sent, so Close can commit them and a rerun
	// resumes after them.
	// The buffer holds a whole transaction (MaxBufferedRecords), so
	// Produce never waits for space.
	pctx := context.WithoutCancel(ctx)
	rec.Context = pctx
	t.cl.Produce(pctx, rec, t.done)
	t.inTxn++
	t.last = pos
	if t.inTxn >= int64(t.cfg.CommitRecords) || time.Since(t.txnStart) >= t.cfg.CommitInterval {
		return t.commit(ctx)
	}
	return nil
}

// Idle commits the open transaction if it is due; a caller that is about
// to wait (pacing) calls it so output does not stay invisible, and the
// broker does not time the transaction out, while nothing is produced.
func (t *TxnProducer) Idle(ctx context.Context, wait time.Duration) error {
	if t.open && t.inTxn > 0 && time.Since(t.txnStart)+wait >= t.cfg.CommitInterval {
		return t.commit(ctx)
	}
	return nil
}

// commit ends the open transaction: every record acknowledged, then the
// progress offset added to it, then EndTxn commit. Any failure aborts it.
//
// It runs to its end even when ctx is cancelled (Ctrl-C stops the job
// between records, not inside a commit), bounded by the transaction
// timeout, after which the broker aborts the transaction anyway.
func (t *TxnProducer) commit(ctx context.Context) error {
	if !t.open {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.cfg.TxnTimeout)
	defer cancel()
	if err := t.commitOrAbort(ctx); err != nil {
		return err
	}
	t.total += t.inTxn
	t.committed.Add(t.inTxn)
	t.txns.Add(1)
	t.cfg.Logger.Debug("transaction committed", "transactional_id", t.cfg.TransactionalID, "records", t.inTxn, "total", t.total, "last", t.last)
	t.inTxn, t.open = 0, false
	return nil
}

func (t *TxnProducer) commitOrAbort(ctx context.Context) error {
	err := t.cl.Flush(ctx)
	if ferr := t.fail.get(); ferr != nil {
		err = ferr
	}
	if err == nil && t.inTxn > 0 {
		err = t.addProgress(ctx)
	}
	if err != nil {
		t.abort(ctx)
		return fmt.Errorf("transaction of %s aborted: %w", t.cfg.TransactionalID, err)
	}
	if err := t.cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.open = false
		if fenced(err) {
			// A newer run fenced this one between its last write and
			// the commit: the transaction is aborted by the broker.
			return t.fencedErr(err)
		}
		return fmt.Errorf("cannot commit the transaction of %s (its %d records are not visible to read_committed consumers; run again to resume): %w", t.cfg.TransactionalID, t.inTxn, err)
	}
	return nil
}

// addProgress sends AddOffsetsToTxn and TxnOffsetCommit: the job's group
// gets offset total+inTxn with the last position as metadata, when (and
// only if) the transaction commits.
func (t *TxnProducer) addProgress(ctx context.Context) error {
	pid, epoch, err := t.cl.ProducerID(ctx)
	if err != nil {
		return err
	}
	group := t.cfg.TransactionalID
	areq := kmsg.NewPtrAddOffsetsToTxnRequest()
	areq.TransactionalID, areq.ProducerID, areq.ProducerEpoch, areq.Group = group, pid, epoch, group
	aresp, err := areq.RequestWith(ctx, t.cl)
	if err != nil {
		return fmt.Errorf("cannot add the progress to the transaction: %w", err)
	}
	if err := kerr.ErrorForCode(aresp.ErrorCode); err != nil {
		if fenced(err) {
			return t.fencedErr(err)
		}
		return fmt.Errorf("cannot add the progress to the transaction: %w", err)
	}
	meta, err := json.Marshal(progress{Job: t.job, Last: t.last})
	if err != nil {
		return err
	}
	ms := string(meta)
	oreq := kmsg.NewPtrTxnOffsetCommitRequest()
	oreq.TransactionalID, oreq.Group, oreq.ProducerID, oreq.ProducerEpoch = t.cfg.TransactionalID, group, pid, epoch
	oreq.Generation, oreq.MemberID = -1, ""
	rt := kmsg.NewTxnOffsetCommitRequestTopic()
	rt.Topic = t.cfg.Topic
	rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset, rp.LeaderEpoch, rp.Metadata = 0, t.total+t.inTxn, -1, &ms
	rt.Partitions = append(rt.Partitions, rp)
	oreq.Topics = append(oreq.Topics, rt)
	oresp, err := oreq.RequestWith(ctx, t.cl)
	if err != nil {
		return fmt.Errorf("cannot record the progress in the transaction: %w", err)
	}
	for _, tp := range oresp.Topics {
		for _, p := range tp.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				if fenced(err) {
					return t.fencedErr(err)
				}
				return fmt.Errorf("cannot record the progress in the transaction: %w", err)
			}
		}
	}
	return nil
}

func (t *TxnProducer) abort(ctx context.Context) {
	if !t.open {
		return
	}
	t.open = false
	if err := t.cl.AbortBufferedRecords(ctx); err != nil {
		t.cfg.Logger.Warn("cannot drop the buffered records", "transactional_id", t.cfg.TransactionalID, "err", err)
	}
	if err := t.cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.cfg.Logger.Warn("cannot abort the transaction; the broker aborts it after the transaction timeout", "transactional_id", t.cfg.TransactionalID, "timeout", t.cfg.TxnTimeout, "err", err)
	}
}

// Close commits the open transaction and closes the client. It returns
// how many records this run committed.
func (t *TxnProducer) Close(ctx context.Context) (int64, error) {
	err := t.commit(ctx)
	t.cl.Close()
	return t.committed.Load(), err
}

// Abort drops the open transaction (nothing of it becomes visible) and
// closes the client.
func (t *TxnProducer) Abort(ctx context.Context) int64 {
	t.abort(ctx)
	t.cl.Close()
	return t.committed.Load()
}
