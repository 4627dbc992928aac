package dedupgrpc_test

// TEMPORARY: a store.StepStore over memstore until memstore keeps step
// records (the root package's tests use the same shim). Its records are
// fenced by the claim memstore's Inspector Get finds, and dropped with a
// record created anew.

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
	var out []store.StepRecord
	for n, v := range s.steps[req.Key] {
		out = append(out, store.StepRecord{Name: n, Value: append([]byte(nil), v...)})
	}
	return out, nil
}

func (s *stepShim) SaveStep(ctx context.Context, req store.SaveStepRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.holds(ctx, req.Key, req.Token); err != nil {
		return err
	}
	if s.steps[req.Key] == nil {
		s.steps[req.Key] = map[string][]byte{}
	}
	s.steps[req.Key][req.Name] = append([]byte(nil), req.Value...)
	return nil
}
