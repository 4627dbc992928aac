package memcore

import (
	"context"
	"fmt"

	"github.com/dedup-go/dedup/store"
)

// AcquireBatch runs Acquire for every request in order, on one clock
// reading: each request sees the ones before it (the second request of a
// key finds the first one's claim). Each takes its key's shard's lock in
// turn, so the batch is the sequence of its Acquires, not one step.
func (s *Store) AcquireBatch(ctx context.Context, reqs []store.AcquireRequest) []store.AcquireOutcome {
	out := make([]store.AcquireOutcome, len(reqs))
	if err := ctx.Err(); err != nil {
		for i, req := range reqs {
			out[i].Err = fmt.Errorf("memstore: acquire %q: %w", req.Key, err)
		}
		return out
	}
	now := s.clock.Now()
	for i, req := range reqs {
		if err := checkAcquire(req); err != nil {
			out[i].Err = err
			continue
		}
		sh, k := s.locate(req.Key)
		sh.mu.Lock()
		out[i].Claim, out[i].Err = sh.acquire(req, k, now)
		sh.mu.Unlock()
	}
	return out
}

// CompleteBatch runs Complete for every request in order, on one clock
// reading.
func (s *Store) CompleteBatch(ctx context.Context, reqs []store.CompleteRequest) []error {
	errs := make([]error, len(reqs))
	s.completeBatch(ctx, reqs, errs, nil)
	return errs
}

// CompleteBatchReport is CompleteBatch, reporting for each request whether
// it wrote the record or found it completed already by its token.
func (s *Store) CompleteBatchReport(ctx context.Context, reqs []store.CompleteRequest) []store.CompleteOutcome {
	errs := make([]error, len(reqs))
	done := make([]store.Completion, len(reqs))
	s.completeBatch(ctx, reqs, errs, done)
	return store.CompleteOutcomes(done, errs)
}

// completeBatch is CompleteBatch into errs and, unless nil, done.
func (s *Store) completeBatch(ctx context.Context, reqs []store.CompleteRequest, errs []error, done []store.Completion) {
	sts := make([]settling, len(reqs))
	for i, req := range reqs {
		errs[i] = checkSettle(ctx, "complete", req.Key, req.Token, req.Retention)
		if errs[i] == nil {
			sts[i] = completing(req) // outside the lock, like Complete
		}
	}
	now := s.clock.Now()
	for i, req := range reqs {
		if errs[i] == nil {
			sh, k := s.locate(req.Key)
			sh.mu.Lock()
			c, owed, err := sh.complete(&sts[i], k, now)
			sh.mu.Unlock()
			if owed {
				s.evictElsewhere(sh, now)
			}
			errs[i] = err
			if done != nil {
				done[i] = c
			}
		}
	}
}

// ExtendBatch runs Extend for every request in order, on one clock
// reading.
func (s *Store) ExtendBatch(ctx context.Context, reqs []store.ExtendRequest) []error {
	errs := make([]error, len(reqs))
	for i, req := range reqs {
		errs[i] = checkExtend(ctx, req)
	}
	now := s.clock.Now()
	for i, req := range reqs {
		if errs[i] == nil {
			sh, _ := s.locate(req.Key)
			sh.mu.Lock()
			errs[i] = sh.extend(req, now)
			sh.mu.Unlock()
		}
	}
	return errs
}
