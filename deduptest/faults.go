package deduptest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dedup-go/dedup/store"
)

// Op names a store operation a Fault applies to.
type Op uint8

// The operations of a store. A batch call (AcquireBatch, CompleteBatch,
// ExtendBatch) is subject, item by item, to the faults of its single-key
// operation. OpSaveStep and OpLoadSteps are the calls of a store that
// keeps step records (store.StepStore, for dedup.Step and the
// compensations): the receiver saves a record after each step that
// completed, and when a message is given up (its marker, then each
// compensation that ran); it loads them when a later attempt begins its
// first step, or resumes giving up.
const (
	OpAcquire Op = iota + 1
	OpComplete
	OpRelease
	OpExtend
	OpSaveStep
	OpLoadSteps
)

// String returns the operation's name.
func (o Op) String() string {
	switch o {
	case OpAcquire:
		return "acquire"
	case OpComplete:
		return "complete"
	case OpRelease:
		return "release"
	case OpExtend:
		return "extend"
	case OpSaveStep:
		return "save-step"
	case OpLoadSteps:
		return "load-steps"
	default:
		return "unknown"
	}
}

// Kind is what a Fault does to the call it hits.
type Kind uint8

// The kinds of fault.
const (
	// Fail returns Fault.Err (ErrInjected by default) without calling the
	// store.
	Fail Kind = iota + 1
	// Delay waits Fault.Delay (real time, or until the call's context
	// ends) before calling the store.
	Delay
	// Hang blocks until the call's context ends or the FaultStore is
	// closed, and returns an error matching ErrInjected.
	Hang
	// LoseAnswer calls the store, then answers an error matching
	// ErrInjected (and store.ErrUnavailable) although the operation was
	// applied: a completion recorded whose answer never arrived.
	LoseAnswer
	// LeaseLost answers store.ErrLeaseLost without calling the store
	// (meant for OpComplete, OpExtend, OpRelease, OpSaveStep and
	// OpLoadSteps).
	LeaseLost
	// Crash is "the worker died between its effect and the record", for
	// OpComplete: the completion is not applied and the call answers
	// ErrCrashed, which Run recognizes: it does not settle the delivery,
	// and redelivers it once the claim's lease has run out, as a broker
	// would after a worker died. A handler that completes the record
	// itself (pgstore's and mysqlstore's TxHandler) never reaches the
	// receiver's Complete, so this fault never fires for it, and Run
	// reports it so (FaultNotInjected, when the FaultStore is among
	// Options.Faults). To crash such a handler, crash it from the handler:
	// return an error wrapping ErrCrashed from the function the
	// transaction runs, after its writes (the transaction rolls back: a
	// worker dead before the commit), or from a handler wrapped around
	// the one TxHandler returns (after the commit: the crash this fault
	// stands for). store/pgstore's deduptest_test.go does both.
	//
	// On OpSaveStep, Crash is "the worker died between this step and the
	// next": unlike on OpComplete, the call is made, so the step's record
	// IS written (the step completed and was recorded), and then the call
	// answers ErrCrashed. The handler's Step fails with an error matching
	// store.ErrLeaseLost, the receiver does not release the claim, and Run
	// redelivers the message once the lease has run out: the next run
	// replays the recorded steps and goes on from the next one. The
	// difference is deliberate. A crash after a step's effect but before
	// its record is the window steps only narrow (that step runs again,
	// its effect repeated, unless an idempotency key closes it: see
	// dedup.Step); a crash between two recorded steps is what steps
	// promise to survive, each effect once, and this fault tests that
	// promise. Fault.Calls picks the boundary: call N is the crash after
	// the Nth step record of the calls the fault matches (with Key set,
	// the Nth record of that message: its steps in order, then, when it is
	// given up, the marker that refuses later steps, each compensation's
	// record and the final marker), so a run per N crashes at every
	// boundary. On any other operation (OpLoadSteps included), Crash
	// answers ErrCrashed without calling the store.
	Crash
)

// String returns the kind's name.
func (k Kind) String() string {
	switch k {
	case Fail:
		return "fail"
	case Delay:
		return "delay"
	case Hang:
		return "hang"
	case LoseAnswer:
		return "lose-answer"
	case LeaseLost:
		return "lease-lost"
	case Crash:
		return "crash"
	default:
		return "unknown"
	}
}

var (
	// ErrInjected is the error of an injected failure. It matches
	// store.ErrUnavailable, as a store's failure would.
	ErrInjected = fmt.Errorf("deduptest: injected fault: %w", store.ErrUnavailable)
	// ErrCrashed is the answer of a Crash fault. It matches
	// store.ErrLeaseLost, so that the receiver gives the completion (or
	// the step) up at once, without releasing the claim (the worker is
	// dead), and Run redelivers the message.
	ErrCrashed = fmt.Errorf("deduptest: worker crashed after the effect, before the record: %w", store.ErrLeaseLost)
)

// Fault is one rule of a FaultStore: which calls it hits and what it does.
type Fault struct {
	// Op is the operation the fault applies to. It must be set.
	Op Op
	// Kind is what the fault does. It must be set.
	Kind Kind
	// Key restricts the fault to one key: the full key ("ns:id") or the
	// message id. Empty means every key.
	Key string
	// Calls lists which of the calls the fault matches it hits, counting
	// from 1 (per fault, over every key it matches). Empty means every
	// call (subject to Probability).
	Calls []int
	// Probability, when positive, makes each matching call (among Calls,
	// when set) hit with this probability, drawn from the FaultStore's
	// seeded source.
	Probability float64
	// Delay is how long a Delay fault waits.
	Delay time.Duration
	// Err is what a Fail fault returns; ErrInjected when nil.
	Err error
}

// Injection is one fault a FaultStore injected.
type Injection struct {
	Op   Op
	Kind Kind
	Key  string
	// Call is the fault's count of matching calls at this one (1-based).
	Call int
}

// String describes the injection.
func (i Injection) String() string {
	return fmt.Sprintf("%s %s on %q (call %d)", i.Kind, i.Op, i.Key, i.Call)
}

// FaultStore wraps a store.Store and injects faults into chosen calls.
// It is a store.BatchStore whatever the store it wraps: over a store that
// is not one, a batch runs its items one by one. It has the methods of a
// store.StepStore whatever the store it wraps, and passes step records
// through the faults of OpSaveStep and OpLoadSteps to a wrapped store that
// keeps them; over one that does not, they fail with an error matching
// store.ErrInvalidConfig, and KeepsSteps (store.StepsKept) says false, so
// that a receiver configured for steps refuses the FaultStore at
// construction as it would the store it wraps. It does not pass on the
// wrapped store's other optional abilities (Peeker, Inspector...), so
// that every call of the receiver goes through the faults. It is safe for
// concurrent use. Close it to release the calls a Hang fault holds.
type FaultStore struct {
	inner store.Store

	mu       sync.Mutex
	faults   []*faultState
	rng      *rand.Rand
	injected []Injection
	closed   chan struct{}
	once     sync.Once
}

type faultState struct {
	Fault
	calls    int // the calls that reached the fault and matched it
	injected int // the calls it hit
}

var (
	_ store.BatchStore = (*FaultStore)(nil)
	_ store.StepStore  = (*FaultStore)(nil)
	_ store.StepsKept  = (*FaultStore)(nil)
)

// NewFaultStore returns inner wrapped with faults. seed seeds the source
// of Probability faults, so that a run can be repeated. A Fault without
// an Op or a Kind, or with a negative Probability or Delay, is an error.
func NewFaultStore(inner store.Store, seed uint64, faults ...Fault) (*FaultStore, error) {
	if inner == nil {
		return nil, errors.New("deduptest: NewFaultStore: nil store")
	}
	f := &FaultStore{inner: inner, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), closed: make(chan struct{})}
	for _, ft := range faults {
		if err := f.Add(ft); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// Add adds a fault, after those already there: a call is hit by the first
// fault that matches and fires.
func (f *FaultStore) Add(ft Fault) error {
	switch {
	case ft.Op < OpAcquire || ft.Op > OpLoadSteps:
		return fmt.Errorf("deduptest: Fault.Op %d is not an operation", ft.Op)
	case ft.Kind < Fail || ft.Kind > Crash:
		return fmt.Errorf("deduptest: Fault.Kind %d is not a kind", ft.Kind)
	case ft.Probability < 0 || ft.Delay < 0:
		return errors.New("deduptest: Fault.Probability and Fault.Delay must not be negative")
	case slices.ContainsFunc(ft.Calls, func(c int) bool { return c < 1 }):
		return fmt.Errorf("deduptest: Fault.Calls %v: calls count from 1", ft.Calls)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = append(f.faults, &faultState{Fault: ft})
	return nil
}

// Injected returns the faults injected so far, in order.
func (f *FaultStore) Injected() []Injection {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Injection(nil), f.injected...)
}

// Close releases every call a Hang fault holds, now and later. It is safe
// to call more than once.
func (f *FaultStore) Close() error {
	f.once.Do(func() { close(f.closed) })
	return nil
}

// pick returns the fault that hits a call of op on key, or nil.
func (f *FaultStore) pick(op Op, key string) *Fault {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, id := store.SplitKey(key)
	for _, s := range f.faults {
		if s.Op != op || (s.Key != "" && s.Key != key && s.Key != id) {
			continue
		}
		s.calls++
		if len(s.Calls) > 0 && !slices.Contains(s.Calls, s.calls) {
			continue
		}
		if s.Probability > 0 && f.rng.Float64() >= s.Probability {
			continue
		}
		s.injected++
		f.injected = append(f.injected, Injection{Op: op, Kind: s.Kind, Key: key, Call: s.calls})
		ft := s.Fault
		return &ft
	}
	return nil
}

// unfired describes each fault that was not injected as asked: one that
// hit no call, or one whose Calls lists a call that never came. Run
// reports them (FaultNotInjected).
func (f *FaultStore) unfired() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, s := range f.faults {
		var never []int
		if s.Probability == 0 {
			for _, c := range s.Calls {
				if c > s.calls {
					never = append(never, c)
				}
			}
		}
		var why string
		switch {
		case s.calls == 0:
			why = fmt.Sprintf("no %s call matched it", s.Op)
			if s.Key != "" {
				why += " (Key is the full key or the message id)"
			}
			why += unreached(s.Op)
		case len(never) > 0:
			why = fmt.Sprintf("only %d %s calls matched it, so its call(s) %v never came", s.calls, s.Op, never)
		case s.injected == 0:
			why = fmt.Sprintf("none of the %d %s calls that matched it was hit at Probability %v", s.calls, s.Op, s.Probability)
		default:
			continue
		}
		out = append(out, fmt.Sprintf("%s was never injected: %s", s.describe(), why))
	}
	return out
}

// describe names a fault: "the crash fault on complete of "p0" (calls [1])".
func (ft *Fault) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the %s fault on %s", ft.Kind, ft.Op)
	if ft.Key != "" {
		fmt.Fprintf(&b, " of %q", ft.Key)
	}
	var when []string
	if len(ft.Calls) > 0 {
		when = append(when, fmt.Sprintf("calls %v", ft.Calls))
	}
	if ft.Probability > 0 {
		when = append(when, fmt.Sprintf("probability %v", ft.Probability))
	}
	if len(when) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(when, ", "))
	}
	return b.String()
}

// unreached says when the receiver makes no call of op at all, for a
// fault that no call reached.
func unreached(op Op) string {
	switch op {
	case OpComplete:
		return ". A handler that completes the record itself (pgstore's or mysqlstore's TxHandler) never reaches the receiver's Complete: " +
			"crash it from the handler instead, returning an error that wraps deduptest.ErrCrashed (docs/testing.md, Faults)"
	case OpExtend:
		return ". The receiver extends a lease only while a handler runs longer than a third of it: " +
			"have the handler take that long on the fake clock (deduptest.Sleep)"
	case OpRelease:
		return ". The receiver releases a claim only when its handler fails"
	case OpSaveStep:
		return ". The receiver saves a step record only for a handler's dedup.Step that completed, and for a message given up " +
			"whose handler ran steps: Calls counts the records of the messages the fault matches (with Key, of that message alone)"
	case OpLoadSteps:
		return ". The receiver reads step records only on a later attempt of a message whose handler runs a step, " +
			"or that is being given up: a first attempt has none to read"
	}
	return ""
}

// before runs the part of fault ft that comes before the call: it reports
// whether the call is to be made, and the error to answer instead.
func (f *FaultStore) before(ctx context.Context, ft *Fault) (call bool, err error) {
	if ft == nil {
		return true, nil
	}
	switch ft.Kind {
	case Fail:
		if ft.Err != nil {
			return false, ft.Err
		}
		return false, ErrInjected
	case Delay:
		t := time.NewTimer(ft.Delay)
		defer t.Stop()
		select {
		case <-t.C:
			return true, nil
		case <-ctx.Done():
			return false, fmt.Errorf("%w (delayed call ended: %w)", ErrInjected, context.Cause(ctx))
		case <-f.closed:
			return true, nil
		}
	case Hang:
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("%w (hung call ended: %w)", ErrInjected, context.Cause(ctx))
		case <-f.closed:
			return false, fmt.Errorf("%w (hung call released by Close)", ErrInjected)
		}
	case LeaseLost:
		return false, store.ErrLeaseLost
	case Crash:
		return false, ErrCrashed
	}
	return true, nil // LoseAnswer
}

// after turns the answer err of a call made under fault ft into the
// caller's.
func after(ft *Fault, err error) error {
	if ft != nil && ft.Kind == LoseAnswer && err == nil {
		return fmt.Errorf("%w (the answer was lost after the operation was applied)", ErrInjected)
	}
	return err
}

// Acquire runs the store's Acquire through the faults of OpAcquire.
func (f *FaultStore) Acquire(ctx context.Context, req store.AcquireRequest) (store.Claim, error) {
	ft := f.pick(OpAcquire, req.Key)
	if call, err := f.before(ctx, ft); !call {
		return store.Claim{}, err
	}
	c, err := f.inner.Acquire(ctx, req)
	if err = after(ft, err); err != nil {
		return store.Claim{}, err
	}
	return c, nil
}

// Complete runs the store's Complete through the faults of OpComplete.
func (f *FaultStore) Complete(ctx context.Context, req store.CompleteRequest) error {
	ft := f.pick(OpComplete, req.Key)
	if call, err := f.before(ctx, ft); !call {
		return err
	}
	return after(ft, f.inner.Complete(ctx, req))
}

// Release runs the store's Release through the faults of OpRelease.
func (f *FaultStore) Release(ctx context.Context, req store.ReleaseRequest) error {
	ft := f.pick(OpRelease, req.Key)
	if call, err := f.before(ctx, ft); !call {
		return err
	}
	return after(ft, f.inner.Release(ctx, req))
}

// Extend runs the store's Extend through the faults of OpExtend.
func (f *FaultStore) Extend(ctx context.Context, req store.ExtendRequest) error {
	ft := f.pick(OpExtend, req.Key)
	if call, err := f.before(ctx, ft); !call {
		return err
	}
	return after(ft, f.inner.Extend(ctx, req))
}

// KeepsSteps reports whether the wrapped store keeps step records
// (store.KeepsSteps of it): a receiver configured for steps asks, and
// refuses the FaultStore when it does not.
func (f *FaultStore) KeepsSteps() bool { return store.KeepsSteps(f.inner) }

// stepStore returns the wrapped store as a StepStore, or an error
// matching store.ErrInvalidConfig.
func (f *FaultStore) stepStore() (store.StepStore, error) {
	if ss, ok := f.inner.(store.StepStore); ok && store.KeepsSteps(f.inner) {
		return ss, nil
	}
	return nil, fmt.Errorf("%w: deduptest: the store the FaultStore wraps (%T) keeps no step records", store.ErrInvalidConfig, f.inner)
}

// SaveStep runs the wrapped store's SaveStep through the faults of
// OpSaveStep. A Crash fault writes the record first, then answers
// ErrCrashed (see Crash).
func (f *FaultStore) SaveStep(ctx context.Context, req store.SaveStepRequest) error {
	ss, err := f.stepStore()
	if err != nil {
		return err
	}
	ft := f.pick(OpSaveStep, req.Key)
	if ft != nil && ft.Kind == Crash {
		return &stepCrash{step: req.Name, refused: ss.SaveStep(ctx, req)}
	}
	if call, err := f.before(ctx, ft); !call {
		return err
	}
	return after(ft, ss.SaveStep(ctx, req))
}

// stepCrash is the answer of a Crash fault on OpSaveStep: it matches
// ErrCrashed and store.ErrLeaseLost, and says the record was written
// (or what the store answered instead).
type stepCrash struct {
	step    string
	refused error // the store's answer to the save, when it failed
}

func (e *stepCrash) Error() string {
	if e.refused != nil {
		return fmt.Sprintf("deduptest: worker crashed after step %q, whose record the store refused: %v", e.step, e.refused)
	}
	return fmt.Sprintf("deduptest: worker crashed after the record of step %q, before the next step", e.step)
}

// Is makes a stepCrash match ErrCrashed and store.ErrLeaseLost.
func (e *stepCrash) Is(target error) bool {
	return target == ErrCrashed || target == store.ErrLeaseLost
}

// Unwrap returns the store's answer to the save, when it failed.
func (e *stepCrash) Unwrap() error { return e.refused }

// LoadSteps runs the wrapped store's LoadSteps through the faults of
// OpLoadSteps.
func (f *FaultStore) LoadSteps(ctx context.Context, req store.StepsRequest) ([]store.StepRecord, error) {
	ss, err := f.stepStore()
	if err != nil {
		return nil, err
	}
	ft := f.pick(OpLoadSteps, req.Key)
	if call, err := f.before(ctx, ft); !call {
		return nil, err
	}
	recs, err := ss.LoadSteps(ctx, req)
	if err = after(ft, err); err != nil {
		return nil, err
	}
	return recs, nil
}

// AcquireBatch runs Acquire for every request, each through the faults of
// OpAcquire; the items no fault stops go to the wrapped store's
// AcquireBatch when it has one.
func (f *FaultStore) AcquireBatch(ctx context.Context, reqs []store.AcquireRequest) []store.AcquireOutcome {
	out := make([]store.AcquireOutcome, len(reqs))
	fts, idx := f.batchFaults(ctx, OpAcquire, len(reqs), func(i int) string { return reqs[i].Key }, func(i int, err error) { out[i].Err = err })
	if b, ok := f.inner.(store.BatchStore); ok && len(idx) > 0 {
		sub := make([]store.AcquireRequest, len(idx))
		for j, i := range idx {
			sub[j] = reqs[i]
		}
		for j, o := range b.AcquireBatch(ctx, sub) {
			if o.Err = after(fts[idx[j]], o.Err); o.Err != nil {
				o.Claim = store.Claim{}
			}
			out[idx[j]] = o
		}
		return out
	}
	for _, i := range idx {
		c, err := f.inner.Acquire(ctx, reqs[i])
		if err = after(fts[i], err); err != nil {
			c = store.Claim{}
		}
		out[i] = store.AcquireOutcome{Claim: c, Err: err}
	}
	return out
}

// CompleteBatch runs Complete for every request, each through the faults
// of OpComplete.
func (f *FaultStore) CompleteBatch(ctx context.Context, reqs []store.CompleteRequest) []error {
	out := make([]error, len(reqs))
	fts, idx := f.batchFaults(ctx, OpComplete, len(reqs), func(i int) string { return reqs[i].Key }, func(i int, err error) { out[i] = err })
	if b, ok := f.inner.(store.BatchStore); ok && len(idx) > 0 {
		sub := make([]store.CompleteRequest, len(idx))
		for j, i := range idx {
			sub[j] = reqs[i]
		}
		for j, err := range b.CompleteBatch(ctx, sub) {
			out[idx[j]] = after(fts[idx[j]], err)
		}
		return out
	}
	for _, i := range idx {
		out[i] = after(fts[i], f.inner.Complete(ctx, reqs[i]))
	}
	return out
}

// ExtendBatch runs Extend for every request, each through the faults of
// OpExtend.
func (f *FaultStore) ExtendBatch(ctx context.Context, reqs []store.ExtendRequest) []error {
	out := make([]error, len(reqs))
	fts, idx := f.batchFaults(ctx, OpExtend, len(reqs), func(i int) string { return reqs[i].Key }, func(i int, err error) { out[i] = err })
	if b, ok := f.inner.(store.BatchStore); ok && len(idx) > 0 {
		sub := make([]store.ExtendRequest, len(idx))
		for j, i := range idx {
			sub[j] = reqs[i]
		}
		for j, err := range b.ExtendBatch(ctx, sub) {
			out[idx[j]] = after(fts[idx[j]], err)
		}
		return out
	}
	for _, i := range idx {
		out[i] = after(fts[i], f.inner.Extend(ctx, reqs[i]))
	}
	return out
}

// batchFaults picks the fault of each of n batch items and runs its first
// part; an item a fault stops gets its error through fail. It returns the
// faults by item and the items to call the store for.
func (f *FaultStore) batchFaults(ctx context.Context, op Op, n int, key func(int) string, fail func(int, error)) (fts []*Fault, pass []int) {
	fts = make([]*Fault, n)
	for i := range n {
		fts[i] = f.pick(op, key(i))
		if call, err := f.before(ctx, fts[i]); !call {
			fail(i, err)
			continue
		}
		pass = append(pass, i)
	}
	return fts, pass
}
