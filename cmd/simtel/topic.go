package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/simtel/simtel/internal/admin"
)

func newTopicCmd() *cobra.Command {
	return newAdminCmd(&cobra.Command{
		Use:   "topic",
		Short: "Create, list, describe, alter and delete topics",
		Long:  "Manage topics on any Kafka-compatible cluster (simtel or Kafka itself).",
	}, newTopicCreateCmd, newTopicListCmd, newTopicDescribeCmd, newTopicDeleteCmd, newTopicAlterCmd)
}

func newTopicCreateCmd(a *adminFlags) *cobra.Command {
	var partitions int32
	var rf int16
	var configs []string
	cmd := &cobra.Command{
		Use:     "create TOPIC...",
		Short:   "Create topics",
		Example: "  simtel topic create telemetry --partitions 12 --config retention.ms=86400000",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfgs, err := parseConfigs(configs)
			if err != nil {
				return err
			}
			return a.do(cmd, func(ctx context.Context, cl *admin.Client) error {
				created, err := cl.CreateTopics(ctx, partitions, rf, cfgs, args...)
				for _, t := range created {
					fmt.Fprintf(stdout(), "created %s (%d partitions, replication %d)\n", t.Topic, t.Partitions, t.ReplicationFactor)
				}
				return err
			})
		},
	}
	cmd.Flags().Int32VarP(&partitions, "partitions", "p", -1, "partition count (-1: broker default)")
	cmd.Flags().Int16VarP(&rf, "replication-factor", "r", -1, "replicas per partition (-1: broker default)")
	cmd.Flags().StringArrayVarP(&configs, "config", "c", nil, "topic config key=value (repeatable)")
	return cmd
}

func newTopicListCmd(a *adminFlags) *cobra.Command {
	return newAdminListCmd(a, "List topics with partition counts", (*admin.Client).ListTopics,
		"TOPIC\tPARTITIONS\tREPLICATION", func(w io.Writer, r admin.TopicSummary) {
			fmt.Fprintf(w, "%s\t%d\t%d\n", r.Topic, r.Partitions, r.Replicas)
		})
}

func newTopicDescribeCmd(a *adminFlags) *cobra.Command {
	return newAdminDescribeCmd(a, "describe TOPIC", "Show a topic's partitions, offsets and configs",
		(*admin.Client).DescribeTopic, admin.ErrUnknownTopic, "topic %q does not exist: see `simtel topic list`", printTopic)
}

func printTopic(tw *tabwriter.Writer, t *admin.TopicDetail) {
	fmt.Fprintf(tw, "topic %s (id %s)\n\n", t.Topic, t.ID)
	fmt.Fprintln(tw, "PARTITION\tLEADER\tREPLICAS\tISR\tSTART\tEND")
	offset := func(o int64) string {
		if o < 0 {
			return "-" // not listed: see below
		}
		return strconv.FormatInt(o, 10)
	}
	for _, p := range t.Partitions {
		fmt.Fprintf(tw, "%d\t%d\t%v\t%v\t%s\t%s\n", p.Partition, p.Leader, p.Replicas, p.ISR, offset(p.Start), offset(p.End))
	}
	for _, u := range t.Unlisted {
		fmt.Fprintf(tw, "not listed in time: %s\n", u)
	}
	fmt.Fprintln(tw, "\nCONFIG\tVALUE")
	keys := make([]string, 0, len(t.Configs))
	for k := range t.Configs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%s\n", k, t.Configs[k])
	}
}

func newTopicDeleteCmd(a *adminFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "delete TOPIC...",
		Short: "Delete topics and their data",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.do(cmd, func(ctx context.Context, cl *admin.Client) error {
				deleted, err := cl.DeleteTopics(ctx, args...)
				for _, t := range deleted {
					fmt.Fprintf(stdout(), "deleted %s\n", t)
				}
				return err
			})
		},
	}
}

func newTopicAlterCmd(a *adminFlags) *cobra.Command {
	var setConfigs, deleteConfigs []string
	var addTo int
	cmd := &cobra.Command{
		Use:     "alter TOPIC",
		Short:   "Change a topic's configs or grow its partition count",
		Example: "  simtel topic alter telemetry --config retention.ms=3600000 --delete-config segment.bytes\n  simtel topic alter telemetry --partitions 24",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(setConfigs) == 0 && len(deleteConfigs) == 0 && addTo == 0 {
				return fmt.Errorf("nothing to change: pass --config, --delete-config or --partitions")
			}
			return a.do(cmd, func(ctx context.Context, cl *admin.Client) error {
				return alterTopic(ctx, cl, args[0], setConfigs, deleteConfigs, addTo)
			})
		},
	}
	cmd.Flags().StringArrayVarP(&setConfigs, "config", "c", nil, "set a config key=value (repeatable)")
	cmd.Flags().StringArrayVar(&deleteConfigs, "delete-config", nil, "reset a config to its default (repeatable)")
	cmd.Flags().IntVarP(&addTo, "partitions", "p", 0, "grow the topic to this many partitions")
	return cmd
}

// alterTopic sets and deletes configs of topic, then grows it to addTo
// partitions (0: unchanged).
func alterTopic(ctx context.Context, cl *admin.Client, topic string, setConfigs, deleteConfigs []string, addTo int) error {
	alters, err := configAlters(setConfigs, deleteConfigs)
	if err != nil {
		return err
	}
	if len(alters) > 0 {
		if err := cl.AlterTopicConfigs(ctx, topic, alters); err != nil {
			return err
		}
		fmt.Fprintf(stdout(), "altered configs of %s\n", topic)
	}
	if addTo > 0 {
		if err := cl.SetPartitions(ctx, topic, addTo); err != nil {
			return err
		}
		fmt.Fprintf(stdout(), "%s now has %d partitions\n", topic, addTo)
	}
	return nil
}

// configAlters turns --config key=value and --delete-config key into
// kadm's alterations.
func configAlters(set, del []string) ([]kadm.AlterConfig, error) {
	var alters []kadm.AlterConfig
	for _, kv := range set {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("config %q is not key=value", kv)
		}
		alters = append(alters, kadm.AlterConfig{Op: kadm.SetConfig, Name: k, Value: kadm.StringPtr(v)})
	}
	for _, k := range del {
		alters = append(alters, kadm.AlterConfig{Op: kadm.DeleteConfig, Name: k})
	}
	return alters, nil
}
