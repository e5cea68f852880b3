package admin

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Topic configs: the names the broker understands, with Kafka's defaults,
// their DescribeConfigs types and documentation, and what values each
// accepts.

// topicConfigDef describes one topic-level config the broker understands.
type topicConfigDef struct {
	def   string
	typ   kmsg.ConfigType
	doc   string
	check func(v string) error
}

func intCheck(min int64) func(string) error {
	return func(v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not an integer", v)
		}
		if n < min {
			return fmt.Errorf("%d is below the minimum %d", n, min)
		}
		return nil
	}
}

func oneOf(vals ...string) func(string) error {
	return func(v string) error {
		for _, ok := range vals {
			if v == ok {
				return nil
			}
		}
		return fmt.Errorf("%q is not one of %s", v, strings.Join(vals, ", "))
	}
}

// topicConfigDefs are the topic configs with their Kafka names. Unknown names
// are refused with INVALID_CONFIG so a typo does not silently do nothing.
var topicConfigDefs = map[string]topicConfigDef{
	"cleanup.policy": {def: "delete", typ: kmsg.ConfigTypeList, doc: "delete, compact, or compact,delete", check: func(v string) error {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "delete" && p != "compact" {
				return fmt.Errorf("cleanup policy %q is not delete or compact", p)
			}
		}
		return nil
	}},
	"retention.ms":                        {def: "604800000", typ: kmsg.ConfigTypeLong, doc: "delete segments older than this; -1 keeps forever", check: intCheck(-1)},
	"retention.bytes":                     {def: "-1", typ: kmsg.ConfigTypeLong, doc: "delete oldest segments while a partition exceeds this; -1 unlimited", check: intCheck(-1)},
	"segment.bytes":                       {def: "1073741824", typ: kmsg.ConfigTypeInt, doc: "roll a segment after this many bytes", check: intCheck(14)},
	"segment.ms":                          {def: "604800000", typ: kmsg.ConfigTypeLong, doc: "roll a segment after this age", check: intCheck(1)},
	"max.message.bytes":                   {def: "1048588", typ: kmsg.ConfigTypeInt, doc: "largest record batch accepted", check: intCheck(0)},
	"delete.retention.ms":                 {def: "86400000", typ: kmsg.ConfigTypeLong, doc: "how long tombstones survive compaction", check: intCheck(0)},
	"min.compaction.lag.ms":               {def: "0", typ: kmsg.ConfigTypeLong, doc: "records younger than this are not compacted", check: intCheck(0)},
	"max.compaction.lag.ms":               {def: "9223372036854775807", typ: kmsg.ConfigTypeLong, doc: "accepted for compatibility", check: intCheck(1)},
	"min.cleanable.dirty.ratio":           {def: "0.5", typ: kmsg.ConfigTypeDouble, doc: "accepted for compatibility", check: func(v string) error { _, err := strconv.ParseFloat(v, 64); return err }},
	"index.interval.bytes":                {def: "4096", typ: kmsg.ConfigTypeInt, doc: "bytes between sparse index entries", check: intCheck(0)},
	"segment.index.bytes":                 {def: "10485760", typ: kmsg.ConfigTypeInt, doc: "accepted for compatibility", check: intCheck(4)},
	"min.insync.replicas":                 {def: "1", typ: kmsg.ConfigTypeInt, doc: "acks=all needs this many replicas (single node: 1)", check: intCheck(1)},
	"unclean.leader.election.enable":      {def: "false", typ: kmsg.ConfigTypeBoolean, doc: "accepted for compatibility", check: oneOf("true", "false")},
	"compression.type":                    {def: "producer", typ: kmsg.ConfigTypeString, doc: "batches are stored as the producer compressed them", check: oneOf("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")},
	"message.timestamp.type":              {def: "CreateTime", typ: kmsg.ConfigTypeString, doc: "CreateTime keeps the producer's timestamps; LogAppendTime stamps each batch with the broker's clock when it is appended", check: oneOf("CreateTime", "LogAppendTime")},
	"message.timestamp.difference.max.ms": {def: "9223372036854775807", typ: kmsg.ConfigTypeLong, doc: "accepted for compatibility", check: intCheck(0)},
	"file.delete.delay.ms":                {def: "60000", typ: kmsg.ConfigTypeLong, doc: "accepted for compatibility", check: intCheck(0)},
	"flush.messages":                      {def: "9223372036854775807", typ: kmsg.ConfigTypeLong, doc: "accepted for compatibility; acks=all always fsyncs", check: intCheck(1)},
	"flush.ms":                            {def: "9223372036854775807", typ: kmsg.ConfigTypeLong, doc: "accepted for compatibility; acks=all always fsyncs", check: intCheck(0)},
	"preallocate":                         {def: "false", typ: kmsg.ConfigTypeBoolean, doc: "accepted for compatibility", check: oneOf("true", "false")},
	"message.downconversion.enable":       {def: "true", typ: kmsg.ConfigTypeBoolean, doc: "accepted for compatibility", check: oneOf("true", "false")},
	"local.retention.ms":                  {def: "-2", typ: kmsg.ConfigTypeLong, doc: "accepted for compatibility", check: intCheck(-2)},
	"local.retention.bytes":               {def: "-2", typ: kmsg.ConfigTypeLong, doc: "accepted for compatibility", check: intCheck(-2)},
	HoldGroupsConfig:                      {def: "", typ: kmsg.ConfigTypeList, doc: "consumer groups that hold retention back: no segment at or past their lowest committed offset is deleted by retention (a named group with no commit holds everything)", check: groupListCheck},
}

// HoldGroupsConfig names the consumer groups (the lake sink's) whose
// committed offsets hold retention back, so data is not deleted before it
// is tiered.
const HoldGroupsConfig = "simtel.retention.hold.groups"

func groupListCheck(v string) error {
	for _, g := range strings.Split(v, ",") {
		if strings.TrimSpace(g) == "" && strings.TrimSpace(v) != "" {
			return fmt.Errorf("%q has an empty group name", v)
		}
	}
	return nil
}

// ValidateTopicConfig checks a value for a known config name. A nil value
// means "reset to default" and is always valid for a known name.
func ValidateTopicConfig(name string, v *string) error {
	d, ok := topicConfigDefs[name]
	if !ok {
		return fmt.Errorf("unknown topic config %q", name)
	}
	if v == nil {
		return nil
	}
	return d.check(*v)
}

// topicConfigNames returns the known names, sorted, for DescribeConfigs.
func topicConfigNames() []string {
	return slices.Sorted(maps.Keys(topicConfigDefs))
}

// TopicConfig resolves one name: the topic's override, the broker's
// default (defaults, from its flags), Kafka's default, in that order.
// source is the DescribeConfigs source.
func TopicConfig(defaults, overrides map[string]string, name string) (value string, source kmsg.ConfigSource) {
	if v, ok := overrides[name]; ok {
		return v, kmsg.ConfigSourceDynamicTopicConfig
	}
	if v, ok := defaults[name]; ok {
		return v, kmsg.ConfigSourceStaticBrokerConfig
	}
	return topicConfigDefs[name].def, kmsg.ConfigSourceDefaultConfig
}

// TopicConfigInt is TopicConfig of an integer config; a value that does
// not parse counts as Kafka's default.
func TopicConfigInt(defaults, overrides map[string]string, name string) int64 {
	v, _ := TopicConfig(defaults, overrides, name)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		d, _ := strconv.ParseInt(topicConfigDefs[name].def, 10, 64)
		return d
	}
	return n
}
