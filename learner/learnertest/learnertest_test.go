package learnertest

import (
	"bytes"
	"testing"
)

func TestChangeRegions(t *testing.T) {
	data := make([]byte, 1000)
	out := ChangeRegions(data, 0.1, 4)
	if len(out) != len(data) {
		t.Fatalf("got %d bytes, want %d", len(out), len(data))
	}
	if !bytes.Equal(data, make([]byte, 1000)) {
		t.Fatal("the input changed")
	}
	// Each region is 25 bytes starting at (2i+1)*1000/8; nothing else
	// may differ. Random bytes equal to zero are allowed, but not all 100.
	changed := 0
	for i, b := range out {
		inRegion := false
		for r := range 4 {
			at := (2*r + 1) * 1000 / 8
			inRegion = inRegion || (i >= at && i < at+25)
		}
		if b != 0 {
			if !inRegion {
				t.Fatalf("byte %d outside the regions changed", i)
			}
			changed++
		}
	}
	if changed < 50 {
		t.Fatalf("%d of 100 bytes changed", changed)
	}
}
