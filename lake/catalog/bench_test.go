package catalog_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/store"
	"github.com/simtel/simtel/lake/store/storetest"
)

// BenchmarkLoad measures reading a catalog of 2000 flush entries (4
// partitions × 500 flushes): from a local lake, from S3 without and with the
// local cache of catalog files, and from S3 after CompactEntries.
func BenchmarkLoad(b *testing.B) {
	const flushes = 2000
	ctx := context.Background()
	fill := func(b *testing.B, c *catalog.Catalog) {
		for i := int64(0); i < flushes; i++ {
			p, n := int32(i%4), i/4
			if err := c.Commit(ctx, entry("telemetry", p, n*100, n*100+99, fmt.Sprintf("r%d", i%10), "cpu", "reward")); err != nil {
				b.Fatal(err)
			}
		}
	}
	load := func(b *testing.B, c *catalog.Catalog) {
		for b.Loop() {
			snap, err := c.Load(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if len(snap.Entries) != flushes {
				b.Fatalf("loaded %d entries, want %d", len(snap.Entries), flushes)
			}
		}
	}
	b.Run("file", func(b *testing.B) {
		s, _ := store.Open(ctx, b.TempDir(), store.Options{})
		c := catalog.New(s)
		fill(b, c)
		load(b, c)
	})
	s, _ := storetest.S3(b)
	fill(b, catalog.New(s))
	b.Run("s3-nocache", func(b *testing.B) {
		load(b, catalog.New(s))
	})
	b.Run("s3-cached", func(b *testing.B) {
		c := catalog.New(s, catalog.WithCacheDir(b.TempDir()))
		if _, err := c.Load(ctx); err != nil {
			b.Fatal(err)
		}
		load(b, c)
	})
	b.Run("s3-compacted", func(b *testing.B) {
		c := catalog.New(s)
		if err := c.CompactEntries(ctx); err != nil {
			b.Fatal(err)
		}
		load(b, c)
	})
}
