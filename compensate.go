package dedup

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/store"
)

// CompensationSet is what Config.Compensations holds: a Compensations
// map. (An interface, so that a Config stays comparable.)
type CompensationSet interface {
	compensations() map[string]Compensation
}

// Compensations maps step names to their compensations, for
// Config.Compensations; a name ending in "*" is a pattern for every step
// name with its prefix.
type Compensations map[string]Compensation

func (c Compensations) compensations() map[string]Compensation { return c }

// compensationsOf returns the map a CompensationSet holds, nil for none.
func compensationsOf(s CompensationSet) map[string]Compensation {
	if isNilInterface(s) {
		return nil
	}
	return s.compensations()
}

// Compensation undoes the effect of one step when its message is given up
// (see Config.Compensations). Make one with Compensate.
type Compensation interface {
	// compensate runs the compensation for msg, given the step's recorded
	// result (nil when none was stored).
	compensate(ctx context.Context, msg any, codec Codec, result []byte) error
	// message is the message type the compensation takes.
	message() reflect.Type
}

// Compensate returns the compensation of a step whose result is S, for a
// receiver of messages of type M: fn gets the message and the step's
// recorded result (decoded with the receiver's Codec; the zero value when
// the result was not stored), and undoes the step's effect:
//
//	cfg := &dedup.Config{
//		Namespace: "orders",
//		Compensations: dedup.Compensations{
//			"charge": dedup.Compensate(func(ctx context.Context, o Order, c Charge) error {
//				return payments.Refund(ctx, c.ID) // idempotent on the charge's id
//			}),
//		},
//	}
//
// A compensation runs under the message's claim, like a handler: its
// context carries the claim (OutgoingID gives it stable ids) and ends when
// the lease is lost. It is recorded once it returned nil, and runs again
// when a crash or a lost lease came between its effect and its record, so
// it should be idempotent (a refund keyed on the charge). An error, or a
// panic, makes the message retried with the receiver's Backoff, the
// compensations resuming where they stopped; after MaxAttempts failures
// the message is dead-lettered naming the step (CompensationError).
func Compensate[M, S any](fn func(ctx context.Context, msg M, result S) error) Compensation {
	return compensation[M, S]{fn: fn}
}

type compensation[M, S any] struct {
	fn func(ctx context.Context, msg M, result S) error
}

func (c compensation[M, S]) message() reflect.Type { return reflect.TypeFor[M]() }

func (c compensation[M, S]) compensate(ctx context.Context, msg any, codec Codec, result []byte) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &PanicError{Func: "compensation", Value: p, Stack: debug.Stack()}
		}
	}()
	var s S
	if len(result) > 0 {
		if err := codec.Unmarshal(result, &s); err != nil {
			return fmt.Errorf("%w: the step's result: %w", ErrResultUndecodable, err)
		}
	}
	m, _ := msg.(M) // the receiver checked M at construction
	return c.fn(ctx, m, s)
}

// CompensationError is a message given up whose compensation failed: the
// delivery is retried with backoff, and the compensations resume with
// Step's; once Final (after MaxAttempts failures) it is dead-lettered with
// delivery.ReasonCompensationFailed.
type CompensationError struct {
	Key string
	// Step is the step whose compensation failed.
	Step string
	// Failures counts the failed runs of the message's compensations.
	Failures int
	// Final: no more retries; the message is dead-lettered.
	Final bool
	Err   error
}

func (e *CompensationError) Error() string {
	return fmt.Sprintf("dedup: %q: compensation of step %q failed (%d times): %v", e.Key, e.Step, e.Failures, e.Err)
}

// Unwrap returns the compensation's error.
func (e *CompensationError) Unwrap() error { return e.Err }

// ErrGivenUp: the message was given up earlier, and its steps compensated;
// the delivery is dead-lettered again without running the handler. A
// *GivenUpError matches it.
var ErrGivenUp = errors.New("dedup: message given up; its steps were compensated")

// GivenUpError is a delivery of a message given up earlier (or whose
// compensations this delivery finished): it is dead-lettered with the
// reason it was first given up for.
type GivenUpError struct {
	Key    string
	Reason delivery.Reason
	// Cause is the text of the error the message was given up for.
	Cause string
}

func (e *GivenUpError) Error() string {
	return fmt.Sprintf("dedup: %q was given up (%s) and its steps compensated: %s", e.Key, e.Reason, e.Cause)
}

// Is makes a GivenUpError match ErrGivenUp.
func (e *GivenUpError) Is(target error) bool { return target == ErrGivenUp }

// givingUp is the state the marker record keeps.
type givingUp struct {
	failures uint64
	reason   delivery.Reason
	step     string // the step whose compensation failed last
	cause    string
}

func markerState(e stepEntry) givingUp {
	var g givingUp
	n, k := binary.Uvarint(e.payload)
	if k <= 0 {
		return givingUp{cause: "(unreadable)"}
	}
	g.failures = n
	parts := strings.SplitN(string(e.payload[k:]), "\x00", 3)
	for len(parts) < 3 {
		parts = append(parts, "")
	}
	g.reason, g.step, g.cause = delivery.Reason(parts[0]), parts[1], parts[2]
	return g
}

func (g givingUp) payload() []byte {
	b := binary.AppendUvarint(nil, g.failures)
	return append(b, string(g.reason)+"\x00"+g.step+"\x00"+g.cause...)
}

// compensationFor returns the compensation registered for step name: its
// own, else the one of the longest pattern ("prefix*") it matches.
func (r *Receiver[M, R]) compensationFor(name string) Compensation {
	if c, ok := r.comps[name]; ok {
		return c
	}
	var best Compensation
	bestLen := -1
	for pattern, c := range r.comps {
		if p, ok := strings.CutSuffix(pattern, "*"); ok && strings.HasPrefix(name, p) && len(p) > bestLen {
			best, bestLen = c, len(p)
		}
	}
	return best
}

// compensates reports whether giving up a message runs compensations.
func (r *Receiver[M, R]) compensates() bool { return len(r.comps) > 0 }

// giveUp runs, under hc (a context holding the message's claim), the
// compensations of the steps that completed, in the reverse order of their
// completion, each recorded once it ran; a step without a compensation is
// left as it is. The marker record, written first, refuses every later
// step. It resumes where an earlier delivery stopped, and answers at once
// when the compensations ran already. reason and cause say why the
// message is given up (a resumed run keeps the first ones).
func (r *Receiver[M, R]) giveUp(hc *handlerContext, msg M, reason delivery.Reason, cause string) error {
	env, held := hc.steps, &hc.held
	run := hc.stepRun()
	run.mu.Lock()
	if run.refused == nil {
		run.refused = errors.New("the message is being given up")
	}
	err := run.ensure(hc, env, held)
	recs := make(map[string]stepEntry, len(run.recs))
	for k, v := range run.recs {
		recs[k] = v
	}
	ranSteps := len(run.used) > 0
	run.mu.Unlock()
	if err != nil {
		return err
	}
	m, resumed := recs[stepMarker]
	g := givingUp{reason: reason, cause: cause}
	if resumed {
		if m.kind == markerGivenUp {
			return nil
		}
		g = markerState(m)
	}
	delete(recs, stepMarker)
	if len(recs) == 0 && !resumed && !ranSteps {
		return nil // no step ran: nothing to undo, nothing to refuse
	}
	if !resumed {
		if err := env.save(hc, held, stepMarker, stepValue(markerGivingUp, 0, g.payload())); err != nil {
			return err
		}
	}
	type done struct {
		name string
		e    stepEntry
	}
	var todo []done
	for name, e := range recs {
		if e.kind == stepDone || e.kind == stepNotStored {
			todo = append(todo, done{name, e})
		}
	}
	slices.SortFunc(todo, func(a, b done) int { return cmp.Compare(b.e.seq, a.e.seq) })
	for _, d := range todo {
		c := r.compensationFor(d.name)
		if c == nil {
			continue
		}
		if err := hc.Err(); err != nil {
			return fmt.Errorf("dedup: %q: compensation of step %q not started: %w", held.Key, d.name, context.Cause(hc))
		}
		cerr := c.compensate(hc, msg, r.cfg.Codec, d.e.payload)
		if cerr != nil {
			if errors.Is(context.Cause(hc), ErrLeaseLost) {
				return fmt.Errorf("dedup: %q: compensation of step %q: %w: %w", held.Key, d.name, ErrLeaseLost, cerr)
			}
			r.stats.compensationErrors.Add(1)
			g.failures++
			g.step = d.name
			ce := &CompensationError{Key: held.Key, Step: d.name, Failures: int(g.failures), Final: int(g.failures) >= r.cfg.MaxAttempts, Err: cerr}
			if err := env.save(hc, held, stepMarker, stepValue(markerGivingUp, 0, g.payload())); err != nil {
				r.cfg.Logger.WarnContext(hc, "dedup: the failure of a compensation could not be recorded", slog.String("key", held.Key), slog.Any("error", err))
			}
			r.cfg.Logger.WarnContext(hc, "dedup: compensation failed", slog.String("key", held.Key), slog.String("step", d.name), slog.Int("failures", ce.Failures), slog.Bool("final", ce.Final), slog.Any("error", cerr))
			return ce
		}
		if err := env.save(hc, held, d.name, stepValue(stepCompensated, d.e.seq, d.e.payload)); err != nil {
			return fmt.Errorf("dedup: %q: compensation of step %q ran, and its record failed (it may run again): %w", held.Key, d.name, err)
		}
		r.stats.compensations.Add(1)
	}
	return env.save(hc, held, stepMarker, stepValue(markerGivenUp, 0, g.payload()))
}

// checkCompensations refuses compensations a receiver of M cannot run.
func checkCompensations[M any](comps map[string]Compensation) error {
	mt := reflect.TypeFor[M]()
	for name, c := range comps {
		if isNilInterface(c) {
			return fmt.Errorf("%w: the compensation of step %q is nil", ErrInvalidConfig, name)
		}
		if err := checkStepName(strings.TrimSuffix(name, "*")); err != nil && name != "*" {
			return err
		}
		if ct := c.message(); mt != ct && !mt.AssignableTo(ct) {
			return fmt.Errorf("%w: the compensation of step %q takes messages of type %v; the receiver's are %v", ErrInvalidConfig, name, ct, mt)
		}
	}
	return nil
}

// stepStoreOf returns s as a StepStore, or an error naming it.
func stepStoreOf(s store.Store) (store.StepStore, error) {
	if ss, ok := s.(store.StepStore); ok && store.KeepsSteps(s) {
		return ss, nil
	}
	return nil, fmt.Errorf("%w (the store, %T, keeps none)", ErrStepsUnsupported, s)
}
