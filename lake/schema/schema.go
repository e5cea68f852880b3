// Package schema is the one definition of the lake's Parquet objects: the
// column layout of a telemetry object (time, one column per tag and per
// field, _partition, _offset, _time_ns, sorted by name), the Parquet types
// of those columns, the key-value metadata readers and the catalog rely on,
// the writer properties, and the writers that produce the objects. The
// sink, compaction and the test-data generator all write through it, so an
// object's layout cannot differ with who wrote it.
//
// A telemetry object:
//
//	time        INT64 TIMESTAMP(MICROS, UTC)  required
//	_partition  INT32 INT(32, signed)         required
//	_offset     INT64 INT(64, signed)         required, delta-encoded
//	_time_ns    INT64 INT(64, signed)         required, delta-encoded
//	<tag>       BYTE_ARRAY STRING             optional, dictionary-encoded
//	<field>     by type (see Type)            optional
//
// with the key-value metadata simtel.topic, simtel.partition,
// simtel.first_offset, simtel.last_offset (the flush it came from) and
// simtel.tags (its tag columns, comma-separated, in file order).
package schema

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	pq "github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	pqschema "github.com/apache/arrow-go/v18/parquet/schema"
)

// The fixed columns of a telemetry object. A tag or field may not use
// these names.
const (
	Time      = "time"
	Partition = "_partition"
	Offset    = "_offset"
	TimeNS    = "_time_ns"
)

// Reserved reports whether name is one of the fixed columns.
func Reserved(name string) bool {
	switch name {
	case Time, Partition, Offset, TimeNS:
		return true
	}
	return false
}

// Key-value metadata of every lake object.
const (
	// MetaTags lists the tag columns of a telemetry object,
	// comma-separated (line protocol needs to tell tags from string
	// fields; Parquet types do not).
	MetaTags        = "simtel.tags"
	MetaTopic       = "simtel.topic"
	MetaPartition   = "simtel.partition"
	MetaFirstOffset = "simtel.first_offset"
	MetaLastOffset  = "simtel.last_offset"
)

// Origin is the flush an object comes from: a topic partition's inclusive
// offset range.
type Origin struct {
	Topic       string
	Partition   int32
	First, Last int64
}

// Metadata is the key-value metadata of an object of o, in file order.
func (o Origin) Metadata() [][2]string {
	return [][2]string{
		{MetaTopic, o.Topic},
		{MetaPartition, strconv.Itoa(int(o.Partition))},
		{MetaFirstOffset, strconv.FormatInt(o.First, 10)},
		{MetaLastOffset, strconv.FormatInt(o.Last, 10)},
	}
}

// Type is the type of a field column, as line protocol types a field value.
type Type uint8

// Field types. Their names (String) are the ones the catalog records.
const (
	Float  Type = iota + 1 // DOUBLE
	Int                    // INT64 INT(64, signed)
	Uint                   // INT64 INT(64, unsigned)
	Bool                   // BOOLEAN
	String                 // BYTE_ARRAY STRING, plain
)

func (t Type) String() string {
	switch t {
	case Float:
		return "float"
	case Int:
		return "integer"
	case Uint:
		return "unsigned"
	case Bool:
		return "boolean"
	case String:
		return "string"
	}
	return "unknown"
}

// duckDBTypes are the DuckDB types of the columns as DuckDB reads them.
var duckDBTypes = map[Type]string{Float: "DOUBLE", Int: "BIGINT", Uint: "UBIGINT", Bool: "BOOLEAN", String: "VARCHAR"}

// DuckDBType is the type DuckDB gives a field column of type t.
func (t Type) DuckDBType() string { return duckDBTypes[t] }

// Role tells what a column of a telemetry object holds.
type Role uint8

const (
	Fixed Role = iota // time, _partition, _offset or _time_ns
	Tag               // a tag: optional string, dictionary-encoded
	Field             // a field of its Type
)

// Column is one column of a telemetry object.
type Column struct {
	Name string
	Role Role
	Type Type // fields only
}

// fixedDuckDB are the DuckDB types of the fixed columns.
var fixedDuckDB = map[string]string{Time: "TIMESTAMP WITH TIME ZONE", Partition: "INTEGER", Offset: "BIGINT", TimeNS: "BIGINT"}

// DuckDBType is the type DuckDB gives the column.
func (c Column) DuckDBType() string {
	switch c.Role {
	case Fixed:
		return fixedDuckDB[c.Name]
	case Tag:
		return "VARCHAR"
	}
	return c.Type.DuckDBType()
}

// Layout is the column layout of one telemetry object: the fixed columns,
// the tags and the fields, sorted by name.
type Layout struct {
	Measurement string
	Columns     []Column
}

// Telemetry is the layout of an object of measurement with the tag and
// field columns cols (in any order; the fixed columns are added). A name
// used twice or a reserved name is an error.
func Telemetry(measurement string, cols []Column) (*Layout, error) {
	l := &Layout{Measurement: measurement, Columns: make([]Column, 0, len(cols)+4)}
	for _, n := range []string{Time, Partition, Offset, TimeNS} {
		l.Columns = append(l.Columns, Column{Name: n, Role: Fixed})
	}
	for _, c := range cols {
		switch {
		case Reserved(c.Name):
			return nil, fmt.Errorf("column %q of %s uses a reserved name", c.Name, measurement)
		case c.Role == Field && c.Type.DuckDBType() == "":
			return nil, fmt.Errorf("field column %q of %s has no type", c.Name, measurement)
		case c.Role != Tag && c.Role != Field:
			return nil, fmt.Errorf("column %q of %s is neither a tag nor a field", c.Name, measurement)
		}
		l.Columns = append(l.Columns, c)
	}
	slices.SortFunc(l.Columns, func(a, b Column) int { return strings.Compare(a.Name, b.Name) })
	for i := 1; i < len(l.Columns); i++ {
		if l.Columns[i].Name == l.Columns[i-1].Name {
			return nil, fmt.Errorf("column %q of %s appears twice", l.Columns[i].Name, measurement)
		}
	}
	return l, nil
}

// Names lists the column names in file order, as the catalog records them.
func (l *Layout) Names() []string {
	out := make([]string, len(l.Columns))
	for i, c := range l.Columns {
		out[i] = c.Name
	}
	return out
}

// Tags lists the tag columns in file order.
func (l *Layout) Tags() []string {
	var out []string
	for _, c := range l.Columns {
		if c.Role == Tag {
			out = append(out, c.Name)
		}
	}
	return out
}

// Metadata is the key-value metadata of a telemetry object of o with
// this layout, in file order.
func (l *Layout) Metadata(o Origin) [][2]string {
	return append(o.Metadata(), [2]string{MetaTags, strings.Join(l.Tags(), ",")})
}

// Node is the Parquet schema of the layout.
func (l *Layout) Node() (*pqschema.GroupNode, error) {
	fields := make(pqschema.FieldList, len(l.Columns))
	for i, c := range l.Columns {
		n, err := c.node()
		if err != nil {
			return nil, err
		}
		fields[i] = n
	}
	return pqschema.NewGroupNode(l.Measurement, pq.Repetitions.Required, fields, -1)
}

func (c Column) node() (pqschema.Node, error) {
	req, opt := pq.Repetitions.Required, pq.Repetitions.Optional
	switch {
	case c.Role == Fixed && c.Name == Time:
		return pqschema.NewPrimitiveNodeLogical(c.Name, req, pqschema.NewTimestampLogicalType(true, pqschema.TimeUnitMicros), pq.Types.Int64, 0, -1)
	case c.Role == Fixed && c.Name == Partition:
		return pqschema.NewPrimitiveNodeLogical(c.Name, req, pqschema.NewIntLogicalType(32, true), pq.Types.Int32, 0, -1)
	case c.Role == Fixed:
		return pqschema.NewPrimitiveNodeLogical(c.Name, req, pqschema.NewIntLogicalType(64, true), pq.Types.Int64, 0, -1)
	case c.Role == Tag || c.Type == String:
		return pqschema.NewPrimitiveNodeLogical(c.Name, opt, pqschema.StringLogicalType{}, pq.Types.ByteArray, 0, -1)
	case c.Type == Float:
		return pqschema.NewPrimitiveNode(c.Name, opt, pq.Types.Double, -1, 0)
	case c.Type == Int:
		return pqschema.NewPrimitiveNodeLogical(c.Name, opt, pqschema.NewIntLogicalType(64, true), pq.Types.Int64, 0, -1)
	case c.Type == Uint:
		return pqschema.NewPrimitiveNodeLogical(c.Name, opt, pqschema.NewIntLogicalType(64, false), pq.Types.Int64, 0, -1)
	case c.Type == Bool:
		return pqschema.NewPrimitiveNode(c.Name, opt, pq.Types.Boolean, -1, 0)
	}
	return nil, fmt.Errorf("column %s has no type", c.Name)
}

// RowGroupRows is the largest row group written. A sink flush of the
// default 64 MiB of input is about 500k rows: a few row groups per object,
// each big enough for readers to skip whole groups by time statistics.
const RowGroupRows = 128 << 10

// dictBatch is how many rows of a tag column go to the column writer at a
// time: its batch size, so that the statistics given for a call cover
// exactly the rows of the data page they end up in.
const dictBatch = 1024

// createdBy is the writer named in every telemetry object.
const createdBy = "simtel-sink version 1"

// Props are the writer properties of telemetry objects: zstd at its
// fastest level, dictionary encoding only for tag columns, delta encoding
// for _offset and _time_ns, statistics on, and no wall-clock time anywhere
// in the file (a flush written again is the same bytes).
func (l *Layout) Props() *pq.WriterProperties {
	opts := []pq.WriterProperty{
		pq.WithCompression(compress.Codecs.Zstd),
		pq.WithCompressionLevel(1),
		pq.WithCreatedBy(createdBy),
		pq.WithMaxRowGroupLength(RowGroupRows),
		pq.WithDataPageSize(256 << 10),
		pq.WithDictionaryDefault(false),
		pq.WithEncodingFor(Offset, pq.Encodings.DeltaBinaryPacked),
		pq.WithEncodingFor(TimeNS, pq.Encodings.DeltaBinaryPacked),
		pq.WithStats(true),
		pq.WithBatchSize(dictBatch),
	}
	for _, c := range l.Columns {
		if c.Role == Tag {
			opts = append(opts, pq.WithDictionaryFor(c.Name, true))
		}
	}
	return pq.NewWriterProperties(opts...)
}
