package spool

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"
)

// Policy says what Append does when the spool holds MaxBytes.
type Policy int

const (
	// Block makes Append wait (until its context ends) for the reader to
	// acknowledge enough records that whole segments can be deleted. It is
	// the default: the agent passes the backpressure on to its senders.
	Block Policy = iota
	// DropOldest makes Append delete the oldest segment, acknowledged or
	// not, to make room; it never waits. Unacknowledged records deleted
	// this way are counted in Stats.Dropped.
	DropOldest
)

func (p Policy) String() string {
	switch p {
	case Block:
		return "block"
	case DropOldest:
		return "drop-oldest"
	}
	return fmt.Sprintf("Policy(%d)", int(p))
}

// NoSync as Config.SyncInterval turns background fdatasync off.
const NoSync time.Duration = -1

// Defaults and limits of Config.
const (
	DefaultMaxBytes           int64 = 1 << 30
	DefaultSegmentBytes       int64 = 16 << 20
	DefaultSyncInterval             = time.Second
	DefaultCheckpointInterval       = time.Second

	// MinSegmentBytes and MaxSegmentBytes bound Config.SegmentBytes. The
	// upper bound keeps every frame length within 32 bits.
	MinSegmentBytes int64 = 1 << 10
	MaxSegmentBytes int64 = 1 << 30
)

// Config configures a Spool. The zero value of every field but Dir means
// its default.
type Config struct {
	// Dir is the spool directory; it is created if missing. One process
	// at a time may open it (an exclusive flock on Dir/LOCK).
	Dir string

	// MaxBytes bounds the bytes of all segment files (headers included).
	// Default 1 GiB; it must be at least 2*SegmentBytes, so the head
	// segment and one sealed segment always fit.
	MaxBytes int64

	// SegmentBytes bounds a segment file: the head is sealed and a new one
	// started when the next write would make it larger. It also bounds
	// one record: 20 bytes of framing plus key and value must fit into an
	// empty segment (SegmentBytes minus its 24-byte header). Larger Append
	// calls are written in several chunks. Default 16 MiB, between
	// MinSegmentBytes and MaxSegmentBytes.
	SegmentBytes int64

	// Policy says what Append does when MaxBytes is reached. Default Block.
	Policy Policy

	// SyncInterval is the period of the flusher's ticks. A tick
	// fdatasyncs the segments holding records that were appended before
	// the previous tick and are still not acknowledged; records the
	// broker acknowledged are never synced (they need not survive a power
	// loss here). Default 1 s; NoSync (any negative value) never syncs,
	// leaving durability to the kernel's writeback. Appended records
	// survive a crash of the agent process (even SIGKILL) as soon as
	// Append returns, whatever this value: they are in the page cache. A
	// power loss or kernel crash can lose unacknowledged records appended
	// in the last two SyncIntervals.
	SyncInterval time.Duration

	// CheckpointInterval is how often the ack cursor is written, if it
	// moved: one pwrite in place, which survives a crash of the process
	// at once and a power loss once a tick syncs it (a tick that syncs
	// records, or every tenth). Default 1 s. After a crash, records
	// acknowledged after the
	// last checkpoint are delivered again (unless their whole segment had
	// already been deleted).
	CheckpointInterval time.Duration

	// Logger receives warnings about recovery and I/O errors. Default:
	// discard.
	Logger *slog.Logger

	// hooks replace file operations in tests (fault injection).
	hooks *hooks
}

// hooks are the file operations the spool performs on the write path, so
// tests can inject failures such as ENOSPC.
type hooks struct {
	writeAt func(f *os.File, b []byte, off int64) (int, error)
	create  func(path string) (*os.File, error)
}

func defaultWriteAt(f *os.File, b []byte, off int64) (int, error) { return f.WriteAt(b, off) }

func defaultCreate(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	c.MaxBytes = cmp.Or(c.MaxBytes, DefaultMaxBytes)
	c.SegmentBytes = cmp.Or(c.SegmentBytes, DefaultSegmentBytes)
	c.SyncInterval = cmp.Or(c.SyncInterval, DefaultSyncInterval)
	c.CheckpointInterval = cmp.Or(c.CheckpointInterval, DefaultCheckpointInterval)
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	h := hooks{writeAt: defaultWriteAt, create: defaultCreate}
	if c.hooks != nil {
		if c.hooks.writeAt != nil {
			h.writeAt = c.hooks.writeAt
		}
		if c.hooks.create != nil {
			h.create = c.hooks.create
		}
	}
	c.hooks = &h
	return c
}

// Validate reports the first invalid field of c, after defaults are
// applied to zero fields.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Dir == "":
		return errors.New("spool: Dir is empty")
	case c.SegmentBytes < MinSegmentBytes || c.SegmentBytes > MaxSegmentBytes:
		return fmt.Errorf("spool: SegmentBytes %d outside [%d, %d]", c.SegmentBytes, MinSegmentBytes, MaxSegmentBytes)
	case c.MaxBytes < 2*c.SegmentBytes:
		return fmt.Errorf("spool: MaxBytes %d below 2*SegmentBytes (%d)", c.MaxBytes, 2*c.SegmentBytes)
	case c.Policy != Block && c.Policy != DropOldest:
		return fmt.Errorf("spool: unknown policy %d", int(c.Policy))
	case c.CheckpointInterval < 0:
		return fmt.Errorf("spool: negative CheckpointInterval %v", c.CheckpointInterval)
	}
	return nil
}
