package admin

// AlterConfigs, versions 0-2: replaces a topic's whole config set.

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = APIs.Add(kapi.API{Key: 33, Min: 0, Max: 2}, kapi.Reply(handleAlterConfigs))

func handleAlterConfigs(b Broker, kr *kapi.Request, r *kmsg.AlterConfigsRequest, resp *kmsg.AlterConfigsResponse) {
	for _, rr := range r.Resources {
		sr := alterTopicResource(b, kr, rr.ResourceType, rr.ResourceName, r.ValidateOnly, func(m map[string]string) error {
			// AlterConfigs replaces the whole set: unnamed configs reset.
			clear(m)
			for _, c := range rr.Configs {
				if err := ValidateTopicConfig(c.Name, c.Value); err != nil {
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
}
