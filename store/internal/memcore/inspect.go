package memcore

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"strings"

	"github.com/dedup-go/dedup/store"
)

// Get returns the record of key, in whatever state, with a copy of its
// step records, or an error matching store.ErrNotFound. Unlike Peek, it
// does not count as a use of the record.
func (s *Store) Get(ctx context.Context, key string) (store.Record, error) {
	if err := ctx.Err(); err != nil {
		return store.Record{}, fmt.Errorf("memstore: get %q: %w", key, err)
	}
	now := s.clock.Now()
	sh, k := s.locate(key)
	sh.mu.Lock()
	rec, ok := sh.get(key, &k, s.at(now))
	// A key's step slice is never modified: it is copied after the lock.
	steps := sh.steps[key]
	sh.mu.Unlock()
	if !ok {
		return store.Record{}, fmt.Errorf("memstore: get %q: %w", key, store.ErrNotFound)
	}
	rec.Steps = stepRecords(steps)
	return rec, nil
}

// get returns the record of key, located as k, unless it is absent or
// expired by at (Store.at). Under s.mu.
func (s *shard) get(key string, k *lkey, at int64) (store.Record, bool) {
	if c, ok := s.claims[key]; ok {
		return c.record(key), true
	}
	if i := s.settled.find(k); i != 0 {
		if e := s.settled.at(i); !e.expired(at) {
			return e.record(s.store.epoch), true
		}
	}
	return store.Record{}, false
}

// Delete forgets key, whatever its state, and its step records: a
// duplicate arriving later is processed again, and the holder of a
// deleted claim gets ErrLeaseLost.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: delete %q: %w", key, err)
	}
	sh, k := s.locate(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.claims[key]; ok {
		sh.dropClaim(key)
	}
	if i := sh.settled.find(&k); i != 0 {
		sh.remove(i)
	}
	sh.forgetSteps(key)
	return nil
}

// DeleteIf removes the record of req.Key when req allows its state, read
// and removed under the key's shard lock. It returns whether it removed
// it (with its step records) and the record it found, step records
// included; an absent key, or an expired completed or failed record, is an
// error matching store.ErrNotFound.
func (s *Store) DeleteIf(ctx context.Context, req store.DeleteRequest) (bool, store.Record, error) {
	if err := ctx.Err(); err != nil {
		return false, store.Record{}, fmt.Errorf("memstore: delete %q: %w", req.Key, err)
	}
	if req.Key == "" {
		return false, store.Record{}, errEmptyKey("delete")
	}
	now := s.clock.Now()
	sh, k := s.locate(req.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if c, ok := sh.claims[req.Key]; ok {
		rec := c.record(req.Key)
		rec.Steps = stepRecords(sh.steps[req.Key])
		if !req.Allows(rec, now) {
			return false, rec, nil
		}
		sh.dropClaim(req.Key)
		sh.forgetSteps(req.Key)
		return true, rec, nil
	}
	if i := sh.settled.find(&k); i != 0 {
		if e := sh.settled.at(i); !e.expired(s.at(now)) {
			rec := e.record(s.epoch)
			rec.Steps = stepRecords(sh.steps[req.Key])
			if !req.Allows(rec, now) {
				return false, rec, nil
			}
			sh.forgetSteps(req.Key)
			sh.remove(i)
			return true, rec, nil
		}
	}
	return false, store.Record{}, fmt.Errorf("memstore: delete %q: %w", req.Key, store.ErrNotFound)
}

// Scan yields every unexpired record whose key starts with prefix, in key
// order, each with a copy of its step records. The records are a snapshot taken when iteration starts (each
// shard's under its lock, in turn), yielded after releasing the locks, so
// the loop body may call the store.
// A cancelled context is yielded once, as a zero Record with its error, and
// ends the scan.
func (s *Store) Scan(ctx context.Context, prefix string) iter.Seq2[store.Record, error] {
	return func(yield func(store.Record, error) bool) {
		if err := ctx.Err(); err != nil {
			yield(store.Record{}, fmt.Errorf("memstore: scan %q: %w", prefix, err))
			return
		}
		for _, rec := range s.snapshot(prefix) {
			if err := ctx.Err(); err != nil {
				yield(store.Record{}, fmt.Errorf("memstore: scan %q: %w", prefix, err))
				return
			}
			if !yield(rec, nil) {
				return
			}
		}
	}
}

// snapshot returns the unexpired records under prefix, sorted by key.
func (s *Store) snapshot(prefix string) []store.Record {
	at := s.at(s.clock.Now())
	var recs []store.Record
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for key, c := range sh.claims {
			if strings.HasPrefix(key, prefix) {
				rec := c.record(key)
				rec.Steps = stepRecords(sh.steps[key])
				recs = append(recs, rec)
			}
		}
		for e := range sh.settled.all {
			if key := e.key(); strings.HasPrefix(key, prefix) && !e.expired(at) {
				rec := e.record(s.epoch)
				rec.Steps = stepRecords(sh.steps[key])
				recs = append(recs, rec)
			}
		}
		sh.mu.Unlock()
	}
	slices.SortFunc(recs, func(a, b store.Record) int { return strings.Compare(a.Key, b.Key) })
	return recs
}
