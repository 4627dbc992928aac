package cli

// TEMPORARY: a store.StepStore over memstore until memstore keeps step
// records (the root package's tests use the same shim). Its records are
// fenced by the claim memstore's Inspector Get finds, dropped with a
// record created anew, and returned in Record.Steps by Get, as a
// StepStore's Inspector does.

import (
	"context"
	"sync"
	"time"

	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/memstore"
)

type stepShim struct {
	*memstore.Store
	mu    sync.Mutex
	steps map[string]map[string][]byte
	gen   map[string]time.Time
}

func newStepShim(s *memstore.Store) *stepShim {
	return &stepShim{Store: s, steps: map[string]map[string][]byte{}, gen: map[string]time.Time{}}
}

// holds fails with ErrLeaseLost unless tok holds key; it is called with
// mu held.
func (s *stepShim) holds(ctx context.Context, key string, tok store.Token) error {
	rec, err := s.Store.Get(ctx, key)
	if err != nil || rec.State != store.StateProcessing || rec.Token != tok {
		return store.ErrLeaseLost
	}
	if !s.gen[key].Equal(rec.CreatedAt) {
		s.steps[key] = nil
		s.gen[key] = rec.CreatedAt
	}
	return nil
}

func (s *stepShim) LoadSteps(ctx context.Context, req store.StepsRequest) ([]store.StepRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.holds(ctx, req.Key, req.Token); err != nil {
		return nil, err
	}
	return s.records(req.Key), nil
}

func (s *stepShim) SaveStep(ctx context.Context, req store.SaveStepRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.holds(ctx, req.Key, req.Token); err != nil {
		return err
	}
	s.put(req.Key, req.Name, req.Value)
	return nil
}

// Get is memstore's, with the record's steps.
func (s *stepShim) Get(ctx context.Context, key string) (store.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, err := s.Store.Get(ctx, key)
	if err == nil && s.gen[key].Equal(rec.CreatedAt) {
		rec.Steps = s.records(key)
	}
	return rec, err
}

// put records a step as it is, for the test's foreign records too; it is
// called with mu held, or before the store is shared.
func (s *stepShim) put(key, name string, value []byte) {
	if s.steps[key] == nil {
		s.steps[key] = map[string][]byte{}
	}
	s.steps[key][name] = append([]byte(nil), value...)
}

func (s *stepShim) records(key string) []store.StepRecord {
	var out []store.StepRecord
	for n, v := range s.steps[key] {
		out = append(out, store.StepRecord{Name: n, Value: append([]byte(nil), v...)})
	}
	return out
}
