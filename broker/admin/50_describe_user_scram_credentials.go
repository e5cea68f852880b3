package admin

// DescribeUserScramCredentials, version 0: each user's SCRAM mechanisms
// and iteration counts (never a key), for the named users or, with none
// named, every user. A named user without credentials gets
// RESOURCE_NOT_FOUND, one named twice DUPLICATE_RESOURCE. With an
// authorizer the principal needs Describe on the cluster.

import (
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = APIs.Add(kapi.API{Key: 50, Min: 0, Max: 0, Blocking: true}, kapi.Reply(handleDescribeUserSCRAM))

func handleDescribeUserSCRAM(b Broker, r *kapi.Request, req *kmsg.DescribeUserSCRAMCredentialsRequest, resp *kmsg.DescribeUserSCRAMCredentialsResponse) {
	st, err := securityState(b, r, nil)
	if err != nil {
		resp.ErrorCode, resp.ErrorMessage = errorOf(err)
		return
	}
	var names []string
	count := map[string]int{}
	for _, u := range req.Users {
		if count[u.Name]++; count[u.Name] == 1 {
			names = append(names, u.Name)
		}
	}
	if len(req.Users) == 0 {
		for name := range st.Users {
			names = append(names, name)
		}
		slices.Sort(names)
	}
	for _, name := range names {
		res := kmsg.NewDescribeUserSCRAMCredentialsResponseResult()
		res.User = name
		switch creds := st.Users[name]; {
		case count[name] > 1:
			res.ErrorCode, res.ErrorMessage = errorOf(fmt.Errorf("%w: user %q is named more than once", kerr.DuplicateResource, name))
		case len(creds) == 0:
			res.ErrorCode, res.ErrorMessage = errorOf(fmt.Errorf("%w: user %q has no SCRAM credential", kerr.ResourceNotFound, name))
		default:
			for _, c := range creds {
				info := kmsg.NewDescribeUserSCRAMCredentialsResponseResultCredentialInfo()
				info.Mechanism, info.Iterations = int8(c.Mechanism), c.Iterations
				res.CredentialInfos = append(res.CredentialInfos, info)
			}
		}
		resp.Results = append(resp.Results, res)
	}
}
