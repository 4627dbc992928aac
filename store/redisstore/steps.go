package redisstore

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
// record plus req.Retention. With Options.MinReplicas, the write waits
// for its replicas as a completion does.
func (s *Store) SaveStep(ctx context.Context, req store.SaveStepRequest) error {
	if err := s.core.CheckSaveStep(req); err != nil {
		return err
	}
	name, retention := rediscore.SaveStepArgs(req)
	value := req.Value
	if value == nil {
		value = []byte{}
	}
	args := []any{string(req.Token[:]), name, value, retention}
	if s.minReplicas > 0 {
		return s.settleReplicated(ctx, "save step", req.Key, saveStepScript, args)
	}
	reply, err := s.evalSteps(ctx, "save step", req.Key, saveStepScript, args)
	if err != nil {
		return err
	}
	return s.settled("save step", req.Key, reply)
}

// LoadSteps returns the step records of req.Key when req.Token holds it
// processing, in no particular order, or an error matching
// store.ErrLeaseLost. It keeps them alive as long as the record, as
// Extend does.
func (s *Store) LoadSteps(ctx context.Context, req store.StepsRequest) ([]store.StepRecord, error) {
	if err := s.core.CheckLoadSteps(req); err != nil {
		return nil, err
	}
	reply, err := s.evalSteps(ctx, "load steps", req.Key, loadStepsScript, []any{string(req.Token[:])})
	if err != nil {
		return nil, err
	}
	switch r := reply.(type) {
	case int64:
		if r == 0 {
			return nil, s.core.LeaseLost("load steps", req.Key)
		}
	case []any:
		flat := make([]string, len(r))
		for i, f := range r {
			v, ok := f.(string)
			if !ok {
				return nil, s.core.Reply("load steps", req.Key, reply)
			}
			flat[i] = v
		}
		if recs, ok := rediscore.LoadedSteps(flat); ok {
			return recs, nil
		}
	}
	return nil, s.core.Reply("load steps", req.Key, reply)
}
