package group

import (
	"bytes"
	"cmp"
	"slices"
)

// storeState is the live content of a store: what Load returns. Both
// stores apply records to it through apply (MemStore as calls arrive,
// LogStore when it replays its log), so the two give the same answers for
// the same history.
//
// storeState has no lock: its owner serializes access (MemStore with its
// mutex, LogStore by building one per replay).
type storeState struct {
	groups map[string]*storeGroup
}

type storeGroup struct {
	meta    GroupMeta
	offsets map[TopicPartition]CommittedOffset
}

func newStoreState() *storeState {
	return &storeState{groups: make(map[string]*storeGroup)}
}

func (s *storeState) group(name string) *storeGroup {
	g := s.groups[name]
	if g == nil {
		g = &storeGroup{
			meta:    GroupMeta{Group: name},
			offsets: make(map[TopicPartition]CommittedOffset),
		}
		s.groups[name] = g
	}
	return g
}

// apply applies one decoded record. The record's slices must not be shared
// with anyone else: apply keeps them.
func (s *storeState) apply(r *record) {
	switch r.kind {
	case recCommit:
		g := s.group(r.group)
		for _, o := range r.offsets {
			g.offsets[TopicPartition{o.Topic, o.Partition}] = o
		}
	case recDeleteOffsets:
		// Deleting offsets of an unknown group must not create it: the
		// group may have been deleted concurrently in the coordinator's
		// view, and a resurrected empty group would be visible in
		// ListGroups after a restart.
		if g := s.groups[r.group]; g != nil {
			for _, tp := range r.tps {
				delete(g.offsets, tp)
			}
		}
	case recDeleteGroup:
		delete(s.groups, r.group)
	case recSaveGroup:
		g := s.group(r.group)
		g.meta = r.meta
		g.meta.Group = r.group
	}
}

// snapshot returns a deep copy of the state, sorted so that it is
// deterministic (tests compare snapshots).
func (s *storeState) snapshot() State {
	var st State
	for _, g := range s.groups {
		gs := GroupState{Meta: cloneMeta(g.meta)}
		for _, o := range g.offsets {
			gs.Offsets = append(gs.Offsets, o)
		}
		slices.SortFunc(gs.Offsets, func(a, b CommittedOffset) int {
			return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
		})
		st.Groups = append(st.Groups, gs)
	}
	slices.SortFunc(st.Groups, func(a, b GroupState) int { return cmp.Compare(a.Meta.Group, b.Meta.Group) })
	return st
}

// records returns the records that rebuild the state from nothing
// (MemStore.Reopen). Offsets are chunked so that no record grows unbounded
// with the size of a group.
func (s *storeState) records() []record {
	const maxOffsetsPerRecord = 1024
	var recs []record
	for _, gs := range s.snapshot().Groups {
		recs = append(recs, record{kind: recSaveGroup, group: gs.Meta.Group, meta: gs.Meta})
		for offs := range slices.Chunk(gs.Offsets, maxOffsetsPerRecord) {
			recs = append(recs, record{kind: recCommit, group: gs.Meta.Group, offsets: offs})
		}
	}
	return recs
}

func cloneMeta(m GroupMeta) GroupMeta {
	out := m
	out.Members = nil
	for _, mm := range m.Members {
		c := mm
		c.Assignment = bytes.Clone(mm.Assignment)
		c.Protocols = nil
		for _, p := range mm.Protocols {
			c.Protocols = append(c.Protocols, ProtocolMeta{Name: p.Name, Metadata: bytes.Clone(p.Metadata)})
		}
		out.Members = append(out.Members, c)
	}
	return out
}
