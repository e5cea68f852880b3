// Package learnertest makes policy data for the tests and benchmarks of
// policy versions and deltas (learner, agent, simtel bench fanout).
package learnertest

import (
	"bytes"
	"crypto/rand"
)

// ChangeRegions returns a copy of data with frac of its bytes replaced by
// random ones, in regions contiguous runs spread evenly over it: the
// tensors that changed between two versions, which a delta carries.
func ChangeRegions(data []byte, frac float64, regions int) []byte {
	out := bytes.Clone(data)
	n := int(float64(len(data))*frac) / regions
	for i := range regions {
		at := (2*i + 1) * len(data) / (2 * regions)
		rand.Read(out[at:min(at+n, len(out))])
	}
	return out
}
