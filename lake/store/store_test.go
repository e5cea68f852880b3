package store_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/lake/store"
)

const partSize = 5 << 20

func openFileStore(t *testing.T) store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), "file://"+t.TempDir(), store.Options{PartSize: partSize})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func openS3Store(t *testing.T, srv *testutil.S3Server) store.Store {
	t.Helper()
	srv.SetEnv(t)
	s, err := store.Open(context.Background(), srv.URL, store.Options{S3Endpoint: srv.Endpoint, PartSize: partSize})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestFileStore(t *testing.T) { conformance(t, openFileStore(t)) }

func TestS3Store(t *testing.T) {
	srv := testutil.StartS3(t)
	s := openS3Store(t, srv)
	conformance(t, s)
	t.Run("FailedMultipartLeavesNoUpload", func(t *testing.T) {
		ctx := context.Background()
		err := s.Put(ctx, "broken", &failingReader{n: 12 << 20}, 40<<20)
		if err == nil {
			t.Fatal("Put of a failing reader succeeded")
		}
		out, lerr := srv.Client().ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: &srv.Bucket})
		if lerr != nil {
			t.Fatal(lerr)
		}
		if len(out.Uploads) != 0 {
			t.Errorf("got %d multipart uploads left after a failed Put, want 0", len(out.Uploads))
		}
	})
}

func TestS3Errors(t *testing.T) {
	srv := testutil.StartS3(t)
	srv.SetEnv(t)
	ctx := context.Background()

	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret")
	bad, err := store.Open(ctx, srv.URL, store.Options{S3Endpoint: srv.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	err = bad.Put(ctx, "k", strings.NewReader("x"), 1)
	if !errors.Is(err, store.ErrAccessDenied) || !strings.Contains(err.Error(), "access denied by "+srv.Endpoint+": check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY") {
		t.Errorf("wrong secret: got %v, want an access-denied error naming the endpoint", err)
	}
	if _, err := bad.List(ctx, ""); !errors.Is(err, store.ErrAccessDenied) {
		t.Errorf("wrong secret, List: got %v, want ErrAccessDenied", err)
	}
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.Secret)

	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	nocreds, err := store.Open(ctx, srv.URL, store.Options{S3Endpoint: srv.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nocreds.Stat(ctx, "k"); !errors.Is(err, store.ErrNoCredentials) || !strings.Contains(err.Error(), "no S3 credentials found: set AWS_ACCESS_KEY_ID") {
		t.Errorf("no credentials: got %v, want ErrNoCredentials", err)
	}
	srv.SetEnv(t)

	nob, err := store.Open(ctx, "s3://no-such-bucket/x", store.Options{S3Endpoint: srv.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	err = nob.Put(ctx, "k", strings.NewReader("x"), 1)
	if !errors.Is(err, store.ErrNoBucket) || !strings.Contains(err.Error(), "bucket no-such-bucket does not exist") {
		t.Errorf("missing bucket: got %v, want ErrNoBucket", err)
	}

	s, err := store.Open(ctx, srv.URL, store.Options{S3Endpoint: srv.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "before-stop", strings.NewReader("x"), 1); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	start := time.Now()
	err = s.Put(ctx, "k", strings.NewReader("x"), 1)
	if !errors.Is(err, store.ErrUnreachable) || !strings.Contains(err.Error(), "cannot reach S3 endpoint "+srv.Endpoint) {
		t.Errorf("stopped server: got %v, want ErrUnreachable", err)
	}
	t.Logf("unreachable error after %v (SDK retries included)", time.Since(start).Round(time.Millisecond))
	srv.Start()
	if _, err := s.Stat(ctx, "before-stop"); err != nil {
		t.Errorf("after restart: %v", err)
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	for _, u := range []string{"", "gs://b/p", "s3://", "s3:///x"} {
		if _, err := store.Open(ctx, u, store.Options{}); err == nil {
			t.Errorf("Open(%q) succeeded, want an error", u)
		}
	}
	f := filepath.Join(t.TempDir(), "file")
	os.WriteFile(f, nil, 0o644)
	if _, err := store.Open(ctx, f, store.Options{}); err == nil {
		t.Errorf("Open of a regular file succeeded")
	}
	if _, err := store.Open(ctx, t.TempDir(), store.Options{PartSize: 1 << 20}); err == nil {
		t.Errorf("Open with a 1 MiB part size succeeded")
	}
	// A plain path and file://./rel both work.
	dir := t.TempDir()
	t.Chdir(dir)
	s, err := store.Open(ctx, "file://./lake", store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.String(), "file://"+filepath.Join(dir, "lake"); got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestFileStoreLayout(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := store.Open(ctx, dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "a/b.txt", strings.NewReader("hi"), 2); err != nil {
		t.Fatal(err)
	}
	p, ok := store.LocalPath(s, "a/b.txt")
	if !ok || p != filepath.Join(dir, "a", "b.txt") {
		t.Fatalf("LocalPath = %q, %v", p, ok)
	}
	if b, _ := os.ReadFile(p); string(b) != "hi" {
		t.Errorf("file holds %q", b)
	}
	// An unfinished Put (temporary file) is invisible.
	os.WriteFile(filepath.Join(dir, "a", ".tmp-123"), []byte("partial"), 0o644)
	objs, err := s.List(ctx, "")
	if err != nil || len(objs) != 1 || objs[0].Key != "a/b.txt" {
		t.Errorf("List = %v, %v; want only a/b.txt", objs, err)
	}
	if _, ok := store.LocalPath(s, "../x"); ok {
		t.Errorf("LocalPath accepted ../x")
	}
	// A wrapper that tells what it wraps is looked through.
	if wp, ok := store.LocalPath(wrapped{s}, "a/b.txt"); !ok || wp != p {
		t.Errorf("LocalPath of a wrapped store = %q, %v; want %q", wp, ok, p)
	}
	if _, ok := store.LocalPath(struct{ store.Store }{s}, "a/b.txt"); ok {
		t.Errorf("LocalPath saw through a store that does not unwrap")
	}
}

type wrapped struct{ store.Store }

func (w wrapped) Unwrap() store.Store { return w.Store }

// conformance checks the Store contract; every backend must pass it.
func conformance(t *testing.T, s store.Store) {
	ctx := context.Background()
	put := func(t *testing.T, key, val string) {
		t.Helper()
		if err := s.Put(ctx, key, strings.NewReader(val), int64(len(val))); err != nil {
			t.Fatalf("Put %s: %v", key, err)
		}
	}
	get := func(t *testing.T, key string) string {
		t.Helper()
		rc, err := s.Get(ctx, key)
		if err != nil {
			t.Fatalf("Get %s: %v", key, err)
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	t.Run("PutGetStatOverwrite", func(t *testing.T) {
		put(t, "p/a.txt", "hello")
		if got := get(t, "p/a.txt"); got != "hello" {
			t.Errorf("Get = %q, want hello", got)
		}
		o, err := s.Stat(ctx, "p/a.txt")
		if err != nil || o.Size != 5 || o.Key != "p/a.txt" || o.ModTime.IsZero() {
			t.Errorf("Stat = %+v, %v", o, err)
		}
		put(t, "p/a.txt", "world!")
		if got := get(t, "p/a.txt"); got != "world!" {
			t.Errorf("after overwrite Get = %q, want world!", got)
		}
		if o, _ := s.Stat(ctx, "p/a.txt"); o.Size != 6 {
			t.Errorf("after overwrite Size = %d, want 6", o.Size)
		}
		put(t, "p/empty", "")
		if got := get(t, "p/empty"); got != "" {
			t.Errorf("empty object reads %q", got)
		}
	})
	t.Run("Missing", func(t *testing.T) {
		if _, err := s.Get(ctx, "nope/x"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Get missing: %v, want ErrNotFound", err)
		}
		if _, err := s.Stat(ctx, "nope/x"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Stat missing: %v, want ErrNotFound", err)
		}
		if err := s.Delete(ctx, "nope/x"); err != nil {
			t.Errorf("Delete missing: %v, want nil", err)
		}
	})
	t.Run("BadKeys", func(t *testing.T) {
		for _, k := range []string{"", "/abs", "../up", "a/../../b", "a//b", "a/./b", "a/", ".tmp-x", "d/.tmp-y"} {
			if err := s.Put(ctx, k, strings.NewReader("x"), 1); err == nil {
				t.Errorf("Put(%q) succeeded, want an error", k)
			}
			if _, err := s.Get(ctx, k); err == nil || errors.Is(err, store.ErrNotFound) {
				t.Errorf("Get(%q) = %v, want a key error", k, err)
			}
		}
	})
	t.Run("List", func(t *testing.T) {
		for _, k := range []string{"l/x/1", "l/x/2", "l/x-y", "l/xa/3", "l/y/1", "l/x/sub/4"} {
			put(t, k, k)
		}
		cases := map[string][]string{
			"l/x/":  {"l/x/1", "l/x/2", "l/x/sub/4"},
			"l/x":   {"l/x-y", "l/x/1", "l/x/2", "l/x/sub/4", "l/xa/3"},
			"l/":    {"l/x-y", "l/x/1", "l/x/2", "l/x/sub/4", "l/xa/3", "l/y/1"},
			"l/zzz": nil,
			"none/": nil,
		}
		for prefix, want := range cases {
			objs, err := s.List(ctx, prefix)
			if err != nil {
				t.Fatalf("List(%q): %v", prefix, err)
			}
			var got []string
			for _, o := range objs {
				got = append(got, o.Key)
				if o.Size != int64(len(o.Key)) {
					t.Errorf("List(%q): %s has size %d, want %d", prefix, o.Key, o.Size, len(o.Key))
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("List(%q) = %v, want %v", prefix, got, want)
			}
		}
		all, err := s.List(ctx, "")
		if err != nil || len(all) < 6 {
			t.Errorf("List(\"\") = %d objects, %v", len(all), err)
		}
	})
	t.Run("Delete", func(t *testing.T) {
		put(t, "d/gone", "x")
		if err := s.Delete(ctx, "d/gone"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Stat(ctx, "d/gone"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Stat after Delete: %v, want ErrNotFound", err)
		}
	})
	t.Run("UnknownSize", func(t *testing.T) {
		r := io.MultiReader(strings.NewReader("abc"), strings.NewReader("def"))
		if err := s.Put(ctx, "u/x", r, -1); err != nil {
			t.Fatal(err)
		}
		if got := get(t, "u/x"); got != "abcdef" {
			t.Errorf("Get = %q", got)
		}
	})
	t.Run("WrongSizeStoresNothing", func(t *testing.T) {
		for name, r := range map[string]io.Reader{
			"seekable":   strings.NewReader("short"),
			"sequential": io.MultiReader(strings.NewReader("short")),
		} {
			if err := s.Put(ctx, "w/"+name, r, 10); err == nil {
				t.Errorf("%s: Put of 5 bytes announced as 10 succeeded", name)
			}
			if _, err := s.Stat(ctx, "w/"+name); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("%s: after a failed Put, Stat = %v, want ErrNotFound", name, err)
			}
		}
		if err := s.Put(ctx, "w/long", io.MultiReader(strings.NewReader("too long")), 3); err == nil {
			t.Errorf("Put of 8 bytes announced as 3 succeeded")
		}
	})
	t.Run("Multipart40MiB", func(t *testing.T) {
		data := make([]byte, 40<<20)
		rng := rand.New(rand.NewPCG(1, 2))
		for i := 0; i < len(data); i += 8 {
			v := rng.Uint64()
			for j := 0; j < 8; j++ {
				data[i+j] = byte(v >> (8 * j))
			}
		}
		want := sha256.Sum256(data)
		for name, mk := range map[string]func() (io.Reader, int64){
			"known":   func() (io.Reader, int64) { return bytes.NewReader(data), int64(len(data)) },
			"stream":  func() (io.Reader, int64) { return io.MultiReader(bytes.NewReader(data)), int64(len(data)) },
			"unknown": func() (io.Reader, int64) { return io.MultiReader(bytes.NewReader(data)), -1 },
		} {
			r, size := mk()
			start := time.Now()
			if err := s.Put(ctx, "big/"+name, r, size); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			el := time.Since(start)
			rc, err := s.Get(ctx, "big/"+name)
			if err != nil {
				t.Fatal(err)
			}
			h := sha256.New()
			n, err := io.Copy(h, rc)
			rc.Close()
			if err != nil || n != int64(len(data)) || !bytes.Equal(h.Sum(nil), want[:]) {
				t.Errorf("%s: read back %d bytes (err %v), checksum match %v", name, n, err, bytes.Equal(h.Sum(nil), want[:]))
			}
			t.Logf("%s: put 40 MiB in %v (%.0f MiB/s)", name, el.Round(time.Millisecond), 40/el.Seconds())
		}
	})
	t.Run("FailedPutLeavesNothing", func(t *testing.T) {
		put(t, "f/keep", "old")
		err := s.Put(ctx, "f/keep", &failingReader{n: 12 << 20}, 40<<20)
		if err == nil {
			t.Fatal("Put of a failing reader succeeded")
		}
		if got := get(t, "f/keep"); got != "old" {
			t.Errorf("after a failed overwrite Get = %q, want old", got)
		}
		if err := s.Put(ctx, "f/new", &failingReader{n: 1 << 20}, -1); err == nil {
			t.Fatal("Put of a failing reader (unknown size) succeeded")
		}
		if _, err := s.Stat(ctx, "f/new"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("after a failed Put, Stat = %v, want ErrNotFound", err)
		}
	})
	t.Run("Canceled", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := s.Put(cctx, "c/x", strings.NewReader("x"), 1); !errors.Is(err, context.Canceled) {
			t.Errorf("Put with a canceled context: %v", err)
		}
	})
	t.Run("Cache", func(t *testing.T) { testCache(t, s) })
}

// failingReader yields n bytes and then an error.
type failingReader struct{ n int }

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errors.New("disk on fire")
	}
	k := min(len(p), f.n)
	clear(p[:k])
	f.n -= k
	return k, nil
}

func testCache(t *testing.T, s store.Store) {
	ctx := context.Background()
	_, local := store.LocalPath(s, "x")
	dir := t.TempDir()
	c := store.NewCache(s, dir, 3<<20)
	obj := func(key string, n int, fill byte) {
		t.Helper()
		if err := s.Put(ctx, key, bytes.NewReader(bytes.Repeat([]byte{fill}, n)), int64(n)); err != nil {
			t.Fatal(err)
		}
	}
	check := func(p string, n int, fill byte) {
		t.Helper()
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != n || (n > 0 && b[0] != fill) {
			t.Errorf("%s holds %d bytes starting %v, want %d of %d", p, len(b), b[:min(1, len(b))], n, fill)
		}
	}
	obj("cache/a.parquet", 1<<20+1, 'a')
	if _, err := c.Path(ctx, "cache/missing"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Path of a missing key: %v, want ErrNotFound", err)
	}

	// Concurrent requests for one key download it once.
	var wg sync.WaitGroup
	paths := make([]string, 8)
	errs := make([]error, 8)
	for i := range paths {
		wg.Go(func() { paths[i], errs[i] = c.Path(ctx, "cache/a.parquet") })
	}
	wg.Wait()
	for i := range paths {
		if errs[i] != nil || paths[i] != paths[0] {
			t.Fatalf("Path #%d = %q, %v; want %q", i, paths[i], errs[i], paths[0])
		}
	}
	check(paths[0], 1<<20+1, 'a')
	if !strings.HasSuffix(paths[0], ".parquet") {
		t.Errorf("cached file %s lost the extension", paths[0])
	}
	if local {
		if lp, _ := store.LocalPath(s, "cache/a.parquet"); paths[0] != lp {
			t.Errorf("file store: Path = %s, want the object's own file %s", paths[0], lp)
		}
		if st := c.Stats(); st.Downloads != 0 {
			t.Errorf("file store: %d downloads, want 0", st.Downloads)
		}
		return
	}
	if st := c.Stats(); st.Downloads != 1 {
		t.Errorf("8 concurrent Paths: stats %+v, want 1 download", st)
	}
	// A changed object (other size) is downloaded again.
	obj("cache/a.parquet", 1<<20+7, 'b')
	p, err := c.Path(ctx, "cache/a.parquet")
	if err != nil {
		t.Fatal(err)
	}
	check(p, 1<<20+7, 'b')
	// Above 3 MiB the least recently used copy goes.
	obj("cache/b.parquet", 1<<20, 'c')
	obj("cache/c.parquet", 1<<20, 'd')
	pb, _ := c.Path(ctx, "cache/b.parquet")
	time.Sleep(10 * time.Millisecond)
	if _, err := c.Path(ctx, "cache/c.parquet"); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Bytes > 3<<20 || st.Evictions != 1 {
		t.Errorf("after 3 objects over 3 MiB: stats %+v, want ≤ 3 MiB held and 1 eviction", st)
	}
	if _, err := os.Stat(p); err == nil {
		t.Errorf("least recently used copy %s was not evicted", p)
	}
	check(pb, 1<<20, 'c')
	// A new Cache on the same directory reuses the copies.
	c2 := store.NewCache(s, dir, 3<<20)
	if _, err := c2.Path(ctx, "cache/b.parquet"); err != nil {
		t.Fatal(err)
	}
	if st := c2.Stats(); st.Hits != 1 || st.Downloads != 0 {
		t.Errorf("second cache: stats %+v, want 1 hit", st)
	}
}
