package group

// DeleteGroups, versions 0-2. Blocking: deleting waits for the disk (single
// broker) or a raft majority. In a cluster each group is deleted by its own
// coordinator.

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = manyGroups(kapi.API{Key: 42, Min: 0, Max: 2, Blocking: true}, kmsg.ACLOperationDelete,
	func(q *kmsg.DeleteGroupsRequest) *[]string { return &q.Groups },
	func(p *kmsg.DeleteGroupsResponse) *[]kmsg.DeleteGroupsResponseGroup { return &p.Groups },
	(*Coordinator).DeleteGroups)
