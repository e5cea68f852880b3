package wal

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/simtel/simtel/internal/testutil"
)

// modelGroup is the simple model a group's store is checked against.
type modelGroup struct {
	first, last uint64 // last == 0: empty
	data        map[uint64]string
	stable      map[string]string
}

func (m *modelGroup) clone() *modelGroup {
	return &modelGroup{first: m.first, last: m.last, data: maps.Clone(m.data), stable: maps.Clone(m.stable)}
}

type model map[uint64]*modelGroup

func (m model) clone() model {
	out := model{}
	for k, g := range m {
		out[k] = g.clone()
	}
	return out
}

// diff describes how the WAL differs from the model, or "".
func diff(w *WAL, m model, groups []uint64) string {
	for _, id := range groups {
		g := m[id]
		if g == nil {
			g = &modelGroup{data: map[uint64]string{}, stable: map[string]string{}}
		}
		s := w.Store(id)
		f, _ := s.FirstIndex()
		l, _ := s.LastIndex()
		wf, wl := g.first, g.last
		if wl == 0 {
			wf = 0
		}
		if f != wf || l != wl {
			return fmt.Sprintf("group %d: first %d last %d, want %d %d", id, f, l, wf, wl)
		}
		for i := wf; wl > 0 && i <= wl; i++ {
			var got raft.Log
			if err := s.GetLog(i, &got); err != nil || string(got.Data) != g.data[i] {
				return fmt.Sprintf("group %d entry %d: got %q (%v), want %q", id, i, got.Data, err, g.data[i])
			}
		}
		for _, k := range []string{"CurrentTerm", "LastVoteCand"} {
			v, err := s.Get([]byte(k))
			want, ok := g.stable[k]
			if ok != (err == nil) || string(v) != want {
				return fmt.Sprintf("group %d stable %s: got %q (%v), want %q (set %v)", id, k, v, err, want, ok)
			}
		}
	}
	return ""
}

// TestCrashRecoveryModel runs random operations on a few groups with tiny
// segments (so segments roll and get deleted), and now and then
// "crashes": the files are closed without Close and the last
// operation's bytes are cut at a random point, or garbage or zeros are
// appended. The reopened WAL must equal the model before or after the
// last operation (for a multi-entry append: before plus a prefix of its
// entries), and keep working.
func TestCrashRecoveryModel(t *testing.T) {
	for seed := range uint64(10) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { crashModel(t, seed) })
	}
}

func crashModel(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 99))
	dir := t.TempDir()
	opts := Options{SegmentBytes: 2048}
	w := openT(t, dir, opts)
	defer func() { w.Close() }()
	groups := []uint64{1, 2, 3}
	m := model{}
	get := func(id uint64) *modelGroup {
		if m[id] == nil {
			m[id] = &modelGroup{data: map[uint64]string{}, stable: map[string]string{}}
		}
		return m[id]
	}
	for step := range 600 {
		id := groups[rng.IntN(len(groups))]
		s := w.Store(id)
		g := get(id)
		before := m.clone()
		segsBefore := len(w.mu.segs)
		activeBefore := w.activeLocked()
		sizeBefore := activeBefore.size
		var appended []uint64 // entries of this op, for the prefix rule
		switch op := rng.IntN(10); {
		case op < 5: // append 1-4 entries
			next := g.last + 1
			if g.last == 0 && g.first > 0 {
				next = g.first
			}
			if g.last == 0 && g.first == 0 {
				next = 1
			}
			n := 1 + rng.IntN(4)
			var logs []*raft.Log
			for i := range n {
				idx := next + uint64(i)
				d := fmt.Sprintf("s%d-g%d-i%d-%s", step, id, idx, bytes.Repeat([]byte("z"), rng.IntN(300)))
				logs = append(logs, entry(idx, 1, d))
				g.data[idx] = d
				appended = append(appended, idx)
			}
			mustStore(t, s, logs)
			if g.last == 0 {
				g.first = next
			}
			g.last = next + uint64(n) - 1
		case op < 7 && g.last > 0: // prefix delete
			hi := g.first + uint64(rng.IntN(int(g.last-g.first+1)))
			if err := s.DeleteRange(g.first, hi); err != nil {
				t.Fatal(err)
			}
			for i := g.first; i <= hi; i++ {
				delete(g.data, i)
			}
			if hi == g.last {
				g.first, g.last = 0, 0
			} else {
				g.first = hi + 1
			}
		case op < 8 && g.last > 0: // suffix delete
			lo := g.first + uint64(rng.IntN(int(g.last-g.first+1)))
			if err := s.DeleteRange(lo, g.last); err != nil {
				t.Fatal(err)
			}
			for i := lo; i <= g.last; i++ {
				delete(g.data, i)
			}
			if lo == g.first {
				g.first, g.last = 0, 0
			} else {
				g.last = lo - 1
			}
		case op < 9:
			k := []string{"CurrentTerm", "LastVoteCand"}[rng.IntN(2)]
			v := fmt.Sprint(step)
			if err := s.Set([]byte(k), []byte(v)); err != nil {
				t.Fatal(err)
			}
			g.stable[k] = v
		default:
			if err := w.DropGroup(id); err != nil {
				t.Fatal(err)
			}
			delete(m, id)
		}
		if d := diff(w, m, groups); d != "" {
			t.Fatalf("step %d, live: %s", step, d)
		}
		if rng.IntN(8) != 0 {
			continue
		}
		// Crash after this operation.
		active := w.activeLocked()
		cut := active == activeBefore && len(w.mu.segs) == segsBefore && active.size > sizeBefore && rng.IntN(2) == 0
		path := active.f.Name()
		size := active.size
		w.closeFiles()
		var how string
		switch {
		case cut:
			at := sizeBefore + rng.Int64N(active.size-sizeBefore)
			how = fmt.Sprintf("cut at %d of %d-%d", at, sizeBefore, size)
			if err := os.Truncate(path, at); err != nil {
				t.Fatal(err)
			}
		case rng.IntN(2) == 0:
			how = "garbage appended"
			junk := make([]byte, 1+rng.IntN(100))
			for i := range junk {
				junk[i] = byte(rng.Uint32())
			}
			testutil.AppendFile(t, path, junk)
		default:
			how = "zeros appended"
			testutil.AppendFile(t, path, make([]byte, 1+rng.IntN(100)))
		}
		w = openT(t, dir, opts)
		if d := diff(w, m, groups); d == "" {
			continue
		} else if !cut {
			t.Fatalf("step %d, after a crash (%s) that lost nothing: %s", step, how, d)
		}
		// The cut lost (part of) the last operation: the state must be
		// the one before it, plus a prefix of its appended entries.
		ok := false
		for k := 0; k <= len(appended) && !ok; k++ {
			cand := before.clone()
			if k > 0 {
				cg := cand[id]
				if cg == nil {
					cg = &modelGroup{data: map[uint64]string{}, stable: map[string]string{}}
					cand[id] = cg
				}
				for _, idx := range appended[:k] {
					cg.data[idx] = m[id].data[idx]
				}
				if cg.last == 0 {
					cg.first = appended[0]
				}
				cg.last = appended[k-1]
			}
			if diff(w, cand, groups) == "" {
				m, ok = cand, true
			}
		}
		if !ok {
			t.Fatalf("step %d, after a crash (%s): the state is neither before nor after the last operation: %s", step, how, diff(w, before, groups))
		}
	}
}
