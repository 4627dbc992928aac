package tieredstore

import (
	"context"
	"fmt"

	"github.com/dedup-go/dedup/store"
)

// KeepsSteps reports whether the remote store keeps step records
// (store.KeepsSteps of it, decided by New): only then do LoadSteps and
// SaveStep work. The Store has the store.StepStore methods whatever its
// remote store, so a receiver whose handler records steps asks this
// (through store.KeepsSteps) at construction, and refuses a Store that
// says false.
func (s *Store) KeepsSteps() bool { return s.steps != nil }

// stepStore returns the remote store as a store.StepStore, or an error
// naming it when it keeps no step records.
func (s *Store) stepStore(op, key string) (store.StepStore, error) {
	if s.steps == nil {
		return nil, fmt.Errorf("tieredstore: %s %q: %w: the remote store (%T) keeps no step records", op, key, store.ErrInvalidConfig, s.remote)
	}
	return s.steps, nil
}

// LoadSteps returns the remote store's step records of req.Key, held by
// req.Token: the remote store's answer, as it gave it. The local tier
// keeps none. Over a remote store that keeps no step records it fails
// with an error matching store.ErrInvalidConfig.
func (s *Store) LoadSteps(ctx context.Context, req store.StepsRequest) ([]store.StepRecord, error) {
	steps, err := s.stepStore("load steps", req.Key)
	if err != nil {
		return nil, err
	}
	return steps.LoadSteps(ctx, req)
}

// SaveStep records a step of req.Key, held by req.Token, in the remote
// store, and returns its answer as it gave it. Over a remote store that
// keeps no step records it fails with an error matching
// store.ErrInvalidConfig.
func (s *Store) SaveStep(ctx context.Context, req store.SaveStepRequest) error {
	steps, err := s.stepStore("save step", req.Key)
	if err != nil {
		return err
	}
	return steps.SaveStep(ctx, req)
}
