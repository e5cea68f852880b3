package admin

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
)

// UserCredential is one SCRAM credential of a user, as `simtel user list`
// prints it (the broker never tells more: no salt, no key).
type UserCredential struct {
	User       string
	Mechanism  string // SCRAM-SHA-256 or SCRAM-SHA-512
	Iterations int32
}

// DefaultScramIterations is the iteration count of a new credential when
// none is given (Kafka's tools default to 4096; the broker accepts 4096
// to 16384).
const DefaultScramIterations = 8192

// ParseScramMechanism reads SCRAM-SHA-256 or SCRAM-SHA-512 (any case).
func ParseScramMechanism(name string) (kadm.ScramMechanism, error) {
	switch strings.ToUpper(name) {
	case "SCRAM-SHA-256":
		return kadm.ScramSha256, nil
	case "SCRAM-SHA-512":
		return kadm.ScramSha512, nil
	}
	return 0, fmt.Errorf("unknown SCRAM mechanism %q: use SCRAM-SHA-256 or SCRAM-SHA-512", name)
}

// AddUser creates or changes user's credential for mechanism. kadm salts
// and iterates the password here; only the salted password crosses the
// network, and the broker keeps keys derived from it.
func (c *Client) AddUser(ctx context.Context, user string, mechanism kadm.ScramMechanism, password string, iterations int32) error {
	if password == "" {
		return fmt.Errorf("cannot add user %q: the password is empty", user)
	}
	res, err := c.adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: user, Mechanism: mechanism, Iterations: iterations, Password: password}})
	return alteredUser("add", user, res, err)
}

// DeleteUser deletes user's credentials: the one of mechanism, or with
// mechanism 0 every one the user has.
func (c *Client) DeleteUser(ctx context.Context, user string, mechanism kadm.ScramMechanism) error {
	mechs := []kadm.ScramMechanism{mechanism}
	if mechanism == 0 {
		described, err := c.adm.DescribeUserSCRAMs(ctx, user)
		if err != nil {
			return fmt.Errorf("cannot look up user %q: %w", user, reach(err))
		}
		d := described[user]
		if d.Err != nil {
			return fmt.Errorf("cannot delete user %q: %w%s", user, d.Err, detail(d.ErrMessage))
		}
		mechs = mechs[:0]
		for _, ci := range d.CredInfos {
			mechs = append(mechs, ci.Mechanism)
		}
	}
	var del []kadm.DeleteSCRAM
	for _, m := range mechs {
		del = append(del, kadm.DeleteSCRAM{User: user, Mechanism: m})
	}
	res, err := c.adm.AlterUserSCRAMs(ctx, del, nil)
	return alteredUser("delete", user, res, err)
}

func alteredUser(verb, user string, res kadm.AlteredUserSCRAMs, err error) error {
	if err != nil {
		return fmt.Errorf("cannot %s user %q: %w", verb, user, reach(err))
	}
	if r, ok := res[user]; ok && r.Err != nil {
		return fmt.Errorf("cannot %s user %q: %w%s", verb, user, r.Err, detail(r.ErrMessage))
	}
	return nil
}

// detail is a broker's error message to append to an error, if any.
func detail(msg string) string {
	if msg == "" {
		return ""
	}
	return " (" + msg + ")"
}

// ListUsers lists every user's SCRAM credentials, by user and mechanism.
func (c *Client) ListUsers(ctx context.Context) ([]UserCredential, error) {
	described, err := c.adm.DescribeUserSCRAMs(ctx)
	if err != nil {
		return nil, fmt.Errorf("cannot list users: %w", reach(err))
	}
	var out []UserCredential
	for _, d := range described {
		if d.Err != nil {
			return nil, fmt.Errorf("cannot list user %q: %w%s", d.User, d.Err, detail(d.ErrMessage))
		}
		for _, ci := range d.CredInfos {
			out = append(out, UserCredential{User: d.User, Mechanism: ci.Mechanism.String(), Iterations: ci.Iterations})
		}
	}
	slices.SortFunc(out, func(a, b UserCredential) int {
		if c := strings.Compare(a.User, b.User); c != 0 {
			return c
		}
		return strings.Compare(a.Mechanism, b.Mechanism)
	})
	return out, nil
}
