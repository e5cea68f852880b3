package wal

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
)

// FuzzDecode: no input makes decode panic, and what decodes re-encodes
// to the same bytes.
func FuzzDecode(f *testing.F) {
	f.Add(appendEntry(nil, 7, &raft.Log{Index: 3, Term: 2, Type: raft.LogCommand, Data: []byte("abc")}))
	f.Add(appendDelete(nil, 7, 1, 9))
	f.Add(appendSet(nil, 7, []byte("CurrentTerm"), []byte{0, 0, 0, 0, 0, 0, 0, 1}))
	f.Add(appendDrop(nil, 7))
	f.Add(make([]byte, 17))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decode(b)
		if err != nil {
			return
		}
		var again []byte
		switch r.kind {
		case kindEntry:
			again = appendEntry(nil, r.group, &r.log)
		case kindDelete:
			again = appendDelete(nil, r.group, r.lo, r.hi)
		case kindSet:
			again = appendSet(nil, r.group, r.key, r.val)
		case kindDrop:
			again = appendDrop(nil, r.group)
		}
		if string(again) != string(b) {
			t.Fatalf("decoded %+v re-encodes to %x, was %x", r, again, b)
		}
	})
}

// FuzzOpen: any bytes as the only segment open without a panic; what
// opens accepts a new entry.
func FuzzOpen(f *testing.F) {
	var seg []byte
	seg = appendSet(seg, 1, []byte("CurrentTerm"), []byte{0, 0, 0, 0, 0, 0, 0, 1})
	seg = appendEntry(seg, 1, &raft.Log{Index: 1, Term: 1, Data: []byte("x")})
	seg = appendEntry(seg, 1, &raft.Log{Index: 2, Term: 1, Data: []byte("y")})
	seg = appendDelete(seg, 1, 2, 2)
	f.Add(seg)
	f.Add(seg[:len(seg)-3])
	f.Add(append(seg, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "0000000000000001.wal"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		w, err := Open(dir, Options{})
		if err != nil {
			return
		}
		defer w.Close()
		s := w.Store(1)
		last, err := s.LastIndex()
		if err != nil {
			t.Fatal(err)
		}
		if err := s.StoreLogs([]*raft.Log{{Index: last + 1, Term: 1, Data: []byte("z")}}); err != nil {
			t.Fatalf("store after open: %v", err)
		}
	})
}
