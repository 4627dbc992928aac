package dedup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"

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
