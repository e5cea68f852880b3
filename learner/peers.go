package learner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Chunks from peers. A Subscriber with a ChunkSource (SubscriberConfig.Peers)
// takes the chunks of a format 2 version that are not on the node from the
// source first (the agents of a pool serve the chunks they hold to each
// other), and from the topic only those the source did not deliver. Every
// chunk the source hands over is checked against the signed manifest's
// xxh3-128 before it is written, so a version assembled from peers is
// byte-identical to the published one or refused like any other.
//
// Such a subscriber does not follow the topic's stream, which would bring
// every chunk from the brokers to every node: it watches the log end
// offset instead and reads the newest manifest once the end stops moving
// (a publish writes its chunks and then its manifest in one burst, so a
// still end means it is over, or stalled). A version is then noticed up to
// about two PollIntervals after its manifest is written.

// ErrBadChunk is returned by a ChunkSource's put for bytes that do not
// match the manifest's chunk: a wrong size or hash.
var ErrBadChunk = errors.New("chunk does not match its manifest")

// ChunkSource supplies chunks of format 2 versions from elsewhere than the
// brokers.
type ChunkSource interface {
	// FetchChunks tries to obtain the chunks of m whose indexes (into
	// m.ChunkList) are in want, and hands each to put, which may be
	// called from several goroutines at once. put returns an error
	// wrapping ErrBadChunk for bytes that do not match the chunk (the
	// source should try elsewhere and hold it against whoever served
	// them), or another error if the chunk could not be written.
	// FetchChunks returns when it has nothing more to offer; the chunks
	// it did not deliver are read from the topic; it must not call put
	// after it returned. It returns an error only when ctx ended.
	FetchChunks(ctx context.Context, m Manifest, want []int, put func(i int, b []byte) error) error
}

// Check reports whether b are the bytes of chunk c.
func (c ChunkRef) Check(b []byte) bool {
	return len(b) == c.Size && chunkHash(b) == c.Hash
}

// defaultPollInterval is how often a subscriber with peers lists the log
// end offset: a version is noticed within about two intervals, and a
// thousand nodes cost the brokers 4,000 ListOffsets a second.
const defaultPollInterval = 250 * time.Millisecond

// watch is follow for a subscriber with peers: it installs new versions as
// their manifests appear, reading no chunk records from the stream. pos is
// where catchUp left off.
func (s *Subscriber) watch(ctx context.Context, cl *kgo.Client, pos int64) error {
	last, checked := pos, true
	t := time.NewTicker(s.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		_, end, exists, err := logRange(ctx, cl, s.topic)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			return err
		case !exists:
			return fmt.Errorf("cannot follow %s: the topic is gone", s.topic)
		case end != last:
			last, checked = end, false
		case !checked:
			checked = true
			if _, _, err := s.catchUp(ctx, cl); err != nil {
				return err
			}
		}
	}
}

// fromPeers asks the ChunkSource for the chunks of missing (record offset
// -> indexes of the chunks it holds), writes those it delivers into f and
// returns what is still missing.
func (s *Subscriber) fromPeers(ctx context.Context, m Manifest, missing map[int64][]int, f *os.File, positions []int64) (map[int64][]int, error) {
	var want []int
	for _, is := range missing {
		want = append(want, is...)
	}
	slices.Sort(want)
	var mu sync.Mutex
	got := make(map[int]bool, len(want))
	put := func(i int, b []byte) error {
		c := m.ChunkList[i]
		if !c.Check(b) {
			return fmt.Errorf("%w: %d bytes for chunk %d of version %d (%d bytes, xxh3 %s)", ErrBadChunk, len(b), i, m.Version, c.Size, c.Hash)
		}
		if _, err := f.WriteAt(b, positions[i]); err != nil {
			return fmt.Errorf("cannot write chunk %d: %w", i, err)
		}
		s.wrote(m, i, f, positions[i])
		mu.Lock()
		got[i] = true
		mu.Unlock()
		return nil
	}
	if err := s.cfg.Peers.FetchChunks(ctx, m, want, put); err != nil {
		return nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	rest := map[int64][]int{}
	for off, is := range missing {
		for _, i := range is {
			if !got[i] {
				rest[off] = append(rest[off], i)
			}
		}
	}
	return rest, nil
}

// wrote tells OnChunk that chunk i of m is in f at pos.
func (s *Subscriber) wrote(m Manifest, i int, f *os.File, pos int64) {
	if s.cfg.OnChunk != nil {
		s.cfg.OnChunk(m, i, f.Name(), pos)
	}
}
