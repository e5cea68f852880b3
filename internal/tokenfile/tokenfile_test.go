package tokenfile_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/simtel/simtel/internal/tokenfile"
)

func TestReadAndHas(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "tokens")
	if err := os.WriteFile(p, []byte("# readers\nalpha\n\n  beta  \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := tokenfile.Read(p, "token file")
	if err != nil {
		t.Fatal(err)
	}
	for tok, want := range map[string]bool{"alpha": true, "beta": true, "# readers": false, "": false, "alph": false, "alphaa": false} {
		if got := s.Has(tok); got != want {
			t.Errorf("Has(%q) = %v, want %v", tok, got, want)
		}
	}
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("# none yet\n\n"), 0o600)
	if _, err := tokenfile.Read(empty, "token file"); err == nil || !strings.Contains(err.Error(), "holds no token") {
		t.Errorf("a file of comments: %v, want a refusal", err)
	}
	if _, err := tokenfile.Read(filepath.Join(dir, "nope"), "HTTP token file"); err == nil || !strings.Contains(err.Error(), "cannot read the HTTP token file") {
		t.Errorf("a missing file: %v", err)
	}
}

// TestFileReload: a changed file is read again; a file emptied by mistake
// keeps the previous tokens.
func TestFileReload(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(p, []byte("one\n"), 0o600)
	f, err := tokenfile.Open(p, "token file")
	if err != nil {
		t.Fatal(err)
	}
	if changed, err := f.ReloadIfChanged(); changed || err != nil {
		t.Fatalf("unchanged file: changed %v, err %v", changed, err)
	}
	os.WriteFile(p, []byte("two\nthree\n"), 0o600)
	os.Chtimes(p, time.Now().Add(time.Minute), time.Now().Add(time.Minute))
	if changed, err := f.ReloadIfChanged(); !changed || err != nil {
		t.Fatalf("changed file: changed %v, err %v", changed, err)
	}
	if f.Has("one") || !f.Has("three") {
		t.Fatal("the reloaded file's tokens are not the ones in use")
	}
	os.WriteFile(p, nil, 0o600)
	if err := f.Reload(); err == nil {
		t.Fatal("an empty file reloaded without an error")
	}
	if !f.Has("two") {
		t.Fatal("a failed reload dropped the previous tokens")
	}
}
