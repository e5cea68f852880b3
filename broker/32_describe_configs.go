package broker

// DescribeConfigs, versions 0-4 (topics and this broker), AlterConfigs,
// versions 0-2, and IncrementalAlterConfigs, versions 0-1 (topics only;
// broker settings come from flags).

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func (b *Broker) brokerConfigs() map[string]string {
	m := map[string]string{
		"broker.id":                        strconv.Itoa(int(b.cfg.NodeID)),
		"auto.create.topics.enable":        strconv.FormatBool(!b.cfg.DisableAutoCreate),
		"num.partitions":                   strconv.Itoa(int(b.cfg.DefaultPartitions)),
		"default.replication.factor":       "1",
		"socket.request.max.bytes":         strconv.Itoa(int(b.cfg.MaxRequestBytes)),
		"log.dirs":                         b.cfg.DataDir,
		"log.retention.check.interval.ms":  strconv.FormatInt(b.cfg.RetentionCheckInterval.Milliseconds(), 10),
		"group.initial.rebalance.delay.ms": strconv.FormatInt(b.cfg.GroupInitialRebalanceDelay.Milliseconds(), 10),
	}
	for _, name := range topicConfigNames() {
		v, _ := b.effectiveTopicConfig(nil, name)
		m["log."+name] = v
	}
	return m
}

func (b *Broker) handleDescribeConfigs(r *kmsg.DescribeConfigsRequest) *kmsg.DescribeConfigsResponse {
	resp := r.ResponseKind().(*kmsg.DescribeConfigsResponse)
	resp.Version = r.Version
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
		switch rr.ResourceType {
		case kmsg.ConfigResourceTypeTopic:
			t := b.topic(rr.ResourceName)
			if t == nil {
				sr.ErrorCode = kerr.UnknownTopicOrPartition.Code
				break
			}
			for _, name := range topicConfigNames() {
				if !want(name) {
					continue
				}
				v, src := b.effectiveTopicConfig(t.configs, name)
				d := topicConfigDefs[name]
				add(name, v, src, d.typ, d.doc, false)
			}
		case kmsg.ConfigResourceTypeBroker:
			if rr.ResourceName != "" && rr.ResourceName != strconv.Itoa(int(b.cfg.NodeID)) {
				sr.ErrorCode = kerr.InvalidRequest.Code
				msg := fmt.Sprintf("broker %q is not this broker (%d)", rr.ResourceName, b.cfg.NodeID)
				sr.ErrorMessage = &msg
				break
			}
			cfgs := b.brokerConfigs()
			names := make([]string, 0, len(cfgs))
			for n := range cfgs {
				names = append(names, n)
			}
			slices.Sort(names)
			for _, n := range names {
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
	return resp
}

// alterTopicResource checks the resource is a topic and applies update.
func (b *Broker) alterTopicResource(typ kmsg.ConfigResourceType, name string, validateOnly bool, update func(map[string]string) error) (int16, *string) {
	if typ != kmsg.ConfigResourceTypeTopic {
		msg := "only topic configs can be altered; broker settings are command-line flags"
		return kerr.InvalidRequest.Code, &msg
	}
	if b.cluster != nil && b.topic(name) == nil {
		// A topic created a moment ago through the controller may not
		// have reached this broker's copy of the metadata yet.
		ctx, cancel := context.WithTimeout(context.Background(), clusterAdminTimeout)
		if err := b.cluster.CatchUp(ctx); err == nil {
			b.syncClusterTopics()
		}
		cancel()
	}
	if err := b.setTopicConfigs(name, update, validateOnly); err != nil {
		msg := err.Error()
		return kerrCode(err), &msg
	}
	return 0, nil
}

func (b *Broker) handleAlterConfigs(r *kmsg.AlterConfigsRequest) *kmsg.AlterConfigsResponse {
	resp := r.ResponseKind().(*kmsg.AlterConfigsResponse)
	resp.Version = r.Version
	for _, rr := range r.Resources {
		sr := kmsg.NewAlterConfigsResponseResource()
		sr.ResourceType, sr.ResourceName = rr.ResourceType, rr.ResourceName
		sr.ErrorCode, sr.ErrorMessage = b.alterTopicResource(rr.ResourceType, rr.ResourceName, r.ValidateOnly, func(m map[string]string) error {
			// AlterConfigs replaces the whole set: unnamed configs reset.
			clear(m)
			for _, c := range rr.Configs {
				if err := validateTopicConfig(c.Name, c.Value); err != nil {
					return fmt.Errorf("%w: %v", kerr.InvalidConfig, err)
				}
				if c.Value != nil {
					m[c.Name] = *c.Value
				}
			}
			return nil
		})
		resp.Resources = append(resp.Resources, sr)
	}
	return resp
}

func (b *Broker) handleIncrementalAlterConfigs(r *kmsg.IncrementalAlterConfigsRequest) *kmsg.IncrementalAlterConfigsResponse {
	resp := r.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
	resp.Version = r.Version
	for _, rr := range r.Resources {
		sr := kmsg.NewIncrementalAlterConfigsResponseResource()
		sr.ResourceType, sr.ResourceName = rr.ResourceType, rr.ResourceName
		sr.ErrorCode, sr.ErrorMessage = b.alterTopicResource(rr.ResourceType, rr.ResourceName, r.ValidateOnly, func(m map[string]string) error {
			for _, c := range rr.Configs {
				v := c.Value
				if c.Op == kmsg.IncrementalAlterConfigOpDelete {
					// DELETE ignores the value (librdkafka sends "").
					v = nil
				}
				if err := validateTopicConfig(c.Name, v); err != nil {
					return fmt.Errorf("%w: %v", kerr.InvalidConfig, err)
				}
				def := topicConfigDefs[c.Name]
				cur, ok := m[c.Name]
				if !ok {
					cur, _ = b.effectiveTopicConfig(nil, c.Name)
				}
				switch c.Op {
				case kmsg.IncrementalAlterConfigOpSet:
					if c.Value == nil {
						return fmt.Errorf("%w: SET of %q needs a value", kerr.InvalidConfig, c.Name)
					}
					m[c.Name] = *c.Value
				case kmsg.IncrementalAlterConfigOpDelete:
					delete(m, c.Name)
				case kmsg.IncrementalAlterConfigOpAppend, kmsg.IncrementalAlterConfigOpSubtract:
					if def.typ != kmsg.ConfigTypeList || c.Value == nil {
						return fmt.Errorf("%w: APPEND/SUBTRACT need a list config and a value; %q is not a list", kerr.InvalidConfig, c.Name)
					}
					items := strings.Split(cur, ",")
					if c.Op == kmsg.IncrementalAlterConfigOpAppend {
						if !slices.Contains(items, *c.Value) {
							items = append(items, *c.Value)
						}
					} else {
						items = slices.DeleteFunc(items, func(s string) bool { return s == *c.Value })
					}
					v := strings.Join(items, ",")
					if err := validateTopicConfig(c.Name, &v); err != nil {
						return fmt.Errorf("%w: %v", kerr.InvalidConfig, err)
					}
					m[c.Name] = v
				default:
					return fmt.Errorf("%w: unknown operation %d", kerr.InvalidRequest, c.Op)
				}
			}
			return nil
		})
		resp.Resources = append(resp.Resources, sr)
	}
	return resp
}
