// Package lineproto is the module's one implementation of InfluxDB line
// protocol. The agent's hot path uses it to split request bodies and
// datagrams into lines, validate each line, add the agent's tags and a
// nanosecond timestamp, and convert StatsD to line protocol. The result is
// the canonical line the agent ships as one Kafka record (key
// "<run>/<host>", see Sample). The sink and lake replay read those records
// with Decoder, and replay and the agent's collector write canonical lines
// with AppendLine and Encoder.
//
// # Data path
//
// For a body (HTTP /write or /api/v2/write, a UDP datagram, a chunk of a
// stream) the caller does:
//
//  1. prec, err := ParsePrecision(query precision) — once per request.
//  2. Lines(body, fn) — fn gets each line that is not blank or a comment,
//     with its line number. A newline inside a quoted string field value
//     does not end a line.
//  3. In fn: out, s, err := n.Normalize(buf[:0], line, prec, now). On error,
//     keep going (InfluxDB keeps the valid lines of a body) and remember
//     NewLineError(lineNo, line, err) for the first bad line: the HTTP layer
//     answers 400 with it. On success s.Line is the record value, s.Run and
//     s.Host make the key, s.Time the record timestamp, and s.Fields lists
//     each field's key and FieldType (the agent refuses a field whose type
//     changes within a run, as InfluxDB does). Copy s.Line (or append to a
//     batch buffer as dst) before the next call.
//
// For StatsD, each line of a datagram goes through AppendStatsD, and the
// lines it produces go through Lines and Normalize with Nanosecond
// precision like any other.
//
// The package has no goroutines and no locks. A Normalizer holds reusable
// buffers and must be used by one goroutine at a time; Lines, AppendStatsD
// and ParsePrecision are pure functions.
//
// # Canonical line
//
// Normalize keeps the measurement, tag keys and values and the whole field
// section byte for byte as sent (escapes and number spellings included),
// sorts the tags by key (as InfluxDB orders a series key), adds the default
// tags host, job, step and run where the line lacks them (the sender's
// values win), joins the sections with single spaces, and writes the
// timestamp in nanoseconds: the line's converted from the request precision,
// or the receive time truncated to that precision. Normalizing a canonical
// line again with Nanosecond precision gives the same line.
//
// # What is valid
//
// The intersection of what InfluxDB (models.ParsePoints) and
// github.com/influxdata/line-protocol/v2/lineprotocol accept, so whatever
// decodes the records downstream will read them:
//
//   - UTF-8 only; no control characters outside string field values;
//   - measurement: not empty, not starting with '#'; `\,` and `\ ` escapes;
//   - tags: non-empty key and value, `\,` `\=` `\ ` escapes, no duplicate
//     keys ("duplicate tags", as InfluxDB; lineprotocol/v2 does not check);
//   - fields: at least one; values are floats (decimal only: InfluxDB
//     refuses the hex floats, inf and nan that strconv would take), 12i,
//     12u, t/T/true/True/TRUE/f/F/false/False/FALSE, or "strings" where \"
//     and \\ are escapes and raw newlines are allowed; duplicate field keys
//     are allowed (as in both);
//   - timestamp: optional decimal integer, possibly negative, within
//     InfluxDB's range [MinInt64+2, MaxInt64-1] ns after conversion;
//   - a line of at most WithMaxLineBytes bytes (DefaultMaxLineBytes, 64 KiB).
//
// Errors are *SyntaxError values of the classes ErrInvalidMeasurement,
// ErrInvalidTagKey, ErrMissingFields, ErrInvalidNumber and so on, whose
// texts follow InfluxDB's.
//
// # Reading and writing canonical lines
//
// Decoder reads a canonical line into its measurement, tags, typed field
// values and timestamp, without escapes and without allocating; it is
// strict where the canonical form is (single spaces, nothing after the
// timestamp), since a line in another form did not come from Normalize.
// SeriesEnd and DecodeFields let a reader that has seen a line's series
// key decode only the fields. The fuzz tests hold Normalize and Decoder to
// each other both ways: what Normalize writes decodes to what it read, and
// what the Decoder reads Normalize accepts with the same meaning (unless
// it repeats a tag key or has a timestamp outside InfluxDB's range, which
// a reader takes and the agent refuses).
//
// AppendLine writes a point given as maps with sorted tags and fields;
// Encoder writes a body line by line, field by field, into a reused
// buffer. Both escape as Normalize expects and write floats in strconv's
// shortest form.
//
// # Why a hand-written parser
//
// The agent's budget is about 1 µs of CPU per line, of which this package
// gets a fraction. A general decoder (github.com/influxdata/line-protocol/v2,
// which the module used to depend on) returns unescaped tokens and parsed
// values, so producing the canonical line would mean re-escaping and
// re-encoding everything on top; used line by line it also allocates per
// line. This package validates and rewrites in one pass over the raw
// bytes, with no allocation:
//
//	go test -run X -bench 'Normalize|Lines|Body|Decode' -benchmem ./internal/lineproto/
//
// Normalize's fast paths (tags already sorted, ASCII text, numbers and
// timestamps in their usual spellings) each fall back to the general code
// when they do not apply; the tests hold Normalize byte for byte (output,
// Sample, error text) to the earlier implementation without them
// (normalize_ref_test.go), with and without the sort.
//
// # StatsD
//
// AppendStatsD reads name:value|type[|@rate][|#tags][|T<unix s>] (the
// Etsy format with the DogStatsD extensions). Several values may be packed
// into one line as name:1:2:3|ms (DogStatsD 1.1); each becomes a line. The
// mapping, with the metric name as measurement (escaped, dots kept):
//
//	c  counter  name,metric_type=counter value=<value/rate>
//	g  gauge    name,metric_type=gauge value=<value>
//	            a signed value (+3, -3) is a delta in Etsy StatsD; with no
//	            state to apply it to, the agent keeps the number and marks
//	            it: value=-3,delta=true
//	ms h d      name,metric_type=timing value=<value>[,sample_rate=<rate>]
//	            (the rate is kept when below 1 so that counts can be weighted)
//	s  set      name,metric_type=set value="<value>" (a string field)
//
// Values are floats. DogStatsD tags become tags: k:v as k=v, a bare k as
// k=true; empty keys or values are dropped, the first of repeated keys
// wins, and a sender's metric_type is replaced by the converter's. A T
// section becomes the timestamp; otherwise the line gets the receive time
// in Normalize. Other sections (c:<container>) are ignored; events (_e) and
// service checks (_sc) are refused.
package lineproto
