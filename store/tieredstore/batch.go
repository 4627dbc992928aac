package tieredstore

import (
	"context"
	"fmt"

	"github.com/dedup-go/dedup/store"
)

// AcquireBatch answers the keys completed in the local tier from memory
// and sends the others to the remote store in one batch (one round trip
// when the remote store is a store.BatchStore, else one call per key).
func (s *Store) AcquireBatch(ctx context.Context, reqs []store.AcquireRequest) []store.AcquireOutcome {
	out := make([]store.AcquireOutcome, len(reqs))
	if err := ctx.Err(); err != nil {
		for i, req := range reqs {
			out[i].Err = fmt.Errorf("tieredstore: acquire %q: %w", req.Key, err)
		}
		return out
	}
	var (
		remote []store.AcquireRequest
		index  []int // index[j] is the request of remote[j]
	)
	for i, req := range reqs {
		if c, err, ok := s.acquireLocal(req); ok {
			out[i] = store.AcquireOutcome{Claim: c, Err: err}
			continue
		}
		remote = append(remote, req)
		index = append(index, i)
	}
	if len(remote) == 0 {
		return out
	}
	start := s.clock.Now()
	var answers []store.AcquireOutcome
	if b, ok := s.remote.(store.BatchStore); ok {
		answers = b.AcquireBatch(ctx, remote)
	} else {
		answers = make([]store.AcquireOutcome, len(remote))
		for j, req := range remote {
			answers[j].Claim, answers[j].Err = s.remote.Acquire(ctx, req)
		}
	}
	for j, a := range answers {
		if a.Err == nil {
			s.learn(remote[j], a.Claim, start)
		}
		out[index[j]] = a
	}
	return out
}

// CompleteBatch completes the records in the remote store (one round trip
// when it is a store.BatchStore) and caches those that this Store knows
// the batch wrote, as Complete does.
func (s *Store) CompleteBatch(ctx context.Context, reqs []store.CompleteRequest) []error {
	out := s.CompleteBatchReport(ctx, reqs)
	errs := make([]error, len(out))
	for i, o := range out {
		errs[i] = o.Err
	}
	return errs
}

// CompleteBatchReport is CompleteBatch, reporting the remote store's
// answers as CompleteReport does.
func (s *Store) CompleteBatchReport(ctx context.Context, reqs []store.CompleteRequest) []store.CompleteOutcome {
	first := make([]bool, len(reqs))
	for i, req := range reqs {
		// A token repeated in the batch is sent twice at once: neither
		// request is known to be the one that wrote, unless the remote
		// store tells.
		first[i] = s.claims.begin(req.Key, req.Token)
	}
	start := s.clock.Now()
	var out []store.CompleteOutcome
	if s.reporter != nil {
		out = s.reporter.CompleteBatchReport(ctx, reqs)
	} else {
		out = make([]store.CompleteOutcome, len(reqs))
		if b, ok := s.remote.(store.BatchStore); ok {
			for i, err := range b.CompleteBatch(ctx, reqs) {
				out[i].Err = err
			}
		} else {
			for i, req := range reqs {
				out[i].Err = s.remote.Complete(ctx, req)
			}
		}
	}
	for i, req := range reqs {
		s.completed(ctx, req, start, out[i].Completion, out[i].Err, first[i])
	}
	return out
}

// ExtendBatch extends the claims in the remote store (one round trip when
// it is a store.BatchStore) and moves the noted claims as Extend does.
func (s *Store) ExtendBatch(ctx context.Context, reqs []store.ExtendRequest) []error {
	start := s.clock.Now()
	var errs []error
	if b, ok := s.remote.(store.BatchStore); ok {
		errs = b.ExtendBatch(ctx, reqs)
	} else {
		errs = make([]error, len(reqs))
		for i, req := range reqs {
			errs[i] = s.remote.Extend(ctx, req)
		}
	}
	for i, req := range reqs {
		s.extended(req, start, errs[i])
	}
	return errs
}
