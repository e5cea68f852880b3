package admin

// IncrementalAlterConfigs, versions 0-1 (topics only; broker settings come
// from flags).

import (
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = APIs.Add(kapi.API{Key: 44, Min: 0, Max: 1}, kapi.Reply(handleIncrementalAlterConfigs))

func handleIncrementalAlterConfigs(b Broker, kr *kapi.Request, r *kmsg.IncrementalAlterConfigsRequest, resp *kmsg.IncrementalAlterConfigsResponse) {
	for _, rr := range r.Resources {
		sr := kmsg.IncrementalAlterConfigsResponseResource(alterTopicResource(b, kr, rr.ResourceType, rr.ResourceName, r.ValidateOnly, func(m map[string]string) error {
			for _, c := range rr.Configs {
				v := c.Value
				if c.Op == kmsg.IncrementalAlterConfigOpDelete {
					// DELETE ignores the value (librdkafka sends "").
					v = nil
				}
				if err := ValidateTopicConfig(c.Name, v); err != nil {
					return fmt.Errorf("%w: %v", kerr.InvalidConfig, err)
				}
				def := topicConfigDefs[c.Name]
				cur, ok := m[c.Name]
				if !ok {
					cur, _ = TopicConfig(b.TopicDefaults(), nil, c.Name)
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
					if err := ValidateTopicConfig(c.Name, &v); err != nil {
						return fmt.Errorf("%w: %v", kerr.InvalidConfig, err)
					}
					m[c.Name] = v
				default:
					return fmt.Errorf("%w: unknown operation %d", kerr.InvalidRequest, c.Op)
				}
			}
			return nil
		}))
		resp.Resources = append(resp.Resources, sr)
	}
}
