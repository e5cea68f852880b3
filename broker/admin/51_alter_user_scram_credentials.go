package admin

// AlterUserScramCredentials, version 0: upsertions carry the salt, the
// iteration count and the salted password the client computed; the broker
// keeps the salt, iterations and the keys derived from it (never the
// salted password). Deletions name a user and mechanism. Each user gets
// one result, checked as Kafka does: an empty name or an iteration count
// outside 4096..16384 UNACCEPTABLE_CREDENTIAL, an unknown mechanism
// UNSUPPORTED_SASL_MECHANISM, a user and mechanism altered twice
// DUPLICATE_RESOURCE, the deletion of a missing credential
// RESOURCE_NOT_FOUND. Each change goes through the controller (a single
// broker writes its data directory). With an authorizer the principal
// needs Alter on the cluster.

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/broker/cluster"
	"github.com/simtel/simtel/broker/kapi"
)

var _ = APIs.Add(kapi.API{Key: 51, Min: 0, Max: 0, Blocking: true}, kapi.Reply(handleAlterUserSCRAM))

func handleAlterUserSCRAM(b Broker, r *kapi.Request, req *kmsg.AlterUserSCRAMCredentialsRequest, resp *kmsg.AlterUserSCRAMCredentialsResponse) {

	// Every user's commands, in request order, and the first error of
	// each user (which then applies none of its commands).
	var users []string
	cmds := map[string][]cluster.Command{}
	errs := map[string]error{}
	altered := map[string]map[int8]int{} // user → mechanism → times named
	note := func(user string, mech int8) {
		if _, ok := altered[user]; !ok {
			users = append(users, user)
			altered[user] = map[int8]int{}
		}
		altered[user][mech]++
	}
	for _, d := range req.Deletions {
		note(d.Name, d.Mechanism)
	}
	for _, u := range req.Upsertions {
		note(u.Name, u.Mechanism)
	}
	setErr := func(user string, err error) {
		if errs[user] == nil {
			errs[user] = err
		}
	}
	check := func(user string, mech int8) bool {
		switch m := auth.ScramMechanism(mech); {
		case user == "":
			setErr(user, fmt.Errorf("%w: the user name is empty", kerr.UnacceptableCredential))
		case m != auth.ScramSHA256 && m != auth.ScramSHA512:
			setErr(user, fmt.Errorf("%w: unknown SCRAM mechanism %d", kerr.UnsupportedSaslMechanism, mech))
		case altered[user][mech] > 1:
			setErr(user, fmt.Errorf("%w: the %s credential of %q is altered more than once", kerr.DuplicateResource, m, user))
		default:
			return true
		}
		return false
	}
	for _, d := range req.Deletions {
		if check(d.Name, d.Mechanism) {
			cmds[d.Name] = append(cmds[d.Name], cluster.Command{Op: cluster.OpDeleteScram, User: d.Name, Mechanism: auth.ScramMechanism(d.Mechanism)})
		}
	}
	for _, u := range req.Upsertions {
		if !check(u.Name, u.Mechanism) {
			continue
		}
		switch {
		case u.Iterations < auth.MinScramIterations || u.Iterations > auth.MaxScramIterations:
			setErr(u.Name, fmt.Errorf("%w: %d iterations: use %d to %d", kerr.UnacceptableCredential, u.Iterations, auth.MinScramIterations, auth.MaxScramIterations))
		case len(u.Salt) == 0 || len(u.SaltedPassword) == 0:
			setErr(u.Name, fmt.Errorf("%w: the salt and the salted password must not be empty", kerr.UnacceptableCredential))
		default:
			c := auth.ScramCredentialFromSalted(auth.ScramMechanism(u.Mechanism), u.Salt, u.SaltedPassword, u.Iterations)
			cmds[u.Name] = append(cmds[u.Name], cluster.Command{Op: cluster.OpUpsertScram, User: u.Name, Credential: &c})
		}
	}

	authorized := clusterAuthorized(b, r, kmsg.ACLOperationAlter)
	ctx, cancel := securityContext(r)
	defer cancel()
	for _, user := range users {
		err := errs[user]
		if !authorized {
			err = errClusterAuthorization(r, kmsg.ACLOperationAlter)
		}
		for _, c := range cmds[user] {
			if err != nil {
				break
			}
			if _, aerr := b.Security().Apply(ctx, c); aerr != nil {
				err = securityError(aerr)
			} else {
				b.Logger().Info("scram credential changed", "op", c.Op, "user", user, "principal", r.Principal)
			}
		}
		res := kmsg.NewAlterUserSCRAMCredentialsResponseResult()
		res.User = user
		if err != nil {
			res.ErrorCode, res.ErrorMessage = errorOf(err)
		}
		resp.Results = append(resp.Results, res)
	}
}
