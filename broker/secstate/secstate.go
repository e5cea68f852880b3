// Package secstate is a broker's SCRAM credentials and ACLs: in cluster
// mode the controller's replicated cluster.Security, on a single broker
// the same value kept in security.json in the data directory. A State is
// the broker's auth.CredentialStore, the admin.Security its user and ACL
// APIs change, and the source of the ACLs its authorizer checks.
package secstate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/simtel/simtel/broker/admin"
	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/broker/cluster"
	"github.com/simtel/simtel/internal/fsutil"
)

// File holds a single broker's credentials and ACLs, in its data
// directory.
const File = "security.json"

// Config says where the state lives and which authorizer to build.
type Config struct {
	// Dir is the broker's data directory.
	Dir string
	// Clustered brokers take the state from the controller (Attach); a
	// File left in Dir is then ignored, with a warning.
	Clustered bool
	// ACL builds Kafka's ACL authorizer over the state's ACLs, with
	// SuperUsers ("User:name") and AllowEveryoneIfNoACLFound; without it
	// Authorizer is nil and every request is allowed.
	ACL                       bool
	SuperUsers                []string
	AllowEveryoneIfNoACLFound bool
	Logger                    *slog.Logger
}

// State is one broker's security state.
type State struct {
	path string
	// node is the controller membership once cluster mode has started
	// (Attach); nil on a single broker.
	node atomic.Pointer[cluster.Node]
	// mu serializes a single broker's changes, so the file and local
	// change together.
	mu    sync.Mutex
	local atomic.Pointer[cluster.Security]
	authz auth.Authorizer // nil without Config.ACL
}

var (
	_ auth.CredentialStore = (*State)(nil)
	_ admin.Security       = (*State)(nil)
)

// Open loads a single broker's state from its data directory (a cluster
// broker's comes from the controller) and builds the authorizer the
// config asks for.
func Open(c Config) (*State, error) {
	s := &State{path: filepath.Join(c.Dir, File)}
	s.local.Store(&cluster.Security{})
	if c.Clustered {
		if _, err := os.Stat(s.path); err == nil {
			// A single broker's users and ACLs in a cluster broker's
			// directory: they now come from the controller.
			c.Logger.Warn("ignoring a single broker's users and acls in cluster mode; add them again with simtel user and simtel acl", "file", s.path)
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
	if c.ACL {
		z := &auth.ACLAuthorizer{
			ACLs:                      func() []auth.ACL { return s.current().ACLs },
			AllowEveryoneIfNoACLFound: c.AllowEveryoneIfNoACLFound,
		}
		for _, u := range c.SuperUsers {
			z.SuperUsers = append(z.SuperUsers, auth.Principal(u))
		}
		s.authz = z
	}
	return s, nil
}

// Attach makes the controller's metadata the state, once the broker's
// cluster node has started.
func (s *State) Attach(n *cluster.Node) { s.node.Store(n) }

// current is the state this broker knows now.
func (s *State) current() *cluster.Security {
	if n := s.node.Load(); n != nil {
		return n.Metadata().Security
	}
	return s.local.Load()
}

// ScramCredential implements auth.CredentialStore.
func (s *State) ScramCredential(user string, m auth.ScramMechanism) (auth.ScramCredential, bool) {
	return s.current().ScramCredential(user, m)
}

// State implements admin.Security: with fresh, a cluster broker first
// catches up with the controller, so a change made through another broker
// a moment ago is seen.
func (s *State) State(ctx context.Context, fresh bool) (*cluster.Security, error) {
	if n := s.node.Load(); n != nil && fresh {
		if err := n.CatchUp(ctx); err != nil {
			return nil, admin.ControllerError(err)
		}
	}
	return s.current(), nil
}

// Apply implements admin.Security: a security command goes through the
// controller (forwarded to its leader) in cluster mode; a single broker
// applies it and writes its file before the change is seen.
func (s *State) Apply(ctx context.Context, c cluster.Command) (cluster.Result, error) {
	if n := s.node.Load(); n != nil {
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
func (s *State) Authorizer() auth.Authorizer { return s.authz }
