package rueidisstore

import (
	"context"

	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/rediscore"
)

var _ store.StepStore = (*Store)(nil)

// SaveStep records the step req.Name with req.Value for req.Key, held by
// req.Token, replacing a record of the same name, in one script that
// checks the claim: a token that does not hold the key processing gets an
// error matching store.ErrLeaseLost, and nothing is written. The step
// records live in a hash beside the record, in its Cluster slot (see "Step
// records" in the package documentation), kept at least as long as the
// record plus req.Retention. redisstore reads and writes the same.
func (s *Store) SaveStep(ctx context.Context, req store.SaveStepRequest) error {
	if err := s.core.CheckSaveStep(req); err != nil {
		return err
	}
	name, retention := rediscore.SaveStepArgs(req)
	m, err := s.evalSteps(ctx, "save step", req.Key, saveStepScript, string(req.Token[:]), name, string(req.Value), retention)
	if err != nil {
		return err
	}
	return s.settled("save step", req.Key, &m)
}

// LoadSteps returns the step records of req.Key when req.Token holds it
// processing, in no particular order, or an error matching
// store.ErrLeaseLost. It keeps them alive as long as the record, as
// Extend does.
func (s *Store) LoadSteps(ctx context.Context, req store.StepsRequest) ([]store.StepRecord, error) {
	if err := s.core.CheckLoadSteps(req); err != nil {
		return nil, err
	}
	m, err := s.evalSteps(ctx, "load steps", req.Key, loadStepsScript, string(req.Token[:]))
	if err != nil {
		return nil, err
	}
	if code, err := m.AsInt64(); err == nil && code == 0 {
		return nil, s.core.LeaseLost("load steps", req.Key)
	}
	if flat, err := m.AsStrSlice(); err == nil {
		if recs, ok := rediscore.LoadedSteps(flat); ok {
			return recs, nil
		}
	}
	return nil, s.core.Reply("load steps", req.Key, describe(&m))
}
