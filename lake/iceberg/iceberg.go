package iceberg

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/apache/iceberg-go"
	icat "github.com/apache/iceberg-go/catalog"
	sqlcat "github.com/apache/iceberg-go/catalog/sql"
	"github.com/apache/iceberg-go/io"
	_ "github.com/apache/iceberg-go/io/gocloud/s3" // s3:// lakes
	"github.com/apache/iceberg-go/table"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	_ "modernc.org/sqlite"             // database/sql driver "sqlite"

	"github.com/simtel/simtel/lake"
	"github.com/simtel/simtel/lake/store"
)

// Namespace holds the telemetry tables.
const Namespace = "telemetry"

// DLQ is the table of the dead letters, in Namespace. A measurement of
// that name is published as table DLQMeasurement instead.
const (
	DLQ            = "dlq"
	DLQMeasurement = "dlq_measurement"
)

// Options configure Open.
type Options struct {
	// Catalog is sqlite:PATH or postgres://user:pass@host/db?... Required.
	Catalog string
	// Store is the lake: table metadata goes under its root, next to the
	// data files. Required.
	Store store.Store
	// S3Endpoint and Region are the lake's S3 service, as for lake/store;
	// credentials come from the usual AWS environment.
	S3Endpoint string
	Region     string
	// Logger receives warnings. Default: discard.
	Logger *slog.Logger
	// ReadOnly opens an existing catalog for readers (simtel lake serve):
	// neither its database tables nor the telemetry namespace are created,
	// and a SQLite file that does not exist is an error.
	ReadOnly bool
}

// Lake is the lake's Iceberg catalog. It is safe for concurrent use.
type Lake struct {
	cat  *sqlcat.Catalog
	db   *sql.DB
	st   store.Store
	root string // the lake's root URL, without a trailing slash
	log  *slog.Logger

	mu     sync.Mutex
	tables map[string]*cached // by table name
}

// cached is the last known state of a table and its watermarks.
type cached struct {
	tbl   *table.Table
	snap  int64 // current snapshot id wm was computed at; -1: none
	marks marks
}

// Open opens (creating when new) the catalog and the telemetry namespace.
func Open(ctx context.Context, o Options) (*Lake, error) {
	if o.Store == nil {
		return nil, errors.New("iceberg: no lake store given")
	}
	db, dialect, err := openDB(o.Catalog, o.ReadOnly)
	if err != nil {
		return nil, err
	}
	props := iceberg.Properties{}
	if o.S3Endpoint != "" {
		props[io.S3EndpointURL] = o.S3Endpoint
	}
	region := o.Region
	if region == "" {
		region = os.Getenv("AWS_REGION")
	}
	if region == "" {
		region = "us-east-1"
	}
	props[io.S3Region] = region
	if o.ReadOnly {
		props["init_catalog_tables"] = "false"
	}
	if k, s := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY"); k != "" && s != "" {
		props[io.S3AccessKeyID], props[io.S3SecretAccessKey] = k, s
		if t := os.Getenv("AWS_SESSION_TOKEN"); t != "" {
			props[io.S3SessionToken] = t
		}
	}
	cat, err := sqlcat.NewCatalog("simtel", db, dialect, props)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("iceberg: cannot open catalog %s: %w", redact(o.Catalog), err)
	}
	l := &Lake{cat: cat, db: db, st: o.Store, root: strings.TrimSuffix(o.Store.String(), "/"), log: o.Logger, tables: map[string]*cached{}}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	if o.ReadOnly {
		return l, nil
	}
	err = cat.CreateNamespace(ctx, table.Identifier{Namespace}, iceberg.Properties{"comment": "simtel telemetry, one table per measurement"})
	if err != nil && !errors.Is(err, icat.ErrNamespaceAlreadyExists) {
		l.Close()
		return nil, fmt.Errorf("iceberg: cannot create namespace %s in %s: %w", Namespace, redact(o.Catalog), err)
	}
	return l, nil
}

// openDB opens the catalog database named by a sqlite: or postgres:// URL.
func openDB(u string, readOnly bool) (*sql.DB, sqlcat.SupportedDialect, error) {
	switch {
	case strings.HasPrefix(u, "sqlite:"):
		p := strings.TrimPrefix(strings.TrimPrefix(u, "sqlite:"), "//")
		if p == "" {
			return nil, "", fmt.Errorf("iceberg: catalog %q names no file: use sqlite:PATH", u)
		}
		if readOnly {
			if _, err := os.Stat(p); err != nil {
				return nil, "", fmt.Errorf("iceberg: cannot open catalog %s: %w", p, err)
			}
		} else if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, "", fmt.Errorf("iceberg: cannot create the directory of catalog %s: %w", p, err)
		}
		// WAL and a busy timeout on every pooled connection: sinks and
		// readers of one file wait for each other instead of failing.
		db, err := sql.Open("sqlite", "file:"+p+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
		if err != nil {
			return nil, "", fmt.Errorf("iceberg: cannot open catalog %s: %w", p, err)
		}
		return db, sqlcat.SQLite, nil
	case strings.HasPrefix(u, "postgres://"), strings.HasPrefix(u, "postgresql://"):
		db, err := sql.Open("pgx", u)
		if err != nil {
			return nil, "", fmt.Errorf("iceberg: cannot open catalog %s: %w", redact(u), err)
		}
		return db, sqlcat.Postgres, nil
	case u == "":
		return nil, "", errors.New("iceberg: no catalog given: use sqlite:PATH or postgres://...")
	}
	return nil, "", fmt.Errorf("iceberg: catalog %q: use sqlite:PATH or postgres://...", redact(u))
}

// redact hides a password in a catalog URL, for messages.
func redact(u string) string {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return u
	}
	cred, host, ok := strings.Cut(rest, "@")
	if !ok {
		return u
	}
	if user, _, hasPass := strings.Cut(cred, ":"); hasPass {
		return scheme + "://" + user + ":xxxxx@" + host
	}
	return u
}

// Close closes the catalog database.
func (l *Lake) Close() error {
	return l.db.Close()
}

// Catalog is iceberg-go's catalog, for readers (tests, simtel's commands).
func (l *Lake) Catalog() *sqlcat.Catalog { return l.cat }

// TableName is the table of a measurement.
func TableName(measurement string) string {
	if measurement == DLQ {
		return DLQMeasurement
	}
	return measurement
}

// Ident is the identifier of a table of Namespace.
func Ident(name string) table.Identifier { return table.Identifier{Namespace, name} }

// Load loads a table of Namespace.
func (l *Lake) Load(ctx context.Context, name string) (*table.Table, error) {
	return l.loadTable(ctx, Ident(name))
}

// loadTable loads the table id, with an error that names it.
func (l *Lake) loadTable(ctx context.Context, id table.Identifier) (*table.Table, error) {
	tbl, err := l.cat.LoadTable(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("iceberg: cannot load table %s: %w", strings.Join(id, "."), err)
	}
	return tbl, nil
}

// location is where a table's metadata lives in the lake.
func (l *Lake) location(name string) string {
	return l.root + "/_iceberg/" + Namespace + "/" + lake.EscapeSegment(name)
}

// path is the URL of a lake object, as the tables name their data files.
func (l *Lake) path(key string) string { return l.root + "/" + key }

// table returns the table, loading or creating it; with fresh the catalog
// is read even when a cached copy exists.
func (l *Lake) table(ctx context.Context, name string, dlq, fresh bool) (*cached, error) {
	l.mu.Lock()
	c := l.tables[name]
	l.mu.Unlock()
	if c != nil && !fresh {
		return c, nil
	}
	tbl, err := l.cat.LoadTable(ctx, identOf(name))
	if errors.Is(err, icat.ErrNoSuchTable) {
		tbl, err = l.create(ctx, name, dlq)
		if errors.Is(err, icat.ErrTableAlreadyExists) {
			tbl, err = l.cat.LoadTable(ctx, identOf(name)) // another sink made it meanwhile
		}
	}
	if err != nil {
		return nil, fmt.Errorf("iceberg: table %s: %w", strings.Join(identOf(name), "."), err)
	}
	nc := &cached{tbl: tbl, snap: -1}
	if c != nil {
		nc.snap, nc.marks = c.snap, c.marks
	}
	l.mu.Lock()
	l.tables[name] = nc
	l.mu.Unlock()
	return nc, nil
}

// create makes a table: the fixed columns, partitioned by run and
// day(time) (the dead letters by day(timestamp)), with a name mapping.
func (l *Lake) create(ctx context.Context, name string, dlq bool) (*table.Table, error) {
	if topic, ok := rawTopic(name); ok {
		return l.createRaw(ctx, topic)
	}
	var sch *iceberg.Schema
	var opts []iceberg.PartitionOption
	if dlq {
		sch = iceberg.NewSchema(0, append(recordColumns(),
			iceberg.NestedField{ID: 6, Name: "reason", Type: iceberg.PrimitiveTypes.String, Required: true})...)
		opts = append(opts, iceberg.AddPartitionFieldBySourceID(3, "timestamp_day", iceberg.DayTransform{}, sch, nil))
	} else {
		sch = iceberg.NewSchema(0, fixedColumns()...)
		opts = append(opts,
			iceberg.AddPartitionFieldBySourceID(5, "run", iceberg.IdentityTransform{}, sch, nil),
			iceberg.AddPartitionFieldBySourceID(1, "time_day", iceberg.DayTransform{}, sch, nil))
	}
	return l.newTable(ctx, Ident(name), l.location(name), sch, kindOf(dlq), opts...)
}

// newTable creates the table id with its metadata at location, schema sch
// partitioned by opts, and the name mapping and properties of a table of
// kind.
func (l *Lake) newTable(ctx context.Context, id table.Identifier, location string, sch *iceberg.Schema, kind string, opts ...iceberg.PartitionOption) (*table.Table, error) {
	spec, err := iceberg.NewPartitionSpecOpts(opts...)
	if err != nil {
		return nil, err
	}
	mapping, err := nameMapping(sch)
	if err != nil {
		return nil, err
	}
	return l.cat.CreateTable(ctx, id, sch,
		icat.WithLocation(location),
		icat.WithPartitionSpec(&spec),
		icat.WithProperties(tableProps(mapping, kind)))
}

// maintenanceProps bound what a table's metadata keeps between expiries
// when it takes a commit every few seconds. Without them every commit adds
// a manifest that each later manifest list repeats (a day at 10 s is 8,640
// manifests in the current snapshot, which no expiry can drop), and every
// metadata file stays until an expiry. With them, a commit merges the
// manifests once 100 have gathered (iceberg-go's default count) and
// deletes the metadata files beyond the newest DefaultMetadataKeep.
var maintenanceProps = iceberg.Properties{
	table.ManifestMergeEnabledKey:             "true",
	table.MetadataDeleteAfterCommitEnabledKey: "true",
	table.MetadataPreviousVersionsMaxKey:      strconv.Itoa(DefaultMetadataKeep),
}

// tableProps are the properties of a new table of kind.
func tableProps(mapping, kind string) iceberg.Properties {
	p := iceberg.Properties{
		"format-version":            "2",
		table.DefaultNameMappingKey: mapping,
		"simtel.kind":               kind,
	}
	maps.Copy(p, maintenanceProps)
	return p
}

// missingMaintenance is what of maintenanceProps a table made before them
// lacks, for its next commit to set.
func missingMaintenance(have iceberg.Properties) iceberg.Properties {
	var out iceberg.Properties
	for k, v := range maintenanceProps {
		if have[k] != v {
			if out == nil {
				out = iceberg.Properties{}
			}
			out[k] = v
		}
	}
	return out
}

func kindOf(dlq bool) string {
	if dlq {
		return lake.KindDeadLetter
	}
	return lake.KindTelemetry
}

// fixedColumns are the columns of every measurement table, before its tags
// and fields. run is here even when no sample has one: it is a partition
// source.
func fixedColumns() []iceberg.NestedField {
	return []iceberg.NestedField{
		{ID: 1, Name: "time", Type: iceberg.PrimitiveTypes.TimestampTz, Required: true},
		{ID: 2, Name: "_partition", Type: iceberg.PrimitiveTypes.Int32, Required: true},
		{ID: 3, Name: "_offset", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		{ID: 4, Name: "_time_ns", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		{ID: 5, Name: "run", Type: iceberg.PrimitiveTypes.String},
	}
}
