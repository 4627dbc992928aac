package dedup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"runtime/debug"
	"time"

	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/store"
)

// Handler does the work for one message and returns its result. The result
// is stored and replayed to duplicates; return an error to have the message
// retried, or Permanent(err) to have it dead-lettered.
//
// The claim the handler runs under is in its context (store.ClaimFromContext).
// The context is cancelled when the caller's is, with ErrLeaseLost as its
// cause when the claim's lease is lost, and once the handler returns (a
// goroutine the handler started must not outlive it on that context).
type Handler[M, R any] func(ctx context.Context, msg M) (R, error)

// Receiver runs a Handler once per message key, in the sense of the package
// documentation: it claims the key in the store, runs the handler under a
// lease that it extends while the handler works, stores the result, and
// answers duplicates with it.
//
// A Receiver is safe for concurrent use and holds no goroutine of its own.
type Receiver[M, R any] struct {
	store  store.Store
	peeker store.Peeker
	// selfBounded: the store never waits (store.InProcess), or bounds its
	// own calls within StoreTimeout (store.Bounded), so its completions
	// and releases need no timer of the receiver's.
	selfBounded bool
	batcher     store.BatchStore
	key         KeyFunc[M]
	handler     Handler[M, R]
	cfg         Config
	prefix      string // Namespace + ":"
	// fingerprints: whether M implements Fingerprinter, decided once so that
	// the hot path does not box every message into an interface.
	fingerprints fingerprintMode
	heartbeats   bool // M implements Heartbeater, or may (an interface type)
	zeroSize     bool // R carries no data: nothing to encode or decode
	nillable     bool // M can be nil (pointer, interface, map...)
	flight       flightGroup[R]
	injector     delivery.Injector // the Observer's, even a quiet one's
	storeName    string            // Event.Store
	waits        inFlightWaits
	lost         lostClaims
	beatCfg      beatConfig
	beats        *beatQueue // the heartbeats of single deliveries, until their first beat
	deliveries   deliveryPool[R]
	stats        stats
	steps        *stepEnv // nil without Config.Steps
	comps        map[string]Compensation
}

type fingerprintMode uint8

const (
	fingerprintNever fingerprintMode = iota
	fingerprintAlways
	fingerprintDynamic // M is an interface type: ask each message
)

// NewReceiver returns a Receiver that deduplicates messages by key in s and
// runs handler for the first delivery of each. cfg may be nil for the
// defaults. A nil (or typed-nil) store, key func or handler, or an invalid
// cfg, is an error matching ErrInvalidConfig.
func NewReceiver[M, R any](s store.Store, key KeyFunc[M], handler Handler[M, R], cfg *Config) (*Receiver[M, R], error) {
	switch {
	case isNilInterface(s):
		return nil, fmt.Errorf("%w: store is nil", ErrInvalidConfig)
	case key == nil:
		return nil, fmt.Errorf("%w: key func is nil", ErrInvalidConfig)
	case handler == nil:
		return nil, fmt.Errorf("%w: handler is nil", ErrInvalidConfig)
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	r := &Receiver[M, R]{
		store:    s,
		key:      key,
		handler:  handler,
		cfg:      c,
		prefix:   c.Namespace + ":",
		zeroSize: reflect.TypeFor[R]().Size() == 0,
	}
	r.injector, _ = c.Observer.(delivery.Injector)
	r.storeName = storeName(s)
	if q, ok := c.Observer.(delivery.Quiet); ok && q.Quiet() {
		r.cfg.Observer = nil // records nothing: not worth a delivery's time
	}
	if c.Steps {
		r.comps = compensationsOf(c.Compensations)
		if err := checkCompensations[M](r.comps); err != nil {
			return nil, err
		}
		ss, err := stepStoreOf(s)
		if err != nil {
			return nil, err
		}
		r.steps = &stepEnv{store: ss, codec: c.Codec, maxSize: c.MaxResultSize, retention: c.Retention, lease: c.Lease,
			timeout: c.StoreTimeout, clock: c.Clock, logger: c.Logger, stats: &r.stats}
	}
	r.peeker, _ = s.(store.Peeker)
	r.selfBounded = boundsItself(s, c.StoreTimeout)
	if r.steps != nil {
		r.steps.selfBounded = r.selfBounded
		ip, ok := s.(store.InProcess)
		r.steps.inProcess = ok && ip.InProcess()
	}
	r.batcher, _ = s.(store.BatchStore)
	r.beatCfg = beatConfig{
		store:    s,
		batcher:  r.batcher,
		clock:    c.Clock,
		lease:    c.Lease,
		interval: c.Lease / 3,
		margin:   c.Lease / 10,
		logger:   c.Logger,
	}
	r.beats = newBeatQueue(c.Clock, r.beatCfg.interval)
	r.flight.init()
	mt := reflect.TypeFor[M]()
	switch mt.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		r.nillable = true
	}
	switch {
	case mt.Kind() == reflect.Interface:
		r.fingerprints = fingerprintDynamic
	case mt.Implements(reflect.TypeFor[fingerprinter]()):
		r.fingerprints = fingerprintAlways
	}
	r.heartbeats = mt.Kind() == reflect.Interface || mt.Implements(reflect.TypeFor[heartbeater]())
	return r, nil
}

// boundsItself reports whether every completion and release of s returns
// within limit without a deadline of the receiver's: s never waits, or
// bounds its calls within limit itself.
func boundsItself(s store.Store, limit time.Duration) bool {
	if ip, ok := s.(store.InProcess); ok && ip.InProcess() {
		return true
	}
	b, ok := s.(store.Bounded)
	if !ok {
		return false
	}
	d := b.CallTimeout()
	return d > 0 && d <= limit
}

// Namespace returns the namespace of the receiver's keys.
func (r *Receiver[M, R]) Namespace() string { return r.cfg.Namespace }

// Retention returns how long the receiver's records are kept once
// completed or failed (Config.Retention). Adapters check it against the
// broker's redelivery horizon: a duplicate arriving after the record
// expired runs again.
func (r *Receiver[M, R]) Retention() time.Duration { return r.cfg.Retention }

// Handle delivers one message. It returns:
//   - StatusProcessed with the handler's value, when this delivery ran it;
//   - StatusDuplicate with the first value, when the key was completed before
//     (or by a concurrent delivery in this process);
//   - StatusInFlight, when another delivery holds the key now (or, with
//     Config.NoWait, is handling it in this process; or the handler that
//     holds the key calls Handle for it again);
//   - StatusBypassed, when the store is down and the receiver is fail-open;
//   - an error otherwise: the handler's (*HandlerError, wrapping a
//     *PanicError for a panic), ErrNoKey, ErrInvalidKey (also for a key func
//     that panicked), ErrUndecodable (a payload that cannot be
//     fingerprinted), ErrKeyReused, ErrAttemptsExhausted,
//     ErrStoreUnavailable, or ErrCanceled when ctx ended first.
//
// A done status (processed, duplicate, bypassed) never comes with an
// error: what went wrong beside it is Result.Problem. Decide applies all of
// these rules.
//
// Deliveries of one key that arrive while another delivery of it runs in
// this process wait for that one and share its outcome (a duplicate when it
// succeeded), unless their own ctx ends first or Config.NoWait is set. A cancelled ctx never stops
// the recording of a handler that succeeded.
func (r *Receiver[M, R]) Handle(ctx context.Context, msg M) (Result[R], error) {
	if r.cfg.Observer != nil {
		return r.handleObserved(ctx, msg)
	}
	if r.peeker == nil {
		return r.handle(ctx, msg, nil)
	}
	// handle's first steps, here so that a duplicate is answered in as few
	// calls as it can be: each frame a Result is copied through costs.
	id, err := r.idOf(msg)
	if err != nil {
		return Result[R]{}, err
	}
	if rec := r.peeker.Peek(r.prefix, id); rec != nil {
		if (r.fingerprints == fingerprintNever || rec.Fingerprint == "") && (r.zeroSize || len(rec.Result) == 0) {
			// replay with nothing to check or decode.
			r.stats.duplicates.Add(1)
			return Result[R]{Status: delivery.StatusDuplicate, Key: rec.Key, Attempt: rec.Attempt}, nil
		}
		return r.replay(ctx, msg, rec)
	}
	return r.handleUnknown(ctx, msg, id, nil)
}

// handle is Handle, timed by tm when it is not nil.
func (r *Receiver[M, R]) handle(ctx context.Context, msg M, tm *timing) (Result[R], error) {
	id, err := r.idOf(msg)
	if err != nil {
		return Result[R]{}, err
	}
	if r.peeker != nil {
		if rec := r.peeker.Peek(r.prefix, id); rec != nil {
			return r.replay(ctx, msg, rec)
		}
	}
	return r.handleUnknown(ctx, msg, id, tm)
}

// handleUnknown handles msg, of id, which the store's Peek (when it has
// one) did not find completed: it joins the key's flight, or claims it.
func (r *Receiver[M, R]) handleUnknown(ctx context.Context, msg M, id string, tm *timing) (Result[R], error) {
	// A completed record's id was checked when it was claimed: UTF-8 is
	// checked only for an id the store does not know.
	if err := validateUTF8(id); err != nil {
		return Result[R]{}, err
	}
	key := r.prefix + id // the one allocation of a new message's key
	fp, err := r.fingerprintOf(msg)
	if err != nil {
		return Result[R]{Key: key}, err
	}
	d := r.deliveries.get()
	if r.cfg.NoWait {
		// Answer at once: ask the store rather than join the key's flight.
		// The store never makes a delivery wait (a key held anywhere is in
		// flight), and a key that completed is replayed, where joining would
		// refuse it as in flight while another delivery of this process
		// reads the same record.
		res, err := r.claimAndRun(ctx, key, fp, msg, tm, d)
		r.recycle(d, true)
		return res, err
	}
	call, leader := r.flight.join(key, &d.call)
	if !leader {
		r.recycle(d, true)
		return r.follow(ctx, key, fp, msg, call, tm)
	}
	call.fingerprint = fp
	ended := false
	defer func() {
		if !ended { // the handling panicked past every recover: d is not recycled
			r.flight.end(call, Result[R]{Key: key}, errFlightAbandoned)
		}
	}()
	res, err := r.claimAndRun(ctx, key, fp, msg, tm, d)
	alone := r.flight.end(call, res, err)
	ended = true
	r.recycle(d, alone)
	return res, err
}

// recycle returns d, which its delivery is done with, to the pool when
// nothing else can reach it: no other delivery joined its flight (alone)
// and its heartbeat never left the receiver's queue for a timer. Anything
// else lets it go to the collector, as it would without a pool: another
// delivery may still read its flight's outcome, a timer that fired may
// still find its heartbeat stopped.
func (r *Receiver[M, R]) recycle(d *runState[R], alone bool) {
	if alone && !d.hb.timed {
		r.deliveries.put(d)
	}
}

// follow answers a delivery of a key that another delivery in this process
// is handling: in flight at once when a handler calls Handle for its own
// key (it would wait on itself forever), else the first delivery's outcome
// once it is known.
func (r *Receiver[M, R]) follow(ctx context.Context, key, fp string, msg M, call *flightCall[R], tm *timing) (Result[R], error) {
	if handlingKey(ctx, key) {
		// The first delivery's lease bounds how long it may hold the key.
		r.stats.inFlight.Add(1)
		return Result[R]{Status: delivery.StatusInFlight, Key: key, RetryAfter: r.cfg.Lease}, nil
	}
	call.waiters.Add(1)
	defer call.waiters.Add(-1)
	select {
	case <-r.flight.wait(call):
	case <-ctx.Done():
		return Result[R]{Key: key}, fmt.Errorf("%w: waiting for another delivery of %q: %w", ErrCanceled, key, context.Cause(ctx))
	}
	return r.share(ctx, key, fp, msg, call.fingerprint, call.res, call.err, tm)
}

// share turns the outcome of the first delivery of key in this process
// (res, err, with fingerprint firstFP) into this delivery's: a duplicate
// when the first one's effect happened, the same answer otherwise.
func (r *Receiver[M, R]) share(ctx context.Context, key, fp string, msg M, firstFP string, res Result[R], err error, tm *timing) (Result[R], error) {
	if fp != "" && firstFP != "" && fp != firstFP {
		return Result[R]{Key: key}, fmt.Errorf("%w: %q is being processed with another payload", ErrKeyReused, key)
	}
	switch {
	case res.Status.Done() && errors.Is(res.Problem, ErrLeaseLost):
		// The first delivery's claim was taken over: its value is not the
		// record's. Ask the store, which has the newer outcome or holder.
		return r.handle(ctx, msg, tm)
	case res.Status.Done():
		res.Status, res.Problem = delivery.StatusDuplicate, nil
		r.stats.duplicates.Add(1)
		return res, nil
	}
	return res, err
}

// handlingKey reports whether ctx is a handler's context holding key: a
// handler that calls Handle for the message it is handling.
func handlingKey(ctx context.Context, key string) bool {
	h, ok := store.ClaimFromContext(ctx)
	return ok && h.Key == key
}

// idOf returns the id of msg, checked for presence and length; Handle
// checks that it is UTF-8 only when the store does not know it (see
// checkID for the whole check).
func (r *Receiver[M, R]) idOf(msg M) (id string, err error) {
	if r.nillable && isNil(msg) {
		return "", fmt.Errorf("%w: the message is nil", ErrNoKey)
	}
	returned := false
	defer func() {
		// A key func that panics on one odd message must not crash-loop the
		// consumer: the message is poison like any other without a usable id.
		// recover is asked only when the key func did not return.
		if !returned {
			id, err = "", fmt.Errorf("%w: %w", ErrInvalidKey, &PanicError{Func: "key func", Value: recover(), Stack: debug.Stack()})
		}
	}()
	id, err = r.key(msg)
	returned = true
	if err != nil {
		if errors.Is(err, ErrNoKey) || errors.Is(err, ErrInvalidKey) {
			return "", err
		}
		return "", fmt.Errorf("%w: %w", ErrNoKey, err)
	}
	if err := validateLength(id, r.cfg.MaxIDLength); err != nil {
		return "", err
	}
	return id, nil
}

// checkID is idOf with the UTF-8 check: the whole validation, for the
// paths that do not look the id up first.
func (r *Receiver[M, R]) checkID(msg M) (string, error) {
	id, err := r.idOf(msg)
	if err != nil {
		return "", err
	}
	return id, validateUTF8(id)
}

// fingerprintOf returns msg's fingerprint, or "" when it has none. A
// Fingerprint method that fails or panics makes the payload undecodable:
// it cannot be checked against the record, so it is poison.
func (r *Receiver[M, R]) fingerprintOf(msg M) (fp string, err error) {
	if r.fingerprints == fingerprintNever {
		return "", nil
	}
	f, ok := any(msg).(fingerprinter)
	if !ok {
		return "", nil
	}
	defer func() {
		if p := recover(); p != nil {
			fp, err = "", fmt.Errorf("%w: %w", ErrUndecodable, &PanicError{Func: "Fingerprint", Value: p, Stack: debug.Stack()})
		}
	}()
	if fp, err = f.Fingerprint(); err != nil {
		return "", fmt.Errorf("%w: fingerprint: %w", ErrUndecodable, err)
	}
	return fp, nil
}

// replay answers a delivery whose key is completed.
func (r *Receiver[M, R]) replay(ctx context.Context, msg M, rec *store.Record) (Result[R], error) {
	res := Result[R]{Status: delivery.StatusDuplicate, Key: rec.Key, Attempt: rec.Attempt}
	if r.fingerprints != fingerprintNever && rec.Fingerprint != "" {
		fp, err := r.fingerprintOf(msg)
		if err != nil {
			return Result[R]{Key: rec.Key}, err
		}
		if fp != "" && fp != rec.Fingerprint {
			return Result[R]{Key: rec.Key}, fmt.Errorf("%w: %q was completed with another payload", ErrKeyReused, rec.Key)
		}
	}
	r.stats.duplicates.Add(1)
	if r.zeroSize || len(rec.Result) == 0 {
		return res, nil
	}
	var err error
	if res.Value, err = r.decode(rec.Result); err != nil {
		// The effect happened: the status stays Duplicate so the delivery is
		// acknowledged, but the caller learns that the value is missing.
		r.stats.resultsUndecodable.Add(1)
		res.Problem = fmt.Errorf("%w: %q: %w", ErrResultUndecodable, rec.Key, err)
		r.cfg.Logger.WarnContext(ctx, "dedup: stored result cannot be decoded; the duplicate gets the zero value",
			slog.String("key", rec.Key), slog.Any("error", err))
	}
	return res, nil
}

// decode is apart from replay so that only a stored result that is really
// decoded pays for the value escaping to the codec. A panicking codec is an
// error like any other.
func (r *Receiver[M, R]) decode(data []byte) (v R, err error) {
	defer func() {
		if p := recover(); p != nil {
			var zero R
			v, err = zero, &PanicError{Func: "codec Unmarshal", Value: p, Stack: debug.Stack()}
		}
	}()
	err = r.cfg.Codec.Unmarshal(data, &v)
	return v, err
}

// claimAndRun is one delivery through the store: claim, run, complete. d
// holds the delivery's flight, which waiting duplicates read.
func (r *Receiver[M, R]) claimAndRun(ctx context.Context, key, fp string, msg M, tm *timing, d *runState[R]) (Result[R], error) {
	if ctx.Err() != nil {
		return Result[R]{Key: key}, fmt.Errorf("%w: before claiming %q: %w", ErrCanceled, key, context.Cause(ctx))
	}
	t := tm.start()
	sent := r.cfg.Clock.Now()
	token := r.lost.take(key, sent)
	claim, err := r.store.Acquire(ctx, store.AcquireRequest{Key: key, Lease: r.cfg.Lease, Fingerprint: fp, Token: token})
	tm.addClaim(t)
	r.lost.settle(key, token, err, sent, r.cfg.Lease)
	if err == nil {
		err = r.checkClaim(key, &claim, sent)
	}
	if err != nil {
		return r.acquireFailed(ctx, key, msg, err, tm)
	}
	return r.afterClaim(ctx, key, msg, &claim, sent, tm, d)
}

// checkClaim refuses an answer of Acquire, sent at sent (local clock), that
// breaks the contract, so that a misbehaving store is retried after
// StoreRetryDelay rather than in a hot loop. A refusal by a lease that was
// live when the Acquire was sent is in flight, even when the lease has ended
// by the time the answer arrives: the store judged it at its own moment, and
// a lease ends while the answer travels (the delivery is then retried after
// the adapter's shortest delay).
func (r *Receiver[M, R]) checkClaim(key string, c *store.Claim, sent time.Time) error {
	var why string
	switch {
	case c.Acquired && c.Token.IsZero():
		why = "an acquired claim with a zero token"
	case c.Acquired:
		return nil
	case c.Record.State == store.StateCompleted:
		return nil
	case c.Record.State != store.StateProcessing:
		why = fmt.Sprintf("a refused claim on a record in state %d", c.Record.State)
	case !c.Record.LeaseUntil.After(sent):
		why = fmt.Sprintf("a refused claim whose lease ended at %v, before it was asked", c.Record.LeaseUntil)
	default:
		return nil
	}
	return &store.OpError{Op: "acquire", Key: key, Err: errors.New("the store answered " + why)}
}

// acquireFailed handles an Acquire error: the caller's own fault, a reused
// key, or a store that is down (fail-open or fail-closed).
func (r *Receiver[M, R]) acquireFailed(ctx context.Context, key string, msg M, err error, tm *timing) (Result[R], error) {
	res := Result[R]{Key: key}
	switch {
	case errors.Is(err, ErrKeyReused), errors.Is(err, ErrInvalidKey):
		// The store refused this request, not the service: running the
		// handler unprotected (fail-open) would be wrong.
		return res, err
	case errors.Is(err, ErrInvalidConfig):
		// The store cannot serve any request until an operator fixes it (a
		// table or a right missing): not an outage to run unprotected
		// through, and worth an error line at every refusal.
		r.stats.storeErrors.Add(1)
		r.cfg.Logger.ErrorContext(ctx, "dedup: store misconfigured, delivery refused", slog.String("key", key), slog.Any("error", err))
		return res, err
	case ctx.Err() != nil:
		return res, fmt.Errorf("%w: acquire %q: %w", ErrCanceled, key, context.Cause(ctx))
	}
	r.stats.storeErrors.Add(1)
	serr := storeError("acquire", key, err)
	if !r.cfg.FailOpen {
		r.cfg.Logger.WarnContext(ctx, "dedup: store unavailable, delivery refused (fail-closed)", slog.String("key", key), slog.Any("error", err))
		return res, serr
	}
	r.stats.bypassed.Add(1)
	r.cfg.Logger.WarnContext(ctx, "dedup: store unavailable, handler runs unprotected (fail-open)", slog.String("key", key), slog.Any("error", err))
	t := tm.start()
	v, herr := r.call(ctx, msg)
	tm.addHandler(t)
	if herr != nil {
		r.stats.handlerErrors.Add(1)
		if ctx.Err() != nil {
			return res, fmt.Errorf("%w: %w", ErrCanceled, &HandlerError{Key: key, Err: herr})
		}
		return res, &HandlerError{Key: key, Err: herr}
	}
	res.Status, res.Value = delivery.StatusBypassed, v
	return res, nil
}

// afterClaim acts on a Claim made at sent (local clock): replays, reports
// in flight, or runs the handler under the claim, with a heartbeat of its
// own that extends the lease until the completion is recorded.
func (r *Receiver[M, R]) afterClaim(ctx context.Context, key string, msg M, claim *store.Claim, sent time.Time, tm *timing, d *runState[R]) (Result[R], error) {
	resume := claim.Acquired && claim.Record.Attempt > 1 && r.compensates()
	if resume {
		r.waits.forget(key) // claimed: its looks in a row end here, as notClaimed's do
	} else if res, err, ok := r.notClaimed(ctx, key, msg, claim); ok {
		return res, err
	}
	hb := r.initHeartbeat(ctx, &d.hb)
	idx := hb.add(key, claim.Token, r.beaterOf(msg), sent)
	hb.startQueued(r.beats)
	defer hb.stop()
	hctx := new(handlerContext)
	hctx.init(ctx, key, claim.Token, claim.Record.Attempt, r.cfg.Retention)
	hctx.steps = r.steps
	if resume {
		if res, err, ok := r.resumeGiveUp(ctx, hctx, msg, claim, hb, idx); ok {
			return res, err
		}
	}
	return r.runHeld(ctx, key, msg, claim.Token, claim.Record.Attempt, hctx, &d.call, hb, idx, tm)
}

// notClaimed answers a claim the caller cannot run the handler under: the
// key completed (a duplicate), held elsewhere (in flight), or claimed past
// MaxAttempts. It reports false for a claim to run.
func (r *Receiver[M, R]) notClaimed(ctx context.Context, key string, msg M, claim *store.Claim) (Result[R], error, bool) {
	rec := &claim.Record
	switch {
	case !claim.Acquired && rec.State == store.StateCompleted:
		r.waits.forget(key)
		res, err := r.replay(ctx, msg, rec)
		return res, err, true
	case !claim.Acquired:
		r.stats.inFlight.Add(1)
		now := r.cfg.Clock.Now()
		wait := r.waits.next(key, now, max(rec.LeaseUntil.Sub(now), 0), rec.Attempt)
		return Result[R]{Status: delivery.StatusInFlight, Key: key, Attempt: rec.Attempt, RetryAfter: wait}, nil, true
	case rec.Attempt > r.cfg.MaxAttempts:
		// Workers crashed (or were dead-lettered and redriven) too often: do
		// not run the handler again. Recording the failure keeps the count.
		r.release(ctx, key, claim.Token, "attempts exhausted")
		return Result[R]{Key: key, Attempt: rec.Attempt},
			fmt.Errorf("%w: %q claimed %d times, limit %d (last error: %s)", ErrAttemptsExhausted, key, rec.Attempt, r.cfg.MaxAttempts, rec.LastError), true
	}
	r.waits.forget(key)
	return Result[R]{}, nil, false
}

// runHeld runs the handler under hctx, holding an acquired claim that hb
// (entry idx) extends, and records the outcome: a failure is released, a
// success completed (retried while the lease holds, with the result
// published to call meanwhile). A released claim is extended no more; the
// caller stops hb once this returns, which ends the extensions of a
// completed one.
func (r *Receiver[M, R]) runHeld(ctx context.Context, key string, msg M, token store.Token, attempt int, hctx *handlerContext, call *flightCall[R], hb *heartbeat, idx int, tm *timing) (Result[R], error) {
	v, herr := r.runClaimed(hctx, msg, hb, idx, tm)
	if herr != nil {
		if r.compensates() {
			if res, err, ok := r.failedGivingUp(ctx, hctx, msg, herr, hb, idx); ok {
				return res, err
			}
		}
		hb.finish(idx) // no extension of a released claim
		return r.handlerFailed(ctx, key, token, attempt, herr)
	}
	res := Result[R]{Status: delivery.StatusProcessed, Key: key, Attempt: attempt, Value: v}
	data, encErr := r.encode(v)
	var storeErr error
	if !hctx.held.Completed() {
		t := tm.start()
		storeErr = r.completeHeld(hctx.callerDetached(), store.CompleteRequest{Key: key, Token: token, Result: data, Retention: r.cfg.Retention}, hb, idx, call, &res)
		tm.addComplete(t)
	}
	r.completed(ctx, &res, encErr, storeErr)
	return res, nil
}

// completeHeld records a success, retrying a completion that failed for
// want of the store (with backoff) while the lease it holds lasts on the
// local clock; the heartbeat keeps extending the lease meanwhile when it
// can. Before the first retry, res is published to call (when not nil), so
// that in-process duplicates are answered with the result held. It gives
// up when the lease is lost or ends unconfirmed, and returns the last
// error. dctx is the caller's context without its cancellation (a shutdown
// must not lose a success whose redelivery would repeat the effect).
func (r *Receiver[M, R]) completeHeld(dctx context.Context, req store.CompleteRequest, hb *heartbeat, idx int, call *flightCall[R], res *Result[R]) error {
	var delay time.Duration
	for retry := 0; ; retry++ {
		err := r.complete(dctx, req)
		if err == nil || errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrInvalidKey) || errors.Is(err, ErrInvalidConfig) {
			return err
		}
		end, ok := hb.holds(idx)
		if !ok {
			return fmt.Errorf("%w (gave up after %d retries: the lease ended)", err, retry)
		}
		if retry == 0 {
			delay = max(r.cfg.Lease/100, time.Millisecond)
			if call != nil {
				r.flight.publish(call, *res, nil)
			}
			r.cfg.Logger.WarnContext(dctx, "dedup: completion failed; retrying while the lease holds",
				slog.String("key", req.Key), slog.Any("error", err))
		}
		sleep(r.cfg.Clock, min(delay, end.Sub(r.cfg.Clock.Now())))
		delay = min(delay*2, r.cfg.Lease/3)
	}
}

// sleep waits d on clk.
func sleep(clk clock.Clock, d time.Duration) {
	if d <= 0 {
		return
	}
	wake := make(chan struct{})
	clk.AfterFunc(d, func() { close(wake) })
	<-wake
}

// complete records a success under dctx, which the caller's cancellation
// does not reach, bounded by StoreTimeout.
func (r *Receiver[M, R]) complete(dctx context.Context, req store.CompleteRequest) error {
	if r.selfBounded {
		return r.store.Complete(dctx, req)
	}
	cctx, cancel := context.WithTimeout(dctx, r.cfg.StoreTimeout)
	defer cancel()
	return r.store.Complete(cctx, req)
}

// detached returns ctx without its cancellation, keeping its values. A
// context that can never be cancelled is returned as it is.
func detached(ctx context.Context) context.Context {
	if ctx.Done() == nil {
		return ctx
	}
	return context.WithoutCancel(ctx)
}

// handlerFailed releases a claim whose handler failed, so that the next
// delivery retries it, and reports the failure with its attempt. A failure
// while the caller's context ended is a shutdown: ErrCanceled.
func (r *Receiver[M, R]) handlerFailed(ctx context.Context, key string, token store.Token, attempt int, herr error) (Result[R], error) {
	if !errors.Is(herr, ErrLeaseLost) { // a lost claim is another delivery's now
		r.release(ctx, key, token, herr.Error())
	}
	if errors.Is(herr, ErrStoreUnavailable) {
		// The store broke inside the handler (the handler's own transaction
		// of a store that completes in it): the store's failure, not the
		// handler's.
		r.stats.storeErrors.Add(1)
		return Result[R]{Key: key, Attempt: attempt}, fmt.Errorf("dedup: %q: the store failed inside the handler: %w", key, herr)
	}
	r.stats.handlerErrors.Add(1)
	err := error(&HandlerError{Key: key, Attempt: attempt, Err: herr})
	if ctx.Err() != nil {
		err = fmt.Errorf("%w: %w", ErrCanceled, err)
	}
	return Result[R]{Key: key, Attempt: attempt}, err
}

// completed reports, in res, a successful handler whose result was (or
// was not) stored. The status stays Processed whatever happened: the
// effect is done, and redelivering the message would repeat it. What went
// wrong is the Result's Problem.
func (r *Receiver[M, R]) completed(ctx context.Context, res *Result[R], encErr, storeErr error) {
	r.stats.processed.Add(1)
	switch {
	case storeErr != nil && errors.Is(storeErr, ErrLeaseLost):
		r.stats.leaseLost.Add(1)
		r.cfg.Logger.WarnContext(ctx, "dedup: lease lost before completion; another delivery took the key over", slog.String("key", res.Key))
		res.Problem = fmt.Errorf("dedup: complete %q: %w", res.Key, storeErr)
	case storeErr != nil:
		r.stats.resultsNotStored.Add(1)
		r.cfg.Logger.ErrorContext(ctx, "dedup: handler succeeded but completion failed; a redelivery may run it again", slog.String("key", res.Key), slog.Any("error", storeErr))
		res.Problem = fmt.Errorf("%w: %w", ErrResultNotStored, storeError("complete", res.Key, storeErr))
	case encErr != nil:
		r.stats.resultsNotStored.Add(1)
		r.cfg.Logger.WarnContext(ctx, "dedup: result not stored; duplicates get the zero value", slog.String("key", res.Key), slog.Any("error", encErr))
		res.Problem = encErr
	}
}

// encode returns the bytes to store for v. When v cannot be stored (an
// error or a panic of the codec, or a result over MaxResultSize), it
// returns nil bytes (the record completes without a result) and an error
// matching ErrResultNotStored.
func (r *Receiver[M, R]) encode(v R) (data []byte, err error) {
	if r.zeroSize {
		return nil, nil
	}
	defer func() {
		if p := recover(); p != nil {
			data, err = nil, fmt.Errorf("%w: encode: %w", ErrResultNotStored, &PanicError{Func: "codec Marshal", Value: p, Stack: debug.Stack()})
		}
	}()
	data, err = r.cfg.Codec.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w: encode: %w", ErrResultNotStored, err)
	}
	if len(data) > r.cfg.MaxResultSize {
		return nil, fmt.Errorf("%w: encoded result is %d bytes, over MaxResultSize %d", ErrResultNotStored, len(data), r.cfg.MaxResultSize)
	}
	return data, nil
}

// release records a failed attempt, detached from the caller's
// cancellation and bounded by StoreTimeout. An error is logged, not
// returned: the caller already reports the handler's error, and a claim
// that could not be released simply expires with its lease.
func (r *Receiver[M, R]) release(ctx context.Context, key string, token store.Token, why string) {
	rctx := detached(ctx)
	if !r.selfBounded {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(rctx, r.cfg.StoreTimeout)
		defer cancel()
	}
	err := r.store.Release(rctx, store.ReleaseRequest{Key: key, Token: token, Error: why, Retention: r.cfg.Retention})
	if err != nil {
		r.cfg.Logger.WarnContext(ctx, "dedup: release failed; the claim will expire with its lease", slog.String("key", key), slog.Any("error", err))
	}
}

// runClaimed runs the handler under hctx while hb extends its claim
// (entry idx). When the lease is lost, hctx is cancelled with ErrLeaseLost
// as its cause, and the handler's error then matches ErrLeaseLost too.
// hctx ends when the handler returns.
func (r *Receiver[M, R]) runClaimed(hctx *handlerContext, msg M, hb *heartbeat, idx int, tm *timing) (R, error) {
	defer hctx.end()
	if !hb.running(idx, hctx) {
		var zero R
		return zero, fmt.Errorf("dedup: %q: %w before the handler started", hctx.held.Key, ErrLeaseLost)
	}
	t := tm.start()
	v, err := r.call(hctx, msg)
	tm.addHandler(t)
	if err != nil && errors.Is(context.Cause(hctx), ErrLeaseLost) {
		err = fmt.Errorf("%w: %w", ErrLeaseLost, err)
	}
	return v, err
}

// call runs the handler, turning a panic into a *PanicError so that one bad
// message cannot crash-loop the consumer.
func (r *Receiver[M, R]) call(ctx context.Context, msg M) (v R, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &PanicError{Func: "handler", Value: p, Stack: debug.Stack()}
		}
	}()
	return r.handler(ctx, msg)
}

// isNil reports whether msg is a nil pointer, interface, map, slice, func
// or channel.
func isNil[M any](msg M) bool {
	v := reflect.ValueOf(any(msg))
	return !v.IsValid() || v.IsNil()
}

// beaterOf returns msg as a heartbeater, if it is one (nil otherwise):
// an interface holding a pointer message costs no allocation, where its
// method value would.
func (r *Receiver[M, R]) beaterOf(msg M) heartbeater {
	if !r.heartbeats {
		return nil
	}
	if b, ok := any(msg).(heartbeater); ok {
		return b
	}
	return nil
}
