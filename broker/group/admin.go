package group

import (
	"cmp"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeGroups handles a DescribeGroups request (v0-v5). Unknown groups
// are described as Dead with no error, as Kafka does before v6. Member
// metadata and assignments are only reported for Stable groups (in other
// states they are in flux), again as Kafka does.
func (c *Coordinator) DescribeGroups(req *kmsg.DescribeGroupsRequest) *kmsg.DescribeGroupsResponse {
	resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, name := range req.Groups {
		dg := kmsg.NewDescribeGroupsResponseGroup()
		dg.Group = name
		switch g := c.mu.groups[name]; {
		case name == "":
			dg.ErrorCode = kerr.InvalidGroupID.Code
		case c.mu.closed:
			dg.ErrorCode = kerr.CoordinatorNotAvailable.Code
		case g == nil:
			dg.State = stateDead.String()
			if req.Version >= 6 {
				dg.ErrorCode = kerr.GroupIDNotFound.Code
			}
		default:
			dg.State = g.state.String()
			dg.ProtocolType = g.protocolType
			stable := g.state == stateStable
			if stable {
				dg.Protocol = g.protocol
			}
			for _, m := range g.sortedMembersLocked() {
				dm := kmsg.NewDescribeGroupsResponseGroupMember()
				dm.MemberID = m.id
				if m.static() {
					dm.InstanceID = kmsg.StringPtr(m.instanceID)
				}
				dm.ClientID = m.clientID
				dm.ClientHost = m.clientHost
				if stable {
					dm.ProtocolMetadata = m.metadataFor(g.protocol)
					dm.MemberAssignment = m.assignment
				}
				dg.Members = append(dg.Members, dm)
			}
		}
		resp.Groups = append(resp.Groups, dg)
	}
	return resp
}

// ListGroups handles a ListGroups request (v0-v5), filtering by state
// (v4+, case-insensitive like Kafka) and type (v5+; every group here is
// "classic").
func (c *Coordinator) ListGroups(req *kmsg.ListGroupsRequest) *kmsg.ListGroupsResponse {
	resp := req.ResponseKind().(*kmsg.ListGroupsResponse)
	matches := func(filter []string, v string) bool {
		return len(filter) == 0 || slices.ContainsFunc(filter, func(f string) bool { return strings.EqualFold(f, v) })
	}
	var states, types []string
	if req.Version >= 4 {
		states = req.StatesFilter
	}
	if req.Version >= 5 {
		types = req.TypesFilter
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed {
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		return resp
	}
	if !matches(types, "classic") {
		return resp
	}
	for name, g := range c.mu.groups {
		if g.state == stateDead || !matches(states, g.state.String()) {
			continue
		}
		lg := kmsg.NewListGroupsResponseGroup()
		lg.Group = name
		lg.ProtocolType = g.protocolType
		lg.GroupState = g.state.String()
		lg.GroupType = "classic"
		resp.Groups = append(resp.Groups, lg)
	}
	slices.SortFunc(resp.Groups, func(a, b kmsg.ListGroupsResponseGroup) int { return cmp.Compare(a.Group, b.Group) })
	return resp
}

// DeleteGroups handles a DeleteGroups request (v0-v2): Empty groups are
// deleted with their offsets, others get NON_EMPTY_GROUP.
func (c *Coordinator) DeleteGroups(req *kmsg.DeleteGroupsRequest) *kmsg.DeleteGroupsResponse {
	resp := req.ResponseKind().(*kmsg.DeleteGroupsResponse)
	for _, name := range req.Groups {
		dg := kmsg.NewDeleteGroupsResponseGroup()
		dg.Group = name
		dg.ErrorCode = c.deleteGroup(name)
		resp.Groups = append(resp.Groups, dg)
	}
	return resp
}

// deleteGroup deletes one group. Race walk-through: under storeMu (so the
// persister cannot save the group around the delete) and mu, the group is
// checked Empty and waits until no write of its offsets is in flight; it
// is then marked Dead with inflightAll set, which makes joins, commits and
// offset deletes of it fail with retriable errors instead of starting new
// store writes. mu is released for Store.DeleteGroup, and the group leaves
// the map only after the store confirmed: a request recreating it can only
// do so afterwards, so its writes reach the store after the delete.
func (c *Coordinator) deleteGroup(name string) int16 {
	if name == "" {
		return kerr.InvalidGroupID.Code
	}
	c.storeMu.Lock()
	defer c.storeMu.Unlock()
	c.mu.Lock()
	var g *group
	for {
		if c.mu.closed {
			c.mu.Unlock()
			return kerr.CoordinatorNotAvailable.Code
		}
		g = c.mu.groups[name]
		switch {
		case g == nil, g.state == stateDead:
			c.mu.Unlock()
			return kerr.GroupIDNotFound.Code
		case g.state != stateEmpty:
			c.mu.Unlock()
			return kerr.NonEmptyGroup.Code
		}
		if !g.persistConflictLocked(nil, true) {
			break
		}
		if !c.waitPersistLocked(g) {
			c.mu.Unlock()
			return kerr.CoordinatorNotAvailable.Code
		}
	}
	g.state = stateDead
	g.inflightAll = true
	c.ops.Add(1)
	c.mu.Unlock()

	err := c.store.DeleteGroup(name)

	c.mu.Lock()
	if err == nil {
		delete(c.mu.groups, name)
		delete(c.mu.unsaved, name)
	} else {
		g.state = stateEmpty
	}
	g.persistReleaseLocked(nil, true)
	c.mu.Unlock()
	c.ops.Done()
	if err != nil {
		c.logger.Error("delete group from store failed", "group", name, "err", err)
		return kerr.CoordinatorNotAvailable.Code
	}
	c.logger.Info("group deleted", "group", name)
	return 0
}
