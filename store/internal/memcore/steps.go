package memcore

import (
	"context"
	"fmt"
	"strings"

	"github.com/dedup-go/dedup/store"
)

// Step records (store.StepStore) live beside the records, not in them: a
// shard's steps map holds the step records of its keys that have any, and
// is nil until the shard's first SaveStep, so that a store whose handlers
// record no steps (and the local tier of tieredstore, which never does)
// pays one length check where a record goes away, and nothing else: the
// slot stays 80 bytes, the claim as it was.
//
// The step records of a key belong to its record, whichever of claims or
// settled holds it: a key has an entry in steps only while it has a record
// there. They stay when the record moves (a claim completed or released,
// a failed record retried, a lease taken over or granted again) and go
// with it (forgetSteps) wherever a record goes for good: expired and
// found so by Acquire, evicted, swept, deleted, replaced by Remember.
//
// A key's slice is never modified once it is in the map: SaveStep puts a
// new one in its place, so that a reader may take the slice under the
// shard's mutex and copy what it holds after releasing it.

// step is one step record, its value copied in as a string.
type step struct {
	name, value string
}

// forgetSteps forgets the step records of key, whose record is gone.
// Under s.mu.
func (s *shard) forgetSteps(key string) {
	if len(s.steps) != 0 {
		delete(s.steps, key)
	}
}

// forgetSlotSteps forgets the step records of the settled record in slot
// i, which is about to go. Under s.mu.
func (s *shard) forgetSlotSteps(i uint32) {
	if len(s.steps) != 0 {
		delete(s.steps, s.settled.at(i).key())
	}
}

// stepRecords returns a copy of steps, nil when there are none. Every
// value is a slice of its own, empty rather than nil ([]byte of an empty
// string is not nil).
func stepRecords(steps []step) []store.StepRecord {
	if len(steps) == 0 {
		return nil
	}
	out := make([]store.StepRecord, len(steps))
	for i, st := range steps {
		out[i] = store.StepRecord{Name: st.name, Value: []byte(st.value)}
	}
	return out
}

// LoadSteps returns a copy of the step records of req.Key when req.Token
// holds it, processing (its lease may have ended, while no other Acquire
// took the key over); store.ErrLeaseLost otherwise.
func (s *Store) LoadSteps(ctx context.Context, req store.StepsRequest) ([]store.StepRecord, error) {
	if err := checkSteps(ctx, "load steps", req.Key, req.Token); err != nil {
		return nil, err
	}
	sh, _ := s.locate(req.Key)
	sh.mu.Lock()
	c, ok := sh.claims[req.Key]
	if !ok || c.token != req.Token {
		sh.mu.Unlock()
		return nil, errLeaseLost("load steps", req.Key)
	}
	steps := sh.steps[req.Key]
	sh.mu.Unlock()
	return stepRecords(steps), nil
}

// SaveStep records a copy of req.Value under req.Name for req.Key when
// req.Token holds it, processing (as LoadSteps), replacing the step record
// of that name; store.ErrLeaseLost, recording nothing, otherwise. A name
// that store.StepNameValid refuses fails with store.ErrInvalidConfig.
// req.Retention is not used: the step records live as long as the record.
func (s *Store) SaveStep(ctx context.Context, req store.SaveStepRequest) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: save step %q: %w", req.Key, err)
	}
	// The name is checked first: a bad one is refused whoever holds the
	// key.
	if !store.StepNameValid(req.Name) {
		return fmt.Errorf("memstore: save step %q of %q: %w: a step name is 1 to %d bytes of valid UTF-8", req.Name, req.Key, store.ErrInvalidConfig, store.MaxStepNameLen)
	}
	if err := checkSteps(ctx, "save step", req.Key, req.Token); err != nil {
		return err
	}
	// Copied before the lock, as a completion's result is.
	st := step{name: strings.Clone(req.Name), value: string(req.Value)}
	sh, _ := s.locate(req.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	c, ok := sh.claims[req.Key]
	if !ok || c.token != req.Token {
		return errLeaseLost("save step", req.Key)
	}
	old := sh.steps[req.Key]
	steps := make([]step, len(old), len(old)+1)
	copy(steps, old)
	replaced := false
	for i := range steps {
		if steps[i].name == st.name {
			steps[i], replaced = st, true
			break
		}
	}
	if !replaced {
		steps = append(steps, st)
	}
	if sh.steps == nil {
		sh.steps = make(map[string][]step)
	}
	sh.steps[req.Key] = steps
	return nil
}

// checkSteps checks the arguments of LoadSteps and SaveStep. A zero token
// never holds a key, so it gets ErrLeaseLost like any other stale token.
func checkSteps(ctx context.Context, op, key string, token store.Token) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: %s %q: %w", op, key, err)
	}
	if key == "" {
		return errEmptyKey(op)
	}
	if token.IsZero() {
		return errLeaseLost(op, key)
	}
	return nil
}
