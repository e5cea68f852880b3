package cluster

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"
)

// boltStore is the controller's raft log and stable store in one bbolt
// file. Log entries are keyed by their big-endian index so the bucket's
// order is the log's order; values are JSON (metadata entries are small
// and rare, so readability beats compactness here). Every write is one
// bbolt transaction, which bbolt fsyncs before Commit returns.
type boltStore struct {
	db *bolt.DB
}

var (
	bucketLogs   = []byte("logs")
	bucketStable = []byte("stable")

	// errKeyNotFound is what raft expects from Get/GetUint64 for a key
	// never set (it compares the message, not the value).
	errKeyNotFound = errors.New("not found")
)

var (
	_ raft.LogStore    = (*boltStore)(nil)
	_ raft.StableStore = (*boltStore)(nil)
)

func openBoltStore(path string) (*boltStore, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("cannot open raft store %s (is another broker using this --data-dir?): %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(bucketLogs); err != nil {
			return err
		}
		_, err := tx.CreateBucketIfNotExists(bucketStable)
		return err
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("cannot initialise raft store %s: %w", path, err)
	}
	return &boltStore{db: db}, nil
}

func (s *boltStore) Close() error { return s.db.Close() }

func indexKey(i uint64) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], i)
	return k[:]
}

func (s *boltStore) FirstIndex() (uint64, error) { return s.endIndex((*bolt.Cursor).First) }

func (s *boltStore) LastIndex() (uint64, error) { return s.endIndex((*bolt.Cursor).Last) }

// endIndex is the index of the log entry a cursor move (First or Last)
// finds, 0 in an empty log.
func (s *boltStore) endIndex(move func(*bolt.Cursor) ([]byte, []byte)) (uint64, error) {
	var idx uint64
	err := s.db.View(func(tx *bolt.Tx) error {
		if k, _ := move(tx.Bucket(bucketLogs).Cursor()); k != nil {
			idx = binary.BigEndian.Uint64(k)
		}
		return nil
	})
	return idx, err
}

func (s *boltStore) GetLog(index uint64, out *raft.Log) error {
	return s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketLogs).Get(indexKey(index))
		if v == nil {
			return raft.ErrLogNotFound
		}
		if err := json.Unmarshal(v, out); err != nil {
			return fmt.Errorf("raft log entry %d is corrupt: %w", index, err)
		}
		return nil
	})
}

func (s *boltStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

func (s *boltStore) StoreLogs(logs []*raft.Log) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketLogs)
		for _, l := range logs {
			v, err := json.Marshal(l)
			if err != nil {
				return err
			}
			if err := b.Put(indexKey(l.Index), v); err != nil {
				return fmt.Errorf("cannot store raft log entry %d: %w", l.Index, err)
			}
		}
		return nil
	})
}

func (s *boltStore) DeleteRange(lo, hi uint64) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		// Collect first: deleting under a cursor can make it skip keys.
		b := tx.Bucket(bucketLogs)
		var keys [][]byte
		c := b.Cursor()
		for k, _ := c.Seek(indexKey(lo)); k != nil && binary.BigEndian.Uint64(k) <= hi; k, _ = c.Next() {
			keys = append(keys, append([]byte(nil), k...))
		}
		for _, k := range keys {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}

func (s *boltStore) Set(key, val []byte) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketStable).Put(key, val)
	})
}

func (s *boltStore) Get(key []byte) ([]byte, error) {
	var out []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketStable).Get(key)
		if v == nil {
			return errKeyNotFound
		}
		out = append([]byte(nil), v...)
		return nil
	})
	return out, err
}

func (s *boltStore) SetUint64(key []byte, val uint64) error { return s.Set(key, indexKey(val)) }

func (s *boltStore) GetUint64(key []byte) (uint64, error) {
	v, err := s.Get(key)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("stable value %q has %d bytes, want 8", key, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}
