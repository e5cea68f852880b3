package store

import (
	"path/filepath"
	"strings"
	"testing"
)

// FuzzCheckKey: a key checkKey accepts always names a file strictly inside
// the root, and one List can return.
func FuzzCheckKey(f *testing.F) {
	for _, k := range []string{"a", "a/b.parquet", "../x", "a/../b", "/abs", "a//b", "a/.tmp-1", ".", "..", "a\\b", "a/./b", "run=%2F/x"} {
		f.Add(k)
	}
	root := filepath.FromSlash("/lake/root")
	f.Fuzz(func(t *testing.T, key string) {
		if checkKey(key) != nil {
			return
		}
		p := filepath.Join(root, filepath.FromSlash(key))
		if !strings.HasPrefix(p, root+string(filepath.Separator)) {
			t.Fatalf("key %q accepted but resolves to %s, outside %s", key, p, root)
		}
		if rel, _ := filepath.Rel(root, p); filepath.ToSlash(rel) != key {
			t.Fatalf("key %q accepted but lists back as %q", key, rel)
		}
	})
}
