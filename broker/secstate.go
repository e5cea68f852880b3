package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/simtel/simtel/broker/admin"
	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/broker/cluster"
	"github.com/simtel/simtel/internal/fsutil"
)

// secState is the broker's SCRAM credentials and ACLs: in cluster mode the
// controller's replicated cluster.Security, on a single broker the same
// value kept in security.json in the data directory. It is the broker's
// auth.CredentialStore and feeds its authorizer.
type secState struct {
	b    *Broker
	path string
	// mu serializes a single broker's changes, so the file and local
	// change together.
	mu    sync.Mutex
	local atomic.Pointer[cluster.Security]
	authz auth.Authorizer // nil without --authorizer acl
}

var _ auth.CredentialStore = (*secState)(nil)

// securityFile holds a single broker's credentials and ACLs.
const securityFile = "security.json"

// openSecState loads a single broker's state from its data directory (a
// cluster broker's comes from the controller) and builds the authorizer
// the config asks for.
func openSecState(b *Broker) (*secState, error) {
	s := &secState{b: b, path: filepath.Join(b.cfg.DataDir, securityFile)}
	s.local.Store(&cluster.Security{})
	if b.cfg.clustered() {
		if _, err := os.Stat(s.path); err == nil {
			// A single broker's users and ACLs in a cluster broker's
			// directory: they now come from the controller.
			b.log.Warn("ignoring a single broker's users and acls in cluster mode; add them again with simtel user and simtel acl", "file", s.path)
		}
	} else {
		data, err := os.ReadFile(s.path)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return nil, fmt.Errorf("cannot read %s: %w", s.path, err)
		default:
			var sec cluster.Security
			if err := json.Unmarshal(data, &sec); err != nil {
				return nil, fmt.Errorf("cannot parse %s: %w", s.path, err)
			}
			s.local.Store(&sec)
		}
	}
	if b.cfg.Authorizer == AuthorizerACL {
		z := &auth.ACLAuthorizer{
			ACLs:                      func() []auth.ACL { return s.current().ACLs },
			AllowEveryoneIfNoACLFound: b.cfg.AllowEveryoneIfNoACLFound,
		}
		for _, u := range b.cfg.SuperUsers {
			z.SuperUsers = append(z.SuperUsers, auth.Principal(u))
		}
		s.authz = z
	}
	return s, nil
}

// current is the state this broker knows now.
func (s *secState) current() *cluster.Security {
	if n := s.b.cluster; n != nil {
		return n.Metadata().Security
	}
	return s.local.Load()
}

// ScramCredential implements auth.CredentialStore.
func (s *secState) ScramCredential(user string, m auth.ScramMechanism) (auth.ScramCredential, bool) {
	return s.current().ScramCredential(user, m)
}

// State implements admin.Security: with fresh, a cluster broker first
// catches up with the controller, so a change made through another broker
// a moment ago is seen.
func (s *secState) State(ctx context.Context, fresh bool) (*cluster.Security, error) {
	if n := s.b.cluster; n != nil && fresh {
		if err := n.CatchUp(ctx); err != nil {
			return nil, admin.ControllerError(err)
		}
	}
	return s.current(), nil
}

// Apply implements admin.Security: a security command goes through the
// controller (forwarded to its leader) in cluster mode; a single broker
// applies it and writes its file before the change is seen.
func (s *secState) Apply(ctx context.Context, c cluster.Command) (cluster.Result, error) {
	if n := s.b.cluster; n != nil {
		return n.Apply(ctx, c)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	next, res := s.local.Load().Apply(c)
	if err := res.Err(); err != nil {
		return res, err
	}
	data, err := json.MarshalIndent(next, "", "  ")
	if err != nil {
		return cluster.Result{}, fmt.Errorf("cannot encode the security state: %w", err)
	}
	if err := fsutil.WriteFile(s.path, data, fsutil.WriteOptions{SyncDir: true}); err != nil {
		return cluster.Result{}, fmt.Errorf("cannot save the security state: %w", err)
	}
	s.local.Store(next)
	return res, nil
}

// Authorizer implements admin.Security.
func (s *secState) Authorizer() auth.Authorizer { return s.authz }

func (a adminBroker) Security() admin.Security { return a.b.sec }

// The values of Config.Authorizer.
const (
	AuthorizerNone = "none"
	AuthorizerACL  = "acl"
)

// validateAuthorizer checks the authorizer's settings.
func (c *Config) validateAuthorizer() error {
	switch c.Authorizer {
	case "", AuthorizerNone, AuthorizerACL:
	default:
		return fmt.Errorf("--authorizer %q: use acl or none", c.Authorizer)
	}
	for _, u := range c.SuperUsers {
		if typ, name, ok := strings.Cut(u, ":"); !ok || typ == "" || name == "" {
			return fmt.Errorf("superuser %q is not a principal: write it User:name", u)
		}
	}
	return nil
}
