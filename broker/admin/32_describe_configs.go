package admin

// DescribeConfigs, versions 0-4 (topics and this broker), and the topic
// config checks AlterConfigs and IncrementalAlterConfigs share.

import (
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/broker/kapi"
)

var _ = APIs.Add(kapi.API{Key: 32, Min: 0, Max: 4}, kapi.Reply(handleDescribeConfigs))

func handleDescribeConfigs(b Broker, kr *kapi.Request, r *kmsg.DescribeConfigsRequest, resp *kmsg.DescribeConfigsResponse) {
	for _, rr := range r.Resources {
		sr := kmsg.NewDescribeConfigsResponseResource()
		sr.ResourceType, sr.ResourceName = rr.ResourceType, rr.ResourceName
		want := func(name string) bool { return rr.ConfigNames == nil || slices.Contains(rr.ConfigNames, name) }
		add := func(name, value string, src kmsg.ConfigSource, typ kmsg.ConfigType, doc string, readOnly bool) {
			c := kmsg.NewDescribeConfigsResponseResourceConfig()
			v := value
			c.Name, c.Value, c.ReadOnly = name, &v, readOnly
			c.Source = src
			c.IsDefault = src == kmsg.ConfigSourceDefaultConfig
			c.ConfigType = typ
			if r.IncludeDocumentation {
				d := doc
				c.Documentation = &d
			}
			if r.IncludeSynonyms {
				syn := kmsg.NewDescribeConfigsResponseResourceConfigConfigSynonym()
				syn.Name, syn.Value, syn.Source = name, &v, src
				c.ConfigSynonyms = append(c.ConfigSynonyms, syn)
			}
			sr.Configs = append(sr.Configs, c)
		}
		if code := configDenied(kr, kmsg.ACLOperationDescribeConfigs, rr.ResourceType, rr.ResourceName); code != 0 {
			sr.ErrorCode = code
			resp.Resources = append(resp.Resources, sr)
			continue
		}
		switch rr.ResourceType {
		case kmsg.ConfigResourceTypeTopic:
			t, ok := b.Topic(rr.ResourceName)
			if !ok {
				sr.ErrorCode = kerr.UnknownTopicOrPartition.Code
				break
			}
			defaults := b.TopicDefaults()
			for _, name := range topicConfigNames() {
				if !want(name) {
					continue
				}
				v, src := TopicConfig(defaults, t.Configs, name)
				d := topicConfigDefs[name]
				add(name, v, src, d.typ, d.doc, false)
			}
		case kmsg.ConfigResourceTypeBroker:
			if rr.ResourceName != "" && rr.ResourceName != strconv.Itoa(int(b.NodeID())) {
				sr.ErrorCode = kerr.InvalidRequest.Code
				msg := fmt.Sprintf("broker %q is not this broker (%d)", rr.ResourceName, b.NodeID())
				sr.ErrorMessage = &msg
				break
			}
			cfgs := b.BrokerConfigs()
			defaults := b.TopicDefaults()
			for _, name := range topicConfigNames() {
				v, _ := TopicConfig(defaults, nil, name)
				cfgs["log."+name] = v
			}
			for _, n := range slices.Sorted(maps.Keys(cfgs)) {
				if want(n) {
					add(n, cfgs[n], kmsg.ConfigSourceStaticBrokerConfig, kmsg.ConfigTypeString, "set by simtel broker flags", true)
				}
			}
		default:
			sr.ErrorCode = kerr.InvalidRequest.Code
			msg := fmt.Sprintf("resource type %d is not supported; use topic (2) or broker (4)", rr.ResourceType)
			sr.ErrorMessage = &msg
		}
		resp.Resources = append(resp.Resources, sr)
	}
}

// configDenied is the error code of a config resource the principal may
// not do op (DescribeConfigs, AlterConfigs) on, 0 if it may: a topic's
// configs are the topic's, a broker's the cluster's, as Kafka authorizes
// them.
func configDenied(r *kapi.Request, op auth.Operation, typ kmsg.ConfigResourceType, name string) int16 {
	switch typ {
	case kmsg.ConfigResourceTypeTopic:
		if !r.Allowed(op, auth.Topic(name)) {
			return kerr.TopicAuthorizationFailed.Code
		}
	case kmsg.ConfigResourceTypeBroker, kmsg.ConfigResourceTypeBrokerLogger:
		if !r.Allowed(op, auth.Cluster) {
			return kerr.ClusterAuthorizationFailed.Code
		}
	}
	return 0
}

// alterTopicResource is the result of an AlterConfigs or
// IncrementalAlterConfigs resource (their results have one form): it checks
// the principal may alter the resource's configs and that it is a topic,
// and applies update.
func alterTopicResource(b Broker, r *kapi.Request, typ kmsg.ConfigResourceType, name string, validateOnly bool, update func(map[string]string) error) kmsg.AlterConfigsResponseResource {
	sr := kmsg.NewAlterConfigsResponseResource()
	sr.ResourceType, sr.ResourceName = typ, name
	if code := configDenied(r, kmsg.ACLOperationAlterConfigs, typ, name); code != 0 {
		sr.ErrorCode = code
		return sr
	}
	if typ != kmsg.ConfigResourceTypeTopic {
		msg := "only topic configs can be altered; broker settings are command-line flags"
		sr.ErrorCode, sr.ErrorMessage = kerr.InvalidRequest.Code, &msg
		return sr
	}
	if err := b.AlterTopicConfigs(name, update, validateOnly); err != nil {
		sr.ErrorCode, sr.ErrorMessage = errorOf(err)
	}
	return sr
}
