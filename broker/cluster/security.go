package cluster

import (
	"errors"
	"maps"
	"slices"

	"github.com/simtel/simtel/broker/auth"
)

// Security is the SCRAM credentials and ACLs the controller replicates
// (Metadata.Security), so that every broker authenticates and authorizes
// alike. A single broker keeps the same value in its data directory. Like
// Metadata, a published Security is never changed: Apply builds the next.
type Security struct {
	// Users holds each user's credentials, one per mechanism, sorted by
	// mechanism. Never a password: the salt, iterations and derived keys.
	Users map[string][]auth.ScramCredential `json:"users,omitempty"`
	// ACLs in the order they were created, without duplicates.
	ACLs []auth.ACL `json:"acls,omitempty"`
}

// The security commands.
const (
	// OpUpsertScram sets User's credential for Credential.Mechanism.
	OpUpsertScram Op = "upsert_scram"
	// OpDeleteScram deletes User's credential for Mechanism; fails with
	// ErrNoCredential if there is none.
	OpDeleteScram Op = "delete_scram"
	// OpCreateACLs adds ACLs (those already present are kept once).
	OpCreateACLs Op = "create_acls"
	// OpDeleteACLs deletes the ACLs each of Filters matches;
	// Result.DeletedACLs lists them, filter by filter.
	OpDeleteACLs Op = "delete_acls"
)

// ErrNoCredential: a deletion named a user and mechanism without a
// credential.
var ErrNoCredential = errors.New("no such SCRAM credential")

func init() { resultErrors["no_credential"] = ErrNoCredential }

// ACLFilter is an auth.ACLFilter as a command carries it.
type ACLFilter struct {
	ResourceType auth.ResourceType `json:"resource_type"`
	ResourceName *string           `json:"resource_name,omitempty"`
	PatternType  auth.PatternType  `json:"pattern_type"`
	Principal    *string           `json:"principal,omitempty"`
	Host         *string           `json:"host,omitempty"`
	Operation    auth.Operation    `json:"operation"`
	Permission   auth.Permission   `json:"permission"`
}

// ScramCredential implements auth.CredentialStore.
func (s *Security) ScramCredential(user string, m auth.ScramMechanism) (auth.ScramCredential, bool) {
	for _, c := range s.Users[user] {
		if c.Mechanism == m {
			return c, true
		}
	}
	return auth.ScramCredential{}, false
}

// Apply returns the state after c (a security command) and its result;
// s itself is not changed. A failed command returns s.
func (s *Security) Apply(c Command) (*Security, Result) {
	next := &Security{Users: s.Users, ACLs: s.ACLs}
	switch c.Op {
	case OpUpsertScram:
		if c.User == "" || c.Credential == nil {
			return s, failure(ErrBadCommand, "upsert_scram without a user or credential")
		}
		creds := slices.DeleteFunc(slices.Clone(s.Users[c.User]), func(o auth.ScramCredential) bool { return o.Mechanism == c.Credential.Mechanism })
		creds = append(creds, *c.Credential)
		slices.SortFunc(creds, func(a, b auth.ScramCredential) int { return int(a.Mechanism) - int(b.Mechanism) })
		next.Users = maps.Clone(s.Users)
		if next.Users == nil {
			next.Users = map[string][]auth.ScramCredential{}
		}
		next.Users[c.User] = creds
	case OpDeleteScram:
		if _, ok := s.ScramCredential(c.User, c.Mechanism); !ok {
			return s, failure(ErrNoCredential, "user %q has no %s credential", c.User, c.Mechanism)
		}
		creds := slices.DeleteFunc(slices.Clone(s.Users[c.User]), func(o auth.ScramCredential) bool { return o.Mechanism == c.Mechanism })
		next.Users = maps.Clone(s.Users)
		if len(creds) == 0 {
			delete(next.Users, c.User)
		} else {
			next.Users[c.User] = creds
		}
	case OpCreateACLs:
		for _, a := range c.ACLs {
			if err := a.Validate(); err != nil {
				return s, failure(ErrBadCommand, "%v", err)
			}
		}
		next.ACLs = slices.Clone(s.ACLs)
		for _, a := range c.ACLs {
			if !slices.Contains(next.ACLs, a) {
				next.ACLs = append(next.ACLs, a)
			}
		}
	case OpDeleteACLs:
		var res Result
		keep := slices.Clone(s.ACLs)
		for _, f := range c.Filters {
			af := auth.ACLFilter(f)
			var deleted []auth.ACL
			keep = slices.DeleteFunc(keep, func(a auth.ACL) bool {
				if af.Matches(a) {
					deleted = append(deleted, a)
					return true
				}
				return false
			})
			res.DeletedACLs = append(res.DeletedACLs, deleted)
		}
		next.ACLs = keep
		if len(next.ACLs) == 0 {
			next.ACLs = nil
		}
		return next, res
	default:
		return s, failure(ErrBadCommand, "%q is not a security command", c.Op)
	}
	return next, Result{}
}
