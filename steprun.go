package dedup

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/dedup-go/dedup/store"
)

// This file holds what one run of a handler knows of its message's step
// records, and how a step record's value is encoded.

// stepEntry is a parsed step record.
type stepEntry struct {
	kind    byte
	seq     uint64 // the order the step completed in: 1 for the first
	payload []byte // the result (done, compensated); the marker's state
}

// stepValue encodes a step record's value: its kind, its sequence
// number, then the payload.
func stepValue(kind byte, seq uint64, payload []byte) []byte {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(payload))
	b = append(b, kind)
	b = binary.AppendUvarint(b, seq)
	return append(b, payload...)
}

// parseStep decodes a value stepValue encoded.
func parseStep(v []byte) (stepEntry, bool) {
	if len(v) < 2 {
		return stepEntry{}, false
	}
	switch v[0] {
	case stepDone, stepNotStored, stepCompensated, markerGivingUp, markerGivenUp:
	default:
		return stepEntry{}, false
	}
	seq, n := binary.Uvarint(v[1:])
	if n <= 0 {
		return stepEntry{}, false
	}
	return stepEntry{kind: v[0], seq: seq, payload: v[1+n:]}, true
}

// stepRun is what one run of a handler knows of its message's steps: the
// records read from the store (after the first attempt) and those this
// run wrote, and the names it started.
type stepRun struct {
	mu      sync.Mutex
	gen     uint64 // the claim's StepsGeneration when recs was read
	loaded  bool   // recs holds what the store holds
	recs    map[string]stepEntry
	used    map[string]struct{}
	seq     uint64 // the highest sequence number known
	refused error  // set once giving up began: no step starts
	// stale: what recs holds may not be what the store holds (the
	// handler's transaction rolled back): read it again, even on a first
	// attempt.
	stale bool
}

// stepRun returns the run's step state, made on first use.
func (c *handlerContext) stepRun() *stepRun {
	if r := c.run.Load(); r != nil {
		return r
	}
	r := &stepRun{}
	if c.run.CompareAndSwap(nil, r) {
		return r
	}
	return c.run.Load()
}

// ensure makes recs hold what the store holds, reading it when this run
// has not, or when the handler's transaction rolled back since. It is
// called with mu held. A first attempt's claim has no step records.
func (r *stepRun) ensure(ctx context.Context, env *stepEnv, held *store.HeldClaim) error {
	gen := held.StepsGeneration()
	if r.loaded && gen == r.gen {
		return nil
	}
	if gen != r.gen {
		r.used = nil // a rerun of the handler in a new transaction
	}
	if held.Attempt <= 1 && gen == 0 && !r.stale {
		r.recs, r.loaded = map[string]stepEntry{}, true
		return nil
	}
	recs, err := env.load(ctx, held)
	if err != nil {
		return err
	}
	r.recs, r.loaded, r.gen, r.seq, r.stale = recs, true, gen, 0, false
	for _, e := range recs {
		r.seq = max(r.seq, e.seq)
	}
	return nil
}

// begin starts step name: it refuses a step of a message being given up,
// or a name this run used already, and answers a step recorded earlier.
func (r *stepRun) begin(ctx context.Context, env *stepEnv, held *store.HeldClaim, name string) (stepEntry, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refused != nil {
		return stepEntry{}, false, Permanent(fmt.Errorf("%w: step %q of %q: %w", ErrStepRefused, name, held.Key, r.refused))
	}
	if err := r.ensure(ctx, env, held); err != nil {
		return stepEntry{}, false, err
	}
	if m, ok := r.recs[stepMarker]; ok {
		return stepEntry{}, false, Permanent(fmt.Errorf("%w: step %q of %q: given up: %s", ErrStepRefused, name, held.Key, markerState(m).cause))
	}
	if _, ok := r.used[name]; ok {
		return stepEntry{}, false, Permanent(fmt.Errorf("%w: step %q of %q", ErrStepRepeated, name, held.Key))
	}
	if r.used == nil {
		r.used = make(map[string]struct{})
	}
	r.used[name] = struct{}{}
	e, ok := r.recs[name]
	return e, ok, nil
}

// abandon forgets that name started: it failed and recorded nothing, so
// the handler may try it again in this run.
func (r *stepRun) abandon(name string) {
	r.mu.Lock()
	delete(r.used, name)
	r.mu.Unlock()
}

// record writes step name as done, fenced by held's token, then keeps it.
func (r *stepRun) record(ctx context.Context, env *stepEnv, held *store.HeldClaim, name string, kind byte, data []byte) error {
	r.mu.Lock()
	r.seq++
	seq := r.seq
	r.mu.Unlock()
	v := stepValue(kind, seq, data)
	if err := env.save(ctx, held, name, v); err != nil {
		return fmt.Errorf("dedup: step %q of %q ran, and its record failed (a later run may run it again): %w", name, held.Key, err)
	}
	r.mu.Lock()
	if r.recs == nil {
		r.recs = make(map[string]stepEntry)
	}
	r.recs[name] = stepEntry{kind: kind, seq: seq, payload: data}
	r.mu.Unlock()
	return nil
}

// handlerSteps is the part of a handler's context that steps use.
type handlerSteps struct {
	steps *stepEnv
	run   atomic.Pointer[stepRun]
}
