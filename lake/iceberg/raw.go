package iceberg

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/apache/iceberg-go"
	icat "github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/simtel/simtel/lake"
)

// RawNamespace holds one table per raw topic: the records of a topic the
// sink does not decode, as they came (lake.KindRaw objects).
const RawNamespace = "raw"

// rawPrefix marks the key of a raw table among the names of Namespace's
// tables (the package's cache and commit plans are keyed by name): a
// measurement name never starts with a NUL byte.
const rawPrefix = "\x00"

// rawKey is the key of the raw table of topic.
func rawKey(topic string) string { return rawPrefix + topic }

// rawTopic is the topic of a raw table's key.
func rawTopic(key string) (string, bool) { return strings.CutPrefix(key, rawPrefix) }

func isRaw(key string) bool { return strings.HasPrefix(key, rawPrefix) }

// identOf is the identifier of the table of a key: Namespace.<name> or
// RawNamespace.<topic>.
func identOf(key string) table.Identifier {
	if t, ok := rawTopic(key); ok {
		return RawIdent(t)
	}
	return Ident(key)
}

// RawIdent is the identifier of the raw table of a topic. Kafka topic
// names are [A-Za-z0-9._-], all legal in a table name; a name with a dot
// needs quoting in SQL engines (raw."my.topic").
func RawIdent(topic string) table.Identifier { return table.Identifier{RawNamespace, topic} }

// LoadRaw loads the raw table of a topic.
func (l *Lake) LoadRaw(ctx context.Context, topic string) (*table.Table, error) {
	return l.loadTable(ctx, RawIdent(topic))
}

// rawSchema is the schema of a raw table: lake/schema.RawRow's columns,
// with field ids.
func rawSchema() *iceberg.Schema {
	return iceberg.NewSchema(0, append(recordColumns(),
		iceberg.NestedField{ID: 6, Name: "headers", Required: true, Type: &iceberg.ListType{
			ElementID:       7,
			ElementRequired: true,
			Element: &iceberg.StructType{FieldList: []iceberg.NestedField{
				{ID: 8, Name: "key", Type: iceberg.PrimitiveTypes.String, Required: true},
				{ID: 9, Name: "value", Type: iceberg.PrimitiveTypes.Binary, Required: true},
			}},
		}})...)
}

// recordColumns are the first columns of the raw and the dead-letter
// tables, which keep Kafka records: where the record was and what it held.
func recordColumns() []iceberg.NestedField {
	return []iceberg.NestedField{
		{ID: 1, Name: "_partition", Type: iceberg.PrimitiveTypes.Int32, Required: true},
		{ID: 2, Name: "_offset", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		{ID: 3, Name: "timestamp", Type: iceberg.PrimitiveTypes.TimestampTz, Required: true},
		{ID: 4, Name: "key", Type: iceberg.PrimitiveTypes.Binary},
		{ID: 5, Name: "value", Type: iceberg.PrimitiveTypes.Binary},
	}
}

// createRaw makes the raw table of a topic (and the namespace, the first
// time), partitioned by day(timestamp) as the objects are by date=.
func (l *Lake) createRaw(ctx context.Context, topic string) (*table.Table, error) {
	err := l.cat.CreateNamespace(ctx, table.Identifier{RawNamespace}, iceberg.Properties{"comment": "simtel raw topics, one table per topic"})
	if err != nil && !errors.Is(err, icat.ErrNamespaceAlreadyExists) {
		return nil, fmt.Errorf("cannot create namespace %s: %w", RawNamespace, err)
	}
	sch := rawSchema()
	return l.newTable(ctx, RawIdent(topic), l.root+"/_iceberg/"+RawNamespace+"/"+lake.EscapeSegment(topic), sch, lake.KindRaw,
		iceberg.AddPartitionFieldBySourceID(3, "timestamp_day", iceberg.DayTransform{}, sch, nil))
}
