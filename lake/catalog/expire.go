package catalog

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Expiration records that retention removed objects from the lake (see
// lake/retention). It is one catalog file, written whole, so a reader
// sees either none or all of its objects gone. From the moment it is
// written Load hides Keys, and also whatever an earlier compaction merged
// any of them into (a retention pass that loaded the catalog before that
// compaction names the originals). A compaction recorded after it that
// replaces an expired object is not applied (Snapshot.Skipped), so no
// expired row comes back through a merge that raced with retention.
//
// The objects themselves are deleted later, once no reader may still hold
// a snapshot that shows them; Deleted is set when that is done.
type Expiration struct {
	ID      string    `json:"id"` // set by CommitExpiration when empty; sorts by time like compaction ids
	Keys    []string  `json:"keys"`
	Reason  string    `json:"reason,omitempty"` // for operators: the policy that expired them
	Written time.Time `json:"written"`
	// Deleted is when the objects were deleted from the store; zero while
	// they are still there (or may be).
	Deleted time.Time `json:"deleted,omitzero"`
	// Hidden is every key the record hides in the snapshot it was loaded
	// into: Keys, and the objects earlier compactions merged them into.
	// Set by Load, not stored.
	Hidden []string `json:"-"`
}

// ExpirationKey is the catalog key of an expiration record.
func ExpirationKey(id string) string { return expirePrefix + id + ".json" }

// CommitExpiration hides the objects named in ex.Keys from every later
// Load. An empty ex.ID is replaced by a fresh one that sorts by time; the
// record committed is returned.
func (c *Catalog) CommitExpiration(ctx context.Context, ex Expiration) (Expiration, error) {
	if len(ex.Keys) == 0 {
		return ex, errors.New("cannot commit an expiration of no objects")
	}
	for i, k := range ex.Keys {
		if k == "" || strings.HasPrefix(k, Prefix) {
			return ex, fmt.Errorf("cannot commit expiration: key %d (%q) is not a data object", i, k)
		}
	}
	now := time.Now().UTC()
	if ex.ID == "" {
		ex.ID = newCompactionID(now)
	} else if strings.ContainsAny(ex.ID, "/\\") || strings.HasPrefix(ex.ID, ".") {
		return ex, fmt.Errorf("cannot commit expiration: id %q may not contain slashes or start with a dot", ex.ID)
	}
	if ex.Written.IsZero() {
		ex.Written = now
	}
	if err := c.putJSON(ctx, ExpirationKey(ex.ID), ex); err != nil {
		return ex, fmt.Errorf("cannot commit expiration %s: %w", ex.ID, err)
	}
	return ex, nil
}

// MarkExpirationDeleted records that the objects of ex are deleted, so
// later retention passes do not look for them again. The record stays: it
// keeps hiding the keys, which the flush entries still name.
func (c *Catalog) MarkExpirationDeleted(ctx context.Context, ex Expiration, at time.Time) error {
	if ex.ID == "" {
		return errors.New("cannot mark an expiration without an id deleted")
	}
	ex.Deleted = at.UTC()
	if err := c.putJSON(ctx, ExpirationKey(ex.ID), ex); err != nil {
		return fmt.Errorf("cannot mark expiration %s deleted: %w", ex.ID, err)
	}
	return nil
}
