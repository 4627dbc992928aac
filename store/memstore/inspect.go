package memstore

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/dedup-go/dedup"
)

// Get returns the record of key, in whatever state, or an error matching
// ErrNotFound. Unlike Peek, it does not count as a use of the record.
func (s *Store) Get(ctx context.Context, key string) (dedup.Record, error) {
	if err := ctx.Err(); err != nil {
		return dedup.Record{}, fmt.Errorf("memstore: get %q: %w", key, err)
	}
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.claims[key]; ok {
		return c.record(key), nil
	}
	if rec, ok := s.settled.Peek(split(key)); ok && !expired(rec, now) {
		return *rec, nil
	}
	return dedup.Record{}, fmt.Errorf("memstore: get %q: %w", key, dedup.ErrNotFound)
}

// Delete forgets key, whatever its state: a duplicate arriving later is
// processed again, and the holder of a deleted claim gets ErrLeaseLost.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: delete %q: %w", key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.claims, key)
	s.settled.Remove(split(key))
	return nil
}

// Scan calls fn for every unexpired record whose key starts with prefix,
// in key order. It calls fn on a snapshot taken under the lock, after
// releasing it, so fn may call the store.
func (s *Store) Scan(ctx context.Context, prefix string, fn func(dedup.Record) bool) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: scan %q: %w", prefix, err)
	}
	now := s.clock.Now()
	s.mu.Lock()
	var recs []dedup.Record
	for key, c := range s.claims {
		if strings.HasPrefix(key, prefix) {
			recs = append(recs, c.record(key))
		}
	}
	for _, rec := range s.settled.Values() {
		if strings.HasPrefix(rec.Key, prefix) && !expired(rec, now) {
			recs = append(recs, *rec)
		}
	}
	s.mu.Unlock()

	slices.SortFunc(recs, func(a, b dedup.Record) int { return strings.Compare(a.Key, b.Key) })
	for _, rec := range recs {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("memstore: scan %q: %w", prefix, err)
		}
		if !fn(rec) {
			return nil
		}
	}
	return nil
}
