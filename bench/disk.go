package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// DiskConfig configures MeasureDisk. Zero values take the defaults noted.
type DiskConfig struct {
	// Dir is where the test files are written (and removed afterwards).
	// Required: measure the directory the broker will use.
	Dir string
	// SeqBytes is how much the sequential test writes at most. Default
	// 512 MiB.
	SeqBytes int64
	// SeqTime bounds the sequential test by time, so that a slow or busy
	// disk does not hold the run up. Default 5 s.
	SeqTime time.Duration
	// BlockSize is the sequential test's write size; every block is
	// followed by fdatasync, as dd's oflag=dsync does. Default 1 MiB.
	BlockSize int
	// SustainTime, if set, adds a test that writes BlockSize blocks with
	// fdatasync for this long and reports the rate of its last seconds.
	// Virtual disks often take a burst (the host's cache) far faster than
	// they sustain; the 512 MiB sequential test sees only the burst.
	// Default 0: no such test.
	SustainTime time.Duration
	// AppendSize is the append test's write size. Default 4 KiB.
	AppendSize int
	// Appends bounds the append test by count. Default 5,000.
	Appends int
	// AppendTime bounds the append test by time. Default 3 s.
	AppendTime time.Duration
}

func (c DiskConfig) withDefaults() DiskConfig {
	c.SeqBytes = cmp.Or(c.SeqBytes, 512<<20)
	c.SeqTime = cmp.Or(c.SeqTime, 5*time.Second)
	c.BlockSize = cmp.Or(c.BlockSize, 1<<20)
	c.AppendSize = cmp.Or(c.AppendSize, 4<<10)
	c.Appends = cmp.Or(c.Appends, 5000)
	c.AppendTime = cmp.Or(c.AppendTime, 3*time.Second)
	return c
}

// Validate reports the first setting that cannot work, after defaults.
func (c DiskConfig) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Dir == "":
		return errors.New("a directory is required")
	case c.SeqBytes < 0 || c.SeqTime < 0 || c.SustainTime < 0 || c.BlockSize < 1 || c.AppendSize < 1 || c.Appends < 0 || c.AppendTime < 0:
		return errors.New("sizes, counts and times must be positive")
	case c.SeqBytes < int64(c.BlockSize):
		return fmt.Errorf("sequential bytes %d are less than one block of %d", c.SeqBytes, c.BlockSize)
	}
	return nil
}

// DiskResult is what MeasureDisk found. MB is 10^6 bytes.
type DiskResult struct {
	Kind       string  `json:"kind"` // "disk"
	Dir        string  `json:"dir"`
	SeqBytes   int64   `json:"seq_bytes"` // written, SeqTime may have cut it short
	BlockSize  int     `json:"block_size"`
	SeqElapsed float64 `json:"seq_elapsed_s"`
	SeqMBPerS  float64 `json:"seq_mb_per_s"` // sequential write, fdatasync after every block
	// The sustained test, if run: MB/s of each second, and the mean of
	// its last (up to three) whole seconds.
	SustainSeries []float64      `json:"sustain_mb_per_s_series,omitempty"`
	SustainMBPerS float64        `json:"sustain_mb_per_s,omitempty"`
	SustainBytes  int64          `json:"sustain_bytes,omitempty"`
	AppendSize    int            `json:"append_size"`
	Appends       int            `json:"appends"`
	AppendsPS     float64        `json:"appends_per_s"` // small appends, each followed by fdatasync
	AppendLat     LatencySummary `json:"append_latency"`
}

// MeasureDisk measures what the disk under Dir can make durable: the
// bandwidth of sequential writes of BlockSize bytes each followed by
// fdatasync (a broker's best case for acks=all), and the rate of small
// appends each followed by fdatasync (its worst case, one record per
// commit). Both write new files, so the file size changes with every
// write, as a log's does.
func MeasureDisk(ctx context.Context, cfg DiskConfig) (*DiskResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid disk configuration: %w", err)
	}
	cfg = cfg.withDefaults()
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("cannot create %q: %w", cfg.Dir, err)
	}
	res := &DiskResult{Kind: "disk", Dir: cfg.Dir, SeqBytes: cfg.SeqBytes, BlockSize: cfg.BlockSize, AppendSize: cfg.AppendSize}

	block := make([]byte, cfg.BlockSize)
	for i := range block {
		block[i] = byte(i*7 + i>>8) // not zeros, in case the device dedups or compresses
	}
	blocks := NewLatency()
	elapsed, err := syncedWrites(ctx, cfg.Dir, "seq", block, int(cfg.SeqBytes/int64(cfg.BlockSize)), cfg.SeqTime, blocks)
	if err != nil {
		return nil, err
	}
	res.SeqBytes = blocks.Summary().Count * int64(cfg.BlockSize)
	res.SeqElapsed = elapsed.Seconds()
	res.SeqMBPerS = float64(res.SeqBytes) / elapsed.Seconds() / 1e6

	if cfg.SustainTime > 0 {
		if err := sustainedWrites(ctx, cfg.Dir, block, cfg.SustainTime, res); err != nil {
			return nil, err
		}
	}

	lat := NewLatency()
	elapsed, err = syncedWrites(ctx, cfg.Dir, "append", block[:cfg.AppendSize], cfg.Appends, cfg.AppendTime, lat)
	if err != nil {
		return nil, err
	}
	res.AppendLat = lat.Summary()
	res.Appends = int(res.AppendLat.Count)
	res.AppendsPS = float64(res.Appends) / elapsed.Seconds()
	return res, nil
}

// syncedWrites appends buf to a new file in dir n times (or until limit,
// if set), with fdatasync after each, recording each write+sync in lat.
// It removes the file and returns the time taken.
func syncedWrites(ctx context.Context, dir, name string, buf []byte, n int, limit time.Duration, lat *Latency) (time.Duration, error) {
	f, err := os.CreateTemp(dir, "simtel-bench-disk-"+name+"-*")
	if err != nil {
		return 0, fmt.Errorf("cannot create test file in %q: %w", dir, err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	fd := int(f.Fd())
	start := time.Now()
	for i := 0; i < n; i++ {
		if i%64 == 0 && ctx.Err() != nil {
			return 0, ctx.Err()
		}
		t := time.Now()
		if limit > 0 && t.Sub(start) >= limit {
			break
		}
		if _, err := f.Write(buf); err != nil {
			return 0, fmt.Errorf("cannot write %s: %w", f.Name(), err)
		}
		if err := unix.Fdatasync(fd); err != nil {
			return 0, fmt.Errorf("cannot fdatasync %s: %w", f.Name(), err)
		}
		lat.Record(time.Since(t))
	}
	return time.Since(start), nil
}

// sustainedWrites writes block after block to a new file in dir, each
// followed by fdatasync, for d, and fills res's sustained figures from the
// bytes completed in each whole second.
func sustainedWrites(ctx context.Context, dir string, block []byte, d time.Duration, res *DiskResult) error {
	f, err := os.CreateTemp(dir, "simtel-bench-disk-sustain-*")
	if err != nil {
		return fmt.Errorf("cannot create test file in %q: %w", dir, err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	fd := int(f.Fd())
	start := time.Now()
	var perSecond []int64
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		since := time.Since(start)
		if since >= d {
			break
		}
		if _, err := f.Write(block); err != nil {
			return fmt.Errorf("cannot write %s: %w", f.Name(), err)
		}
		if err := unix.Fdatasync(fd); err != nil {
			return fmt.Errorf("cannot fdatasync %s: %w", f.Name(), err)
		}
		sec := int(time.Since(start) / time.Second)
		for len(perSecond) <= sec {
			perSecond = append(perSecond, 0)
		}
		perSecond[sec] += int64(len(block))
		res.SustainBytes += int64(len(block))
	}
	whole := min(len(perSecond), int(d/time.Second)) // the last bucket may be partial
	for _, b := range perSecond[:whole] {
		res.SustainSeries = append(res.SustainSeries, float64(b)/1e6)
	}
	tail := res.SustainSeries[max(0, len(res.SustainSeries)-3):]
	for _, v := range tail {
		res.SustainMBPerS += v / float64(len(tail))
	}
	return nil
}
