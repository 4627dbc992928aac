package memstore

import (
	"bytes"
	"context"
	"fmt"

	"github.com/dedup-go/dedup"
)

// AcquireBatch runs Acquire for every item under one lock and one clock
// reading, so the batch is atomic as a whole and each item sees the ones
// before it (the second item of a key finds the first one's claim).
func (s *Store) AcquireBatch(ctx context.Context, items []dedup.AcquireItem) []dedup.AcquireOutcome {
	out := make([]dedup.AcquireOutcome, len(items))
	if err := ctx.Err(); err != nil {
		for i, it := range items {
			out[i].Err = fmt.Errorf("memstore: acquire %q: %w", it.Key, err)
		}
		return out
	}
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, it := range items {
		if err := checkAcquire(it.Key, it.Request); err != nil {
			out[i].Err = err
			continue
		}
		out[i].Claim, out[i].Err = s.acquire(it.Key, it.Request, now)
	}
	return out
}

// CompleteBatch runs Complete for every item under one lock and one clock
// reading.
func (s *Store) CompleteBatch(ctx context.Context, items []dedup.CompleteItem) []error {
	errs := make([]error, len(items))
	results := make([][]byte, len(items))
	for i, it := range items {
		errs[i] = checkSettle(ctx, "complete", it.Key, it.Token, it.Retention)
		if errs[i] == nil {
			results[i] = bytes.Clone(it.Result) // outside the lock, like Complete
		}
	}
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, it := range items {
		if errs[i] == nil {
			errs[i] = s.complete(it.Key, it.Token, results[i], it.Retention, now)
		}
	}
	return errs
}
