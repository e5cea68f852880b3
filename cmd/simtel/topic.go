package main

import (
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
)

func newTopicCmd() *cobra.Command {
	a := &adminFlags{}
	cmd := &cobra.Command{
		Use:   "topic",
		Short: "Create, list, describe, alter and delete topics",
		Long:  "Manage topics on any Kafka-compatible cluster (simtel or Kafka itself).",
	}
	a.register(cmd)

	var partitions int32
	var rf int16
	var configs []string
	create := &cobra.Command{
		Use:     "create TOPIC...",
		Short:   "Create topics",
		Example: "  simtel topic create telemetry --partitions 12 --config retention.ms=86400000",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfgs, err := parseConfigs(configs)
			if err != nil {
				return err
			}
			adm, ctx, done, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			resps, err := adm.CreateTopics(ctx, partitions, rf, cfgs, args...)
			if err != nil {
				return a.reachErr(err)
			}
			var failed []string
			for _, r := range resps.Sorted() {
				if r.Err != nil {
					msg := r.Err.Error()
					if r.ErrMessage != "" {
						msg += ": " + r.ErrMessage
					}
					failed = append(failed, fmt.Sprintf("%s: %s", r.Topic, msg))
					continue
				}
				fmt.Fprintf(stdout(), "created %s (%d partitions, replication %d)\n", r.Topic, r.NumPartitions, r.ReplicationFactor)
			}
			if len(failed) > 0 {
				return fmt.Errorf("cannot create %s", strings.Join(failed, "; "))
			}
			return nil
		},
	}
	create.Flags().Int32VarP(&partitions, "partitions", "p", -1, "partition count (-1: broker default)")
	create.Flags().Int16VarP(&rf, "replication-factor", "r", -1, "replicas per partition (-1: broker default)")
	create.Flags().StringArrayVarP(&configs, "config", "c", nil, "topic config key=value (repeatable)")

	list := &cobra.Command{
		Use:   "list",
		Short: "List topics with partition counts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			adm, ctx, done, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			td, err := adm.ListTopics(ctx)
			if err != nil {
				return a.reachErr(err)
			}
			type row struct {
				Topic      string `json:"topic"`
				Partitions int    `json:"partitions"`
				Replicas   int    `json:"replication_factor"`
			}
			var rows []row
			for _, t := range td.Sorted() {
				rf := 0
				if len(t.Partitions) > 0 {
					rf = len(t.Partitions[0].Replicas)
				}
				rows = append(rows, row{t.Topic, len(t.Partitions), rf})
			}
			return a.emit(stdout(), rows, func(tw *tabwriter.Writer) {
				fmt.Fprintln(tw, "TOPIC\tPARTITIONS\tREPLICATION")
				for _, r := range rows {
					fmt.Fprintf(tw, "%s\t%d\t%d\n", r.Topic, r.Partitions, r.Replicas)
				}
			})
		},
	}

	describe := &cobra.Command{
		Use:   "describe TOPIC",
		Short: "Show a topic's partitions, offsets and configs",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			adm, ctx, done, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			topic := args[0]
			td, err := adm.ListTopics(ctx, topic)
			if err != nil {
				return a.reachErr(err)
			}
			t, ok := td[topic]
			if !ok || t.Err != nil {
				return fmt.Errorf("topic %q does not exist: see `simtel topic list`", topic)
			}
			starts, err := adm.ListStartOffsets(ctx, topic)
			if err != nil {
				return err
			}
			ends, err := adm.ListEndOffsets(ctx, topic)
			if err != nil {
				return err
			}
			rcs, err := adm.DescribeTopicConfigs(ctx, topic)
			if err != nil {
				return err
			}
			type part struct {
				Partition int32   `json:"partition"`
				Leader    int32   `json:"leader"`
				Replicas  []int32 `json:"replicas"`
				ISR       []int32 `json:"isr"`
				Start     int64   `json:"start_offset"`
				End       int64   `json:"end_offset"`
			}
			out := struct {
				Topic      string            `json:"topic"`
				ID         string            `json:"id"`
				Partitions []part            `json:"partitions"`
				Configs    map[string]string `json:"configs"`
			}{Topic: topic, ID: t.ID.String(), Configs: map[string]string{}}
			for _, p := range t.Partitions.Sorted() {
				s, _ := starts.Lookup(topic, p.Partition)
				e, _ := ends.Lookup(topic, p.Partition)
				out.Partitions = append(out.Partitions, part{p.Partition, p.Leader, p.Replicas, p.ISR, s.Offset, e.Offset})
			}
			var keys []string
			if rc, err := rcs.On(topic, nil); err == nil {
				for _, c := range rc.Configs {
					out.Configs[c.Key] = c.MaybeValue()
					keys = append(keys, c.Key)
				}
			}
			sort.Strings(keys)
			return a.emit(stdout(), out, func(tw *tabwriter.Writer) {
				fmt.Fprintf(tw, "topic %s (id %s)\n\n", topic, out.ID)
				fmt.Fprintln(tw, "PARTITION\tLEADER\tREPLICAS\tISR\tSTART\tEND")
				for _, p := range out.Partitions {
					fmt.Fprintf(tw, "%d\t%d\t%v\t%v\t%d\t%d\n", p.Partition, p.Leader, p.Replicas, p.ISR, p.Start, p.End)
				}
				fmt.Fprintln(tw, "\nCONFIG\tVALUE")
				for _, k := range keys {
					fmt.Fprintf(tw, "%s\t%s\n", k, out.Configs[k])
				}
			})
		},
	}

	del := &cobra.Command{
		Use:   "delete TOPIC...",
		Short: "Delete topics and their data",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			adm, ctx, done, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			resps, err := adm.DeleteTopics(ctx, args...)
			if err != nil {
				return a.reachErr(err)
			}
			var failed []string
			for _, r := range resps.Sorted() {
				if r.Err != nil {
					failed = append(failed, fmt.Sprintf("%s: %v", r.Topic, r.Err))
					continue
				}
				fmt.Fprintf(stdout(), "deleted %s\n", r.Topic)
			}
			if len(failed) > 0 {
				return fmt.Errorf("cannot delete %s", strings.Join(failed, "; "))
			}
			return nil
		},
	}

	var setConfigs, deleteConfigs []string
	var addTo int
	alter := &cobra.Command{
		Use:     "alter TOPIC",
		Short:   "Change a topic's configs or grow its partition count",
		Example: "  simtel topic alter telemetry --config retention.ms=3600000 --delete-config segment.bytes\n  simtel topic alter telemetry --partitions 24",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(setConfigs) == 0 && len(deleteConfigs) == 0 && addTo == 0 {
				return fmt.Errorf("nothing to change: pass --config, --delete-config or --partitions")
			}
			adm, ctx, done, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			topic := args[0]
			var alters []kadm.AlterConfig
			for _, kv := range setConfigs {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return fmt.Errorf("config %q is not key=value", kv)
				}
				alters = append(alters, kadm.AlterConfig{Op: kadm.SetConfig, Name: k, Value: kadm.StringPtr(v)})
			}
			for _, k := range deleteConfigs {
				alters = append(alters, kadm.AlterConfig{Op: kadm.DeleteConfig, Name: k})
			}
			if len(alters) > 0 {
				resps, err := adm.AlterTopicConfigs(ctx, alters, topic)
				if err != nil {
					return a.reachErr(err)
				}
				for _, r := range resps {
					if r.Err != nil {
						return fmt.Errorf("cannot alter %s: %v %s", r.Name, r.Err, r.ErrMessage)
					}
				}
				fmt.Fprintf(stdout(), "altered configs of %s\n", topic)
			}
			if addTo > 0 {
				resps, err := adm.UpdatePartitions(ctx, addTo, topic)
				if err != nil {
					return a.reachErr(err)
				}
				for _, r := range resps {
					if r.Err != nil {
						return fmt.Errorf("cannot set %s to %d partitions: %v %s", r.Topic, addTo, r.Err, r.ErrMessage)
					}
				}
				fmt.Fprintf(stdout(), "%s now has %d partitions\n", topic, addTo)
			}
			return nil
		},
	}
	alter.Flags().StringArrayVarP(&setConfigs, "config", "c", nil, "set a config key=value (repeatable)")
	alter.Flags().StringArrayVar(&deleteConfigs, "delete-config", nil, "reset a config to its default (repeatable)")
	alter.Flags().IntVarP(&addTo, "partitions", "p", 0, "grow the topic to this many partitions")

	cmd.AddCommand(create, list, describe, del, alter)
	return cmd
}
