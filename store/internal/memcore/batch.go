package memcore

import (
	"bytes"
	"context"
	"fmt"

	"github.com/dedup-go/dedup/store"
)

// AcquireBatch runs Acquire for every request under one lock and one clock
// reading, so the batch is atomic as a whole and each request sees the ones
// before it (the second request of a key finds the first one's claim).
func (s *Store) AcquireBatch(ctx context.Context, reqs []store.AcquireRequest) []store.AcquireOutcome {
	out := make([]store.AcquireOutcome, len(reqs))
	if err := ctx.Err(); err != nil {
		for i, req := range reqs {
			out[i].Err = fmt.Errorf("memstore: acquire %q: %w", req.Key, err)
		}
		return out
	}
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, req := range reqs {
		if err := checkAcquire(req); err != nil {
			out[i].Err = err
			continue
		}
		out[i].Claim, out[i].Err = s.acquire(req, now)
	}
	return out
}

// CompleteBatch runs Complete for every request under one lock and one
// clock reading.
func (s *Store) CompleteBatch(ctx context.Context, reqs []store.CompleteRequest) []error {
	errs := make([]error, len(reqs))
	results := make([][]byte, len(reqs))
	for i, req := range reqs {
		errs[i] = checkSettle(ctx, "complete", req.Key, req.Token, req.Retention)
		if errs[i] == nil {
			results[i] = bytes.Clone(req.Result) // outside the lock, like Complete
		}
	}
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, req := range reqs {
		if errs[i] == nil {
			errs[i] = s.complete(req, results[i], now)
		}
	}
	return errs
}

// ExtendBatch runs Extend for every request under one lock and one clock
// reading.
func (s *Store) ExtendBatch(ctx context.Context, reqs []store.ExtendRequest) []error {
	errs := make([]error, len(reqs))
	for i, req := range reqs {
		errs[i] = checkExtend(ctx, req)
	}
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, req := range reqs {
		if errs[i] == nil {
			errs[i] = s.extend(req, now)
		}
	}
	return errs
}
