package schema

import (
	"bytes"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/zstd"
)

// Header is one Kafka record header of a raw object.
type Header struct {
	Key   string `parquet:"key"`
	Value []byte `parquet:"value"`
}

// RawRow is the schema of raw objects: records of topics that are not
// decoded, kept whole.
type RawRow struct {
	Partition int32     `parquet:"_partition"`
	Offset    int64     `parquet:"_offset,delta"`
	Timestamp time.Time `parquet:"timestamp,timestamp(microsecond:utc)"`
	Key       []byte    `parquet:"key,optional"`
	Value     []byte    `parquet:"value,optional"`
	Headers   []Header  `parquet:"headers,list"`
}

// RawColumns are the column names of a raw object, in file order.
var RawColumns = []string{"_partition", "_offset", "timestamp", "key", "value", "headers"}

// DeadLetterRow is the schema of dead-letter objects: telemetry records the
// sink could not turn into a row, with the reason.
type DeadLetterRow struct {
	Partition int32     `parquet:"_partition"`
	Offset    int64     `parquet:"_offset,delta"`
	Timestamp time.Time `parquet:"timestamp,timestamp(microsecond:utc)"`
	Key       []byte    `parquet:"key,optional"`
	Value     []byte    `parquet:"value,optional"`
	Reason    string    `parquet:"reason"`
}

// DeadLetterColumns are the column names of a dead-letter object, in file
// order.
var DeadLetterColumns = []string{"_partition", "_offset", "timestamp", "key", "value", "reason"}

var zstdCodec = zstd.Codec{Level: zstd.SpeedFastest}

// recordOptions are the writer options of raw and dead-letter objects
// (small, and written with parquet-go): the same compression, row group
// size and page size as telemetry objects.
func recordOptions() []parquet.WriterOption {
	return []parquet.WriterOption{
		parquet.Compression(&zstdCodec),
		parquet.CreatedBy("simtel-sink", "1", ""),
		parquet.MaxRowsPerRowGroup(RowGroupRows),
		parquet.PageBufferSize(256 << 10),
	}
}

// EncodeRecords writes rows (RawRow or DeadLetterRow, in offset order) of
// flush o as one object.
func EncodeRecords[T RawRow | DeadLetterRow](rows []T, o Origin) ([]byte, error) {
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[T](&buf, recordOptions()...)
	for _, m := range o.Metadata() {
		w.SetKeyValueMetadata(m[0], m[1])
	}
	for lo := 0; lo < len(rows); lo += RowGroupRows {
		if _, err := w.Write(rows[lo:min(lo+RowGroupRows, len(rows))]); err != nil {
			return nil, err
		}
		if err := w.Flush(); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
