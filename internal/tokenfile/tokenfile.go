// Package tokenfile reads files of bearer tokens, one a line, and checks
// a presented token against them in constant time. The agent's HTTP
// listener (--http-token-file) and lake serve's Iceberg REST catalog
// (--token-file) take such files.
//
// Blank lines and lines starting with # are skipped; a file without a
// token is an error, since it would leave a listener open while the
// operator believes it closed. Only the SHA-256 of each token is kept.
package tokenfile

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
)

// Set is the SHA-256 of each token of a file.
type Set [][sha256.Size]byte

// Read reads the tokens of file; what names the file in errors, e.g.
// "HTTP token file".
func Read(file, what string) (Set, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("cannot read the %s: %w", what, err)
	}
	var out Set
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		t := bytes.TrimSpace(sc.Bytes())
		if len(t) == 0 || t[0] == '#' {
			continue
		}
		out = append(out, sha256.Sum256(t))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("cannot read the %s %s: %w", what, file, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the %s %s holds no token (one a line)", what, file)
	}
	return out, nil
}

// Has reports whether t is one of the tokens. Every token is compared,
// in constant time over hashes of equal length, so neither the position
// of a match nor a token's length shows in the time taken.
func (s Set) Has(t string) bool {
	sum := sha256.Sum256([]byte(t))
	match := 0
	for i := range s {
		match |= subtle.ConstantTimeCompare(sum[:], s[i][:])
	}
	return match == 1
}

// File is a token file kept in memory and read again when it changes.
// It is safe for concurrent use.
type File struct {
	path, what string
	set        atomic.Pointer[Set]

	mu    sync.Mutex
	stamp string // the file's size and mtime at the last read
}

// Open reads a token file; what names it in errors.
func Open(path, what string) (*File, error) {
	f := &File{path: path, what: what, stamp: Stamp(path)}
	s, err := Read(path, what)
	if err != nil {
		return nil, err
	}
	f.set.Store(&s)
	return f, nil
}

// Has reports whether t is one of the file's tokens.
func (f *File) Has(t string) bool { return f.set.Load().Has(t) }

// Reload reads the file again, changed or not (SIGHUP). On an error the
// previous tokens stay in use.
func (f *File) Reload() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stamp = Stamp(f.path)
	return f.loadLocked()
}

// ReloadIfChanged reads the file again if its size or modification time
// changed since the last read. On an error the previous tokens stay.
func (f *File) ReloadIfChanged() (changed bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := Stamp(f.path)
	if st == f.stamp {
		return false, nil
	}
	f.stamp = st
	return true, f.loadLocked()
}

func (f *File) loadLocked() error {
	s, err := Read(f.path, f.what)
	if err != nil {
		return err
	}
	f.set.Store(&s)
	return nil
}

// Stamp sums up a file's identity (size and modification time); a file
// that cannot be read stamps as missing.
func Stamp(path string) string {
	st, err := os.Stat(path)
	if err != nil {
		return "missing"
	}
	return fmt.Sprintf("%d:%d", st.Size(), st.ModTime().UnixNano())
}
