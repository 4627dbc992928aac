package dedup

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/store"
)

// Errors of steps.
var (
	// ErrStepRepeated: a step name was used twice in one run of a handler
	// (in a loop without the item in its name, or by two goroutines). It
	// comes marked Permanent: running the same handler again would repeat
	// the mistake.
	ErrStepRepeated = errors.New("dedup: step name used twice in one run")
	// ErrStepRefused: a step was asked to start after its message was
	// given up (its compensations began or ran), or after its own
	// compensation ran. Nothing ran. It comes marked Permanent.
	ErrStepRefused = errors.New("dedup: step refused: the message was given up")
	// ErrStepsUnsupported: the receiver's store cannot keep step records
	// (it is not a store.StepStore), or the receiver was not configured
	// for steps (Config.Steps). It matches ErrInvalidConfig.
	ErrStepsUnsupported = fmt.Errorf("%w: steps need Config.Steps and a store that keeps step records (store.StepStore)", ErrInvalidConfig)
)

// stepMarker is the name of the record that says the message was given up:
// no step starts once it exists. Step names starting with "dedup/" are
// refused, so none can take it.
const stepMarker = "dedup/given-up"

// reservedStepPrefix starts the names the receiver keeps for itself.
const reservedStepPrefix = "dedup/"

// The kinds of a step record's value, its first byte.
const (
	stepDone        = 'd' // the step completed; its encoded result follows
	stepNotStored   = 'n' // the step completed; its result could not be stored
	stepCompensated = 'c' // the step completed and its compensation ran
	markerGivingUp  = 'g' // the message is being given up; compensations run
	markerGivenUp   = 'G' // the message was given up; compensations ran
)

// Step runs fn, the step of the handler running under ctx named name, at
// most once per message and name: across redeliveries, workers and
// replicas, as far as the store can know. The first run's result is
// recorded under the handler's claim, fenced by its token, before Step
// returns it; a later run of the handler for the same message gets the
// recorded result back without running fn:
//
//	func placeOrder(ctx context.Context, o Order) (Receipt, error) {
//		charge, err := dedup.Step(ctx, "charge", func(ctx context.Context) (Charge, error) {
//			key, err := dedup.OutgoingID(ctx, "charge") // the payment API's idempotency key
//			if err != nil {
//				return Charge{}, err
//			}
//			return payments.Charge(ctx, o.Card, o.Total, key)
//		})
//		if err != nil {
//			return Receipt{}, err
//		}
//		...
//	}
//
// The result is encoded with the receiver's Codec and must fit in its
// MaxResultSize. A step whose result cannot be stored is recorded as done
// without it: this run gets its value, and a later run of the handler gets
// an error matching ErrResultNotStored, marked Permanent (the step must
// not run again, and its value is lost). fn's error fails the step and
// records nothing: the handler returns it as it would any error.
//
// A name is 1 to 200 bytes of UTF-8, the same on every run, and used once
// per run; names starting with "dedup/" are the receiver's. A step in a
// loop puts the item in its name ("reserve/" + sku); a second use of a
// name in one run, sequential or concurrent, fails with ErrStepRepeated
// (Permanent). Steps may run from several goroutines of one handler.
// Renaming a step makes it a new step: the recorded one is not found, and
// the new name runs; the order of steps may change freely.
//
// A step is refused (ErrStepRefused) once its message is being given up
// and its compensations begin (see Config.Compensations), so an action
// never follows its compensation; and it does not start once the
// handler's context ended (its lease lost, the caller gone). A holder
// that lost its lease records nothing: Step fails with an error matching
// ErrLeaseLost.
//
// Step needs Config.Steps (or Config.Compensations) and a store that keeps
// step records; outside a receiver's handler (or in a delivery run
// unprotected, fail-open) it fails with ErrNoClaim and runs nothing.
//
// The window between fn's effect and its record (a crash, a lost lease or
// a store outage between the two) is the handler's own window, made
// smaller: a step that did its effect but could not record it runs again
// on the next delivery. Close it for a foreign API that accepts an
// idempotency key by deriving the key from the message and the step name,
// with OutgoingID.
func Step[T any](ctx context.Context, name string, fn func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	hc, _ := ctx.Value(stepsKey{}).(*handlerContext)
	if hc == nil {
		return zero, fmt.Errorf("dedup: step %q: %w", name, ErrNoClaim)
	}
	env := hc.steps
	if env == nil {
		return zero, Permanent(fmt.Errorf("dedup: step %q: %w", name, ErrStepsUnsupported))
	}
	if err := checkStepName(name); err != nil {
		return zero, Permanent(err)
	}
	if fn == nil {
		return zero, Permanent(fmt.Errorf("%w: step %q has a nil function", ErrInvalidConfig, name))
	}
	run := hc.stepRun()
	e, found, err := run.begin(ctx, env, &hc.held, name)
	if err != nil {
		return zero, err
	}
	if found {
		return replayStep[T](env, hc.held.Key, name, e)
	}
	if ctx.Err() != nil {
		run.abandon(name)
		return zero, fmt.Errorf("dedup: step %q of %q not started: %w", name, hc.held.Key, context.Cause(ctx))
	}
	v, err := callStep(ctx, name, fn)
	if err != nil {
		run.abandon(name)
		return zero, err
	}
	kind, data := byte(stepDone), []byte(nil)
	if b, encErr := env.encode(v); encErr != nil {
		kind = stepNotStored
		env.logger.WarnContext(ctx, "dedup: step result not stored; a later run of the handler fails at this step",
			slog.String("key", hc.held.Key), slog.String("step", name), slog.Any("error", encErr))
	} else {
		data = b
	}
	if err := run.record(ctx, env, &hc.held, name, kind, data); err != nil {
		return zero, err
	}
	env.stats.stepsRun.Add(1)
	return v, nil
}

// replayStep answers a step recorded by an earlier run.
func replayStep[T any](env *stepEnv, key, name string, e stepEntry) (T, error) {
	var v T
	switch e.kind {
	case stepDone:
		env.stats.stepsReplayed.Add(1)
		if len(e.payload) == 0 {
			return v, nil
		}
		if err := env.decode(e.payload, &v); err != nil {
			return v, Permanent(fmt.Errorf("%w: step %q of %q: %w", ErrResultUndecodable, name, key, err))
		}
		return v, nil
	case stepNotStored:
		env.stats.stepsReplayed.Add(1)
		return v, Permanent(fmt.Errorf("%w: step %q of %q completed on an earlier run, and its result was not stored", ErrResultNotStored, name, key))
	default: // compensated
		return v, Permanent(fmt.Errorf("%w: step %q of %q was compensated", ErrStepRefused, name, key))
	}
}

// callStep runs fn, turning a panic into a *PanicError.
func callStep[T any](ctx context.Context, name string, fn func(context.Context) (T, error)) (v T, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &PanicError{Func: "step " + name, Value: p, Stack: debug.Stack()}
		}
	}()
	return fn(ctx)
}

// checkStepName refuses a name no store keeps, or one of the receiver's.
func checkStepName(name string) error {
	switch {
	case !store.StepNameValid(name):
		return fmt.Errorf("%w: step name %.40q: it must be 1 to %d bytes of UTF-8", ErrInvalidConfig, name, store.MaxStepNameLen)
	case strings.HasPrefix(name, reservedStepPrefix):
		return fmt.Errorf("%w: step name %q: names starting with %q are the receiver's", ErrInvalidConfig, name, reservedStepPrefix)
	}
	return nil
}

// stepsKey is the context key under which a handler's context answers
// itself, for Step.
type stepsKey struct{}

// stepEnv is what the steps of a receiver's handlers share: the store and
// the receiver's settings, kept once in the receiver.
type stepEnv struct {
	store       store.StepStore
	codec       Codec
	maxSize     int
	retention   time.Duration
	lease       time.Duration
	timeout     time.Duration
	selfBounded bool
	inProcess   bool // the store answers in process memory (store.InProcess)
	clock       clock.Clock
	logger      *slog.Logger
	stats       *stats
}

func (env *stepEnv) encode(v any) (data []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			data, err = nil, fmt.Errorf("%w: encode: %w", ErrResultNotStored, &PanicError{Func: "codec Marshal", Value: p, Stack: debug.Stack()})
		}
	}()
	data, err = env.codec.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w: encode: %w", ErrResultNotStored, err)
	}
	if len(data) > env.maxSize {
		return nil, fmt.Errorf("%w: encoded step result is %d bytes, over MaxResultSize %d", ErrResultNotStored, len(data), env.maxSize)
	}
	return data, nil
}

func (env *stepEnv) decode(data []byte, v any) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &PanicError{Func: "codec Unmarshal", Value: p, Stack: debug.Stack()}
		}
	}()
	return env.codec.Unmarshal(data, v)
}

// bounded returns ctx bounded by the store timeout (unless the store
// bounds itself), detached from ctx's cancellation: a step that did its
// effect records it even when its caller is leaving; the fencing token,
// not the context, decides whether it may. A store that answers in
// process memory gets ctx itself while it has not ended: nothing can
// cancel it during the call. It never asks ctx for its Done channel,
// which would make a handler's context build its cancellable part.
func (env *stepEnv) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if env.inProcess && ctx.Err() == nil {
		return ctx, noCancel
	}
	dctx := context.WithoutCancel(ctx)
	if env.selfBounded {
		return dctx, noCancel
	}
	return context.WithTimeout(dctx, env.timeout)
}

func noCancel() {}

// load reads the step records of held's key.
func (env *stepEnv) load(ctx context.Context, held *store.HeldClaim) (map[string]stepEntry, error) {
	var recs []store.StepRecord
	err := env.retry(ctx, held.Key, func(cctx context.Context) error {
		var err error
		recs, err = env.store.LoadSteps(cctx, store.StepsRequest{Key: held.Key, Token: held.Token})
		return err
	})
	if err != nil {
		return nil, err
	}
	m := make(map[string]stepEntry, len(recs))
	for _, rec := range recs {
		e, ok := parseStep(rec.Value)
		if !ok {
			return nil, &store.OpError{Op: "load steps", Key: held.Key, Err: fmt.Errorf("step record %q is not one the receiver wrote", rec.Name)}
		}
		m[rec.Name] = e
	}
	return m, nil
}

// save records one step value under held.
func (env *stepEnv) save(ctx context.Context, held *store.HeldClaim, name string, value []byte) error {
	return env.retry(ctx, held.Key, func(cctx context.Context) error {
		return env.store.SaveStep(cctx, store.SaveStepRequest{Key: held.Key, Token: held.Token, Name: name, Value: value, Retention: env.retention})
	})
}

// retry runs call, bounded, and again after a failure for want of the
// store, a few times within a fraction of the lease, while ctx (the
// handler's) has not ended: a lost lease ends it.
func (env *stepEnv) retry(ctx context.Context, key string, call func(context.Context) error) error {
	delay := max(env.lease/100, time.Millisecond)
	for try := 0; ; try++ {
		cctx, cancel := env.bounded(ctx)
		err := call(cctx)
		cancel()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, ErrLeaseLost):
			return fmt.Errorf("dedup: %q: %w: step records are written by the holder only", key, err)
		case errors.Is(err, ErrInvalidConfig), errors.Is(err, ErrInvalidKey):
			return err
		case try >= 3 || ctx.Err() != nil:
			if ctx.Err() != nil && errors.Is(context.Cause(ctx), ErrLeaseLost) {
				return fmt.Errorf("dedup: %q: %w: %w", key, ErrLeaseLost, err)
			}
			return storeError("step", key, err)
		}
		sleep(env.clock, delay)
		delay *= 2
	}
}

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
	if held.Attempt <= 1 && gen == 0 {
		r.recs, r.loaded = map[string]stepEntry{}, true
		return nil
	}
	recs, err := env.load(ctx, held)
	if err != nil {
		return err
	}
	r.recs, r.loaded, r.gen, r.seq = recs, true, gen, 0
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
