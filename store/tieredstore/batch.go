package tieredstore

import (
	"context"

	"github.com/dedup-go/dedup"
)

// AcquireBatch answers the keys completed in the local tier from memory
// and sends the others to the remote store in one batch (one round trip
// when the remote store is a dedup.BatchStore, else one call per key).
func (s *Store) AcquireBatch(ctx context.Context, items []dedup.AcquireItem) []dedup.AcquireOutcome {
	out := make([]dedup.AcquireOutcome, len(items))
	var (
		remote []dedup.AcquireItem
		index  []int // index[j] is the item of remote[j]
	)
	for i, it := range items {
		if c, err, ok := s.acquireLocal(it.Key, it.Request); ok {
			out[i] = dedup.AcquireOutcome{Claim: c, Err: err}
			continue
		}
		remote = append(remote, it)
		index = append(index, i)
	}
	if len(remote) == 0 {
		return out
	}
	start := s.clock.Now()
	var answers []dedup.AcquireOutcome
	if b, ok := s.remote.(dedup.BatchStore); ok {
		answers = b.AcquireBatch(ctx, remote)
	} else {
		answers = make([]dedup.AcquireOutcome, len(remote))
		for j, it := range remote {
			answers[j].Claim, answers[j].Err = s.remote.Acquire(ctx, it.Key, it.Request)
		}
	}
	for j, a := range answers {
		if a.Err == nil {
			s.learn(remote[j].Key, a.Claim, start, remote[j].Request.Lease)
		}
		out[index[j]] = a
	}
	return out
}

// CompleteBatch completes the records in the remote store (one round trip
// when it is a dedup.BatchStore) and caches those it confirmed.
func (s *Store) CompleteBatch(ctx context.Context, items []dedup.CompleteItem) []error {
	start := s.clock.Now()
	var errs []error
	if b, ok := s.remote.(dedup.BatchStore); ok {
		errs = b.CompleteBatch(ctx, items)
	} else {
		errs = make([]error, len(items))
		for i, it := range items {
			errs[i] = s.remote.Complete(ctx, it.Key, it.Token, it.Result, it.Retention)
		}
	}
	for i, it := range items {
		s.completed(it.Key, it.Token, it.Result, start, it.Retention, errs[i])
	}
	return errs
}
