package replay

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/simtel/simtel/internal/lineproto"
)

// Sample is one telemetry sample as the lake and the broker hold it: one
// canonical line-protocol line, or one row of a telemetry object.
type Sample struct {
	Measurement string
	Tags        map[string]string
	// Fields maps a field key to float64, int64, uint64, bool or string.
	Fields    map[string]any
	Time      int64 // Unix nanoseconds
	Partition int32
	Offset    int64
}

// Less orders samples as replay emits them: by time, then partition, then
// offset. Within a partition offsets are unique, so this is a total order.
func Less(a, b *Sample) bool {
	if a.Time != b.Time {
		return a.Time < b.Time
	}
	if a.Partition != b.Partition {
		return a.Partition < b.Partition
	}
	return a.Offset < b.Offset
}

// AppendLine appends s as one canonical line-protocol line, as the agent
// ships it (see lineproto.AppendLine): tags and fields sorted by key, empty
// tag values left out, the exact nanosecond timestamp, no trailing newline.
func AppendLine(dst []byte, s *Sample) ([]byte, error) {
	b, err := lineproto.AppendLine(dst, s.Measurement, s.Tags, s.Fields, s.Time)
	if err != nil {
		return dst, fmt.Errorf("cannot write sample %q at %d (partition %d offset %d) as line protocol: %w", s.Measurement, s.Time, s.Partition, s.Offset, err)
	}
	return b, nil
}

// ParseLine decodes one canonical line-protocol line, as the agent ships
// and the sink reads it, into a Sample (partition and offset left zero). A
// line without a timestamp is refused: every line the agent ships carries
// one.
//
// Records another producer wrote may spell a valid line in a form the agent
// never writes (tags out of order, a trailing newline, extra spaces): such
// a line is read through the agent's normalisation rather than refused.
func ParseLine(line []byte) (Sample, error) {
	var d lineproto.Decoder
	if err := d.Decode(line); err != nil {
		canon, hasTime, nerr := normalize(line)
		if nerr != nil || d.Decode(canon) != nil {
			return Sample{}, err
		}
		if !hasTime {
			return Sample{}, errNoTimestamp
		}
	}
	if !d.HasTime {
		return Sample{}, errNoTimestamp
	}
	s := Sample{Measurement: string(d.Measurement), Tags: make(map[string]string, len(d.Tags)), Fields: make(map[string]any, len(d.Fields)), Time: d.Time}
	for _, t := range d.Tags {
		s.Tags[string(t.Key)] = string(t.Value)
	}
	for i := range d.Fields {
		s.Fields[string(d.Fields[i].Key)] = d.Fields[i].Interface()
	}
	return s, nil
}

var errNoTimestamp = errors.New("line has no timestamp")

// noTime stands for "no timestamp" when a line is normalised: the
// normaliser gives a line without one this time, and no sample carries it.
var noTime = time.Unix(0, math.MinInt64)

// normalize returns line in the canonical form, and whether the line
// carried its own timestamp.
func normalize(line []byte) (canon []byte, hasTime bool, err error) {
	n, err := lineproto.NewNormalizer(lineproto.DefaultTags{})
	if err != nil {
		return nil, false, err
	}
	canon, smp, err := n.Normalize(nil, line, lineproto.Nanosecond, noTime)
	if err != nil {
		return nil, false, err
	}
	return canon, smp.Time != noTime.UnixNano(), nil
}

// String is the sample's line, for messages and tests.
func (s *Sample) String() string {
	b, err := AppendLine(nil, s)
	if err != nil {
		return strings.TrimSpace(err.Error())
	}
	return string(b)
}
