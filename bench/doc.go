// Package bench holds simtel's load generators and the report side of the
// side-by-side benchmark (bench/compare.sh). The generators speak the Kafka
// protocol through franz-go, so they measure any Kafka-compatible broker.
//
// # Data path
//
// Produce: every producer is its own kgo client with its own sending
// goroutine. The sender stamps each record with the time of its Produce
// call; kgo calls the record's promise (serially per client) on the
// acknowledgement, and the promise records the elapsed time in that
// producer's Latency and adds to the run's meter. Record structs come from a
// sync.Pool and go back to it in the promise; record values are windows
// into one buffer of random bytes, so the generator allocates almost nothing
// per record.
//
// Consume: in poll mode every consumer is a kgo client read with
// PollFetches; records are decoded by kgo and their key and value bytes
// counted. In raw mode (rawfetch.go) every consumer client sends
// kmsg.FetchRequests itself, one at a time per leader, and WalkBatches reads
// only the batch headers of the response: the next offsets, record counts
// and sizes. Both modes end at the end offsets listed when the run began,
// after a record count, or when nothing arrives for a while.
//
// Report: compare.sh runs the generators with --json, the disk probe and
// natscli, and feeds each output to AddStep, which parses it (natscli's text
// through ParseJetStreamBench) into a Run file. Publish summarizes the run,
// writes results/<id>.json and the SVG chart, and rewrites the results
// section of docs/produce-consume.md from every run in the results directory.
//
// # Goroutines
//
// Produce and Consume start all their goroutines themselves (senders or
// readers, and one watch that prints progress and detects stalls or idleness)
// and return only after all have exited. kgo's own goroutines end with
// Client.Close, which the run calls before returning.
//
// # Locks
//
// Latency.mu guards one histogram; Merge takes the source's lock, copies,
// releases it, then takes the destination's, so no two are held at once.
// consumeRun.mu guards arrival bookkeeping and is never held while calling
// out. Everything else shared is atomic.
package bench
