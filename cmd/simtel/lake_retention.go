package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/retention"
)

func newLakeRetentionCmd(f *lakeFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "retention",
		Short: "Set, show and apply how long each tier of lake data is kept",
		Long: `Retention tiers: raw samples, each rollup resolution (10s, 1m, 1h) and the
run summaries are kept for their own time, per measurement, per topic or
for the whole lake. Defaults: raw 30d, 10s 90d, 1m, 1h and summaries
forever. The policies are stored in the lake's catalog, so every sink and
reader of the lake sees the same ones.

A measurement's policy wins over its topic's, a topic's over the lake's.
Retention removes whole days: the objects of a measurement, run and day
go once the day ended longer ago than the tier's retention. 'apply'
removes them from the catalog in one step, then deletes the objects after
--grace. 'simtel sink' applies the policies every --retention-interval.
See docs/lake-retention.md.`,
		Example: `  simtel lake retention set --measurement cpu --raw 30d --10s 90d --1m 2y
  simtel lake retention set --topic telemetry --raw 14d
  simtel lake retention show
  simtel lake retention apply --dry-run`,
	}
	cmd.AddCommand(newLakeRetentionSetCmd(f), newLakeRetentionShowCmd(f), newLakeRetentionApplyCmd(f))
	return cmd
}

// tierFlags are the per-tier flags of `retention set`.
type tierFlags map[retention.Tier]*string

func addTierFlags(cmd *cobra.Command) tierFlags {
	tf := tierFlags{}
	help := map[retention.Tier]string{
		retention.TierRaw:     "keep raw samples (telemetry, raw topics, dead letters) this long: 30d, 12w, 2y, 36h, forever, or inherit (unset here)",
		retention.Tier10s:     "keep the 10 s rollups (rollup_10s.<measurement>) this long",
		retention.Tier1m:      "keep the 1 min rollups (rollup_1m.<measurement>) this long",
		retention.Tier1h:      "keep the 1 h rollups (rollup_1h.<measurement>) this long",
		retention.TierSummary: "keep the run summaries (summary.*) this long (lake or topic only)",
	}
	for _, t := range retention.Tiers {
		tf[t] = cmd.Flags().String(string(t), "", help[t])
	}
	return tf
}

func (tf tierFlags) set(cmd *cobra.Command) map[retention.Tier]string {
	out := map[retention.Tier]string{}
	for t, v := range tf {
		if cmd.Flags().Changed(string(t)) {
			out[t] = *v
		}
	}
	return out
}

func newLakeRetentionSetCmd(f *lakeFlags) *cobra.Command {
	var measurement, topic string
	var force bool
	cmd := &cobra.Command{
		Use:   "set",
		Short: "Set the retention of tiers for a measurement, a topic or the whole lake",
		Long: `Set how long tiers are kept, for one measurement (--measurement), one topic
(--topic) or, with neither, the whole lake. Only the tiers given change;
"inherit" unsets a tier so the wider scope's holds again. A measurement
is named without its rollup namespace: --measurement cpu --1m 1y sets
rollup_1m.cpu. A measurement or topic the lake has no data of is refused
(a typo would otherwise keep everything forever) unless --force.`,
		Example: `  simtel lake retention set --measurement cpu --raw 30d --10s 90d
  simtel lake retention set --raw 60d --summary forever
  simtel lake retention set --measurement cpu --raw inherit`,
		Args: cobra.NoArgs,
	}
	tf := addTierFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		keep := tf.set(cmd)
		if len(keep) == 0 {
			return fmt.Errorf("give at least one tier to set: --raw, --10s, --1m, --1h or --summary")
		}
		scope, name := retention.ScopeLake, ""
		switch {
		case measurement != "" && topic != "":
			return fmt.Errorf("give --measurement or --topic, not both")
		case measurement != "":
			scope, name = retention.ScopeMeasurement, measurement
		case topic != "":
			scope, name = retention.ScopeTopic, topic
		}
		ctx := cmd.Context()
		st, _, _, err := f.open(ctx)
		if err != nil {
			return err
		}
		if scope != retention.ScopeLake && !force {
			snap, _, _, err := f.load(ctx, cmd.ErrOrStderr())
			if err != nil {
				return fmt.Errorf("%w (--force sets a policy without checking the lake)", err)
			}
			if err := retention.CheckKnown(snap, scope, name); err != nil {
				return fmt.Errorf("%w; --force sets it anyway", err)
			}
		}
		p, err := retention.Set(ctx, st, scope, name, keep, time.Now())
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "retention of %s\n", p.Describe())
		return nil
	}
	fl := cmd.Flags()
	fl.StringVar(&measurement, "measurement", "", "set the retention of this measurement (and its rollups)")
	fl.StringVar(&topic, "topic", "", "set the retention of the data written from this topic")
	fl.BoolVar(&force, "force", false, "set it even if the lake has no data of the measurement or topic yet")
	return cmd
}

func newLakeRetentionShowCmd(f *lakeFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "show",
		Short: "Show the retention policies and what each measurement keeps",
		Long: `Show the built-in defaults, every policy set in the lake, and for each
measurement with data in the lake the retention of each tier that holds
(- where the measurement has no data of that tier).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			snap, st, _, err := f.load(ctx, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			ps, err := retention.LoadPolicies(ctx, st)
			if err != nil {
				return err
			}
			return f.print(cmd.OutOrStdout(), retentionTable(snap, ps))
		},
	}
}

// retentionTable is the table of `retention show`: a column per tier, "-"
// where a row does not set it.
func retentionTable(snap *catalog.Snapshot, ps *retention.Policies) lakeTable {
	rows := retention.Rows(snap, ps)
	t := lakeTable{header: []string{"scope", "name"}, raw: rows}
	for _, tier := range retention.Tiers {
		t.header = append(t.header, string(tier))
	}
	for _, r := range rows {
		row := []string{r.Scope, r.Name}
		for _, tier := range retention.Tiers {
			v, ok := r.Keep[string(tier)]
			if !ok {
				v = "-"
			}
			row = append(row, v)
		}
		t.rows = append(t.rows, row)
	}
	return t
}

func newLakeRetentionApplyCmd(f *lakeFlags) *cobra.Command {
	cfg := retention.Config{}
	var icebergCatalog string
	cmd := &cobra.Command{
		Use:   "apply",
		Short: "Remove the partitions whose retention has passed",
		Long: `Remove every partition (the objects of one measurement, run and day, or of
one topic and day for raw and dead-letter objects) whose day ended longer
ago than its tier's retention. They leave the catalog in one step — a
reader sees all of them gone or none — and their objects are deleted from
the store by the first apply (or sink pass) after --grace, so queries that
started before keep working. --dry-run lists what would go and changes
nothing.

On a lake with Iceberg tables (the sink's --iceberg-catalog) give the same
--iceberg-catalog: the expired partitions' files then leave every table in
one snapshot per table, right after the catalog records the expiration,
and no table still holds an object when it is deleted. Without it such a
lake is refused.`,
		Example: `  simtel lake retention apply --dry-run
  simtel lake retention apply --grace 0s
  simtel lake retention apply --iceberg-catalog sqlite:simtel-data/iceberg.db`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Grace < 0 {
				return fmt.Errorf("--grace %v is negative", cfg.Grace)
			}
			if cfg.Grace == 0 {
				cfg.Grace = -1 // retention.Config: delete at once
			}
			ctx := cmd.Context()
			_, _, cat, err := f.load(ctx, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			log, err := f.g.logger()
			if err != nil {
				return err
			}
			cfg.Logger = log.With("part", "retention")
			if icebergCatalog != "" {
				ice, err := openLakeIceberg(ctx, f, cat.Store(), icebergCatalog, cfg.DryRun)
				if err != nil {
					return err
				}
				defer ice.Close()
				cfg.Iceberg = ice
			}
			res, err := retention.Apply(ctx, cat, cfg)
			if err != nil {
				return err
			}
			t := lakeTable{header: []string{"tier", "measurement", "topic", "run", "day", "keep", "objects", "rows", "bytes"}, raw: res.Expired}
			if res.Expired == nil {
				t.raw = []retention.Partition{}
			}
			for _, p := range res.Expired {
				t.rows = append(t.rows, []string{string(p.Tier), p.Measurement, p.Topic, p.Run, p.Date, retention.FormatKeep(p.Keep),
					strconv.Itoa(len(p.Objects)), strconv.FormatInt(p.Rows, 10), f.fmtBytes(p.Bytes)})
			}
			if len(res.Expired) > 0 || f.format != "table" {
				if err := f.print(cmd.OutOrStdout(), t); err != nil {
					return err
				}
			}
			if cfg.DryRun {
				fmt.Fprintf(cmd.ErrOrStderr(), "would expire %d partitions (%d objects, %d rows, %s); %d objects of earlier expirations wait to be deleted\n",
					len(res.Expired), res.Objects, res.Rows, f.fmtBytes(res.Bytes), res.Pending)
			} else {
				fmt.Fprintf(cmd.ErrOrStderr(), "expired %d partitions (%d objects, %d rows, %s); deleted %d objects of earlier expirations, %d wait for their grace\n",
					len(res.Expired), res.Objects, res.Rows, f.fmtBytes(res.Bytes), res.Deleted, res.Pending)
				if cfg.Iceberg != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "removed %d data files from the Iceberg tables\n", res.IcebergFiles)
				}
			}
			if res.Undated > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %d objects have no readable date and are never expired\n", res.Undated)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&cfg.DryRun, "dry-run", false, "list what would be removed, change nothing")
	fl.DurationVar(&cfg.Grace, "grace", retention.DefaultGrace, "delete expired objects only once their expiration is this old (0s: at once)")
	fl.StringVar(&icebergCatalog, "iceberg-catalog", "", "the lake's Iceberg catalog, as given to the sink (sqlite:PATH or postgres://...): expired partitions leave its tables too (required on a lake with Iceberg tables)")
	return cmd
}
