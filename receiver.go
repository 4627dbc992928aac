package dedup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"runtime/debug"
	"time"

	"golang.org/x/sync/singleflight"
)

// Handler does the work for one message and returns its result. The result
// is stored and replayed to duplicates; return an error to have the message
// retried, or Permanent(err) to have it dead-lettered.
type Handler[M, R any] func(ctx context.Context, msg M) (R, error)

// Receiver runs a Handler at most once per message key, in the sense of the
// package documentation: it claims the key in the Store, runs the handler
// under a lease that it extends while the handler works, stores the result,
// and answers duplicates with it.
//
// A Receiver is safe for concurrent use and holds no goroutine of its own.
type Receiver[M, R any] struct {
	store   Store
	peeker  Peeker
	batcher BatchStore
	key     KeyFunc[M]
	handler Handler[M, R]
	cfg     Config
	prefix  string // Namespace + ":"
	// fingerprints: whether M implements Fingerprinter, decided once so that
	// the hot path does not box every message into an interface.
	fingerprints fingerprintMode
	heartbeats   bool // M implements Heartbeater, or may (an interface type)
	zeroSize     bool // R carries no data: nothing to encode or decode
	nillable     bool // M can be nil (pointer, interface, map...)
	flight       singleflight.Group
	stats        stats
}

type fingerprintMode uint8

const (
	fingerprintNever fingerprintMode = iota
	fingerprintAlways
	fingerprintDynamic // M is an interface type: ask each message
)

// NewReceiver returns a Receiver that deduplicates messages by key in store
// and runs handler for the first delivery of each. cfg may be nil for the
// defaults; an invalid cfg is an error matching ErrInvalidConfig.
func NewReceiver[M, R any](store Store, key KeyFunc[M], handler Handler[M, R], cfg *Config) (*Receiver[M, R], error) {
	switch {
	case store == nil:
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
		store:    store,
		key:      key,
		handler:  handler,
		cfg:      c,
		prefix:   c.Namespace + ":",
		zeroSize: reflect.TypeFor[R]().Size() == 0,
	}
	r.peeker, _ = store.(Peeker)
	r.batcher, _ = store.(BatchStore)
	mt := reflect.TypeFor[M]()
	switch mt.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		r.nillable = true
	}
	switch {
	case mt.Kind() == reflect.Interface:
		r.fingerprints = fingerprintDynamic
	case mt.Implements(reflect.TypeFor[Fingerprinter]()):
		r.fingerprints = fingerprintAlways
	}
	r.heartbeats = mt.Kind() == reflect.Interface || mt.Implements(reflect.TypeFor[Heartbeater]())
	return r, nil
}

// Namespace returns the namespace of the receiver's keys.
func (r *Receiver[M, R]) Namespace() string { return r.cfg.Namespace }

// Retention returns how long the receiver's records are kept once
// completed or failed (Config.Retention). Adapters check it against the
// broker's redelivery horizon: a duplicate arriving after the record
// expired runs again.
func (r *Receiver[M, R]) Retention() time.Duration { return r.cfg.Retention }

// Policy returns the retry policy that Decide should apply to this
// receiver's results.
func (r *Receiver[M, R]) Policy() Policy {
	return Policy{MaxAttempts: r.cfg.MaxAttempts, Backoff: r.cfg.Backoff, StoreRetryDelay: r.cfg.StoreRetryDelay}
}

// Handle delivers one message. It returns:
//   - StatusProcessed with the handler's value, when this delivery ran it;
//   - StatusDuplicate with the first value, when the key was completed before
//     (or by a concurrent delivery in this process);
//   - StatusInFlight, when another delivery holds the key now;
//   - StatusBypassed, when the store is down and the receiver is fail-open;
//   - an error otherwise: the handler's (*HandlerError, wrapping a
//     *PanicError for a panic), ErrNoKey, ErrInvalidKey (also for a key func
//     that panicked), ErrUndecodable (a payload that cannot be
//     fingerprinted), ErrKeyReused, ErrAttemptsExhausted, or
//     ErrStoreUnavailable.
//
// A Done status may come with an error too (ErrResultNotStored,
// ErrLeaseLost, a store error on completion): the effect happened, so the
// delivery must still be acknowledged. Decide applies all of these rules.
//
// Deliveries of one key that arrive while another delivery of it runs in
// this process wait for that one and share its outcome (a duplicate when it
// succeeded); they do not give up when their own ctx is cancelled, but the
// wait is bounded by the first delivery's handler, which runs under ctx.
// A cancelled ctx never stops the recording of a handler that succeeded.
func (r *Receiver[M, R]) Handle(ctx context.Context, msg M) (Result[R], error) {
	id, err := r.idOf(msg)
	if err != nil {
		return Result[R]{}, err
	}
	if r.peeker != nil {
		if rec := r.peeker.Peek(r.prefix, id); rec != nil {
			return r.replay(msg, rec)
		}
	}
	key := r.prefix + id // the one allocation of a new message's key
	fp, err := r.fingerprintOf(msg)
	if err != nil {
		return Result[R]{Key: key}, err
	}
	leader := false
	v, _, shared := r.flight.Do(key, func() (any, error) {
		leader = true
		res, err := r.claimAndRun(ctx, key, fp, msg)
		return &flightOutcome[R]{res: res, err: err, fingerprint: fp}, nil
	})
	out := v.(*flightOutcome[R])
	if leader || !shared {
		return out.res, out.err
	}
	return r.follow(key, fp, out)
}

// flightOutcome is what the first of several concurrent deliveries of one
// key hands to the others.
type flightOutcome[R any] struct {
	res         Result[R]
	err         error
	fingerprint string
}

// follow turns the first delivery's outcome into this one's: a duplicate
// when the first one's effect happened, the same answer otherwise.
func (r *Receiver[M, R]) follow(key, fp string, out *flightOutcome[R]) (Result[R], error) {
	if fp != "" && out.fingerprint != "" && fp != out.fingerprint {
		return Result[R]{Key: key}, fmt.Errorf("%w: %q is being processed with another payload", ErrKeyReused, key)
	}
	res := out.res
	if res.Status.Done() {
		res.Status = StatusDuplicate
		r.stats.duplicates.Add(1)
		return res, nil
	}
	return res, out.err
}

// idOf returns the id of msg, validated.
func (r *Receiver[M, R]) idOf(msg M) (id string, err error) {
	if r.nillable && isNil(msg) {
		return "", fmt.Errorf("%w: the message is nil", ErrNoKey)
	}
	defer func() {
		// A key func that panics on one odd message must not crash-loop the
		// consumer: the message is poison like any other without a usable id.
		if p := recover(); p != nil {
			id, err = "", fmt.Errorf("%w: the key func panicked: %w", ErrInvalidKey, &PanicError{Value: p, Stack: debug.Stack()})
		}
	}()
	id, err = r.key(msg)
	if err != nil {
		if errors.Is(err, ErrNoKey) || errors.Is(err, ErrInvalidKey) {
			return "", err
		}
		return "", fmt.Errorf("%w: %w", ErrNoKey, err)
	}
	if err := ValidateID(id, r.cfg.MaxIDLength); err != nil {
		return "", err
	}
	return id, nil
}

func (r *Receiver[M, R]) fingerprintOf(msg M) (string, error) {
	if r.fingerprints == fingerprintNever {
		return "", nil
	}
	f, ok := any(msg).(Fingerprinter)
	if !ok {
		return "", nil
	}
	fp, err := f.Fingerprint()
	if err != nil {
		// The payload cannot be fingerprinted, so it cannot be checked
		// against the record: poison, not worth retrying.
		return "", fmt.Errorf("%w: fingerprint: %w", ErrUndecodable, err)
	}
	return fp, nil
}

// replay answers a delivery whose key is completed.
func (r *Receiver[M, R]) replay(msg M, rec *Record) (Result[R], error) {
	res := Result[R]{Status: StatusDuplicate, Key: rec.Key, Attempt: rec.Attempt}
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
		return res, fmt.Errorf("dedup: decode stored result of %q: %w", rec.Key, err)
	}
	return res, nil
}

// decode is apart from replay so that only a stored result that is really
// decoded pays for the value escaping to the codec.
func (r *Receiver[M, R]) decode(data []byte) (R, error) {
	var v R
	err := r.cfg.Codec.Unmarshal(data, &v)
	return v, err
}

// claimAndRun is one delivery through the store: claim, run, complete.
func (r *Receiver[M, R]) claimAndRun(ctx context.Context, key, fp string, msg M) (Result[R], error) {
	claim, err := r.store.Acquire(ctx, key, AcquireRequest{Lease: r.cfg.Lease, Fingerprint: fp})
	if err != nil {
		return r.acquireFailed(ctx, key, msg, err)
	}
	return r.afterClaim(ctx, key, msg, claim, nil, 0)
}

// acquireFailed handles an Acquire error: the caller's own fault, a reused
// key, or a store that is down (fail-open or fail-closed).
func (r *Receiver[M, R]) acquireFailed(ctx context.Context, key string, msg M, err error) (Result[R], error) {
	res := Result[R]{Key: key}
	switch {
	case errors.Is(err, ErrKeyReused), errors.Is(err, ErrInvalidKey), errors.Is(err, ErrInvalidConfig):
		// The store refused this request, not the service: running the
		// handler unprotected (fail-open) would be wrong.
		return res, err
	case ctx.Err() != nil:
		return res, fmt.Errorf("dedup: acquire %q: %w", key, context.Cause(ctx))
	}
	r.stats.storeErrors.Add(1)
	serr := storeError("acquire", key, err)
	if !r.cfg.FailOpen {
		r.cfg.Logger.WarnContext(ctx, "dedup: store unavailable, delivery refused (fail-closed)", slog.String("key", key), slog.Any("error", err))
		return res, serr
	}
	r.stats.bypassed.Add(1)
	r.cfg.Logger.WarnContext(ctx, "dedup: store unavailable, handler runs unprotected (fail-open)", slog.String("key", key), slog.Any("error", err))
	v, herr := r.call(ctx, msg)
	if herr != nil {
		r.stats.handlerErrors.Add(1)
		return res, &HandlerError{Key: key, Err: herr}
	}
	res.Status, res.Value = StatusBypassed, v
	return res, nil
}

// afterClaim acts on a Claim: replays, reports in flight, or runs the
// handler under the claim. hb, when not nil, already extends the lease (a
// batch's shared heartbeat).
func (r *Receiver[M, R]) afterClaim(ctx context.Context, key string, msg M, claim Claim, hb *heartbeat, hbIndex int) (Result[R], error) {
	rec := claim.Record
	if !claim.Acquired {
		if rec.State == StateCompleted {
			return r.replay(msg, &rec)
		}
		r.stats.inFlight.Add(1)
		wait := max(rec.LeaseUntil.Sub(r.cfg.Clock.Now()), 0)
		return Result[R]{Status: StatusInFlight, Key: key, Attempt: rec.Attempt, RetryAfter: wait}, nil
	}
	res := Result[R]{Key: key, Attempt: rec.Attempt}
	if rec.Attempt > r.cfg.MaxAttempts {
		// Workers crashed (or were dead-lettered and redriven) too often: do
		// not run the handler again. Recording the failure keeps the count.
		r.release(ctx, key, claim.Token, "attempts exhausted")
		if hb != nil {
			hb.finish(hbIndex)
		}
		return res, fmt.Errorf("%w: %q claimed %d times, limit %d (last error: %s)", ErrAttemptsExhausted, key, rec.Attempt, r.cfg.MaxAttempts, rec.LastError)
	}
	v, herr := r.runClaimed(ctx, key, claim.Token, msg, hb, hbIndex)
	if herr != nil {
		return r.handlerFailed(ctx, key, claim.Token, rec.Attempt, herr)
	}
	res.Status, res.Value = StatusProcessed, v
	data, encErr := r.encode(v)
	err := r.store.Complete(detach(ctx), key, claim.Token, data, r.cfg.Retention)
	return r.completed(ctx, res, encErr, err)
}

// handlerFailed releases a claim whose handler failed, so that the next
// delivery retries it, and reports the failure with its attempt.
func (r *Receiver[M, R]) handlerFailed(ctx context.Context, key string, token Token, attempt int, herr error) (Result[R], error) {
	r.stats.handlerErrors.Add(1)
	r.release(ctx, key, token, herr.Error())
	return Result[R]{Key: key, Attempt: attempt}, &HandlerError{Key: key, Attempt: attempt, Err: herr}
}

// completed reports a successful handler whose result was (or was not)
// stored. The status stays Processed whatever happened: the effect is done,
// and redelivering the message would repeat it.
func (r *Receiver[M, R]) completed(ctx context.Context, res Result[R], encErr, storeErr error) (Result[R], error) {
	r.stats.processed.Add(1)
	switch {
	case storeErr != nil && errors.Is(storeErr, ErrLeaseLost):
		r.stats.leaseLost.Add(1)
		r.cfg.Logger.WarnContext(ctx, "dedup: lease lost before completion; another delivery took the key over", slog.String("key", res.Key))
		return res, fmt.Errorf("dedup: complete %q: %w", res.Key, storeErr)
	case storeErr != nil:
		r.stats.resultsNotStored.Add(1)
		r.cfg.Logger.WarnContext(ctx, "dedup: handler succeeded but completion failed; a redelivery may run it again", slog.String("key", res.Key), slog.Any("error", storeErr))
		return res, storeError("complete", res.Key, storeErr)
	case encErr != nil:
		r.stats.resultsNotStored.Add(1)
		r.cfg.Logger.WarnContext(ctx, "dedup: result not stored; duplicates get the zero value", slog.String("key", res.Key), slog.Any("error", encErr))
		return res, encErr
	}
	return res, nil
}

// encode returns the bytes to store for v. When v cannot be stored, it
// returns nil bytes (the record completes without a result) and an error
// matching ErrResultNotStored.
func (r *Receiver[M, R]) encode(v R) ([]byte, error) {
	if r.zeroSize {
		return nil, nil
	}
	data, err := r.cfg.Codec.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w: encode: %w", ErrResultNotStored, err)
	}
	if len(data) > r.cfg.MaxResultSize {
		return nil, fmt.Errorf("%w: encoded result is %d bytes, over MaxResultSize %d", ErrResultNotStored, len(data), r.cfg.MaxResultSize)
	}
	return data, nil
}

// release records a failed attempt. An error is logged, not returned: the
// caller already reports the handler's error, and a claim that could not be
// released simply expires with its lease.
func (r *Receiver[M, R]) release(ctx context.Context, key string, token Token, why string) {
	err := r.store.Release(detach(ctx), key, token, Failure{Error: why, Retention: r.cfg.Retention})
	if err != nil {
		r.cfg.Logger.WarnContext(ctx, "dedup: release failed; the claim will expire with its lease", slog.String("key", key), slog.Any("error", err))
	}
}

// runClaimed runs the handler while a heartbeat extends the claim. When the
// lease is lost, the handler's context is cancelled with ErrLeaseLost as
// its cause.
func (r *Receiver[M, R]) runClaimed(ctx context.Context, key string, token Token, msg M, hb *heartbeat, idx int) (R, error) {
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if hb == nil {
		hb = r.newHeartbeat(ctx)
		defer hb.stop()
		idx = hb.add(key, token, r.beaterOf(msg))
		hb.start()
	} else {
		defer hb.finish(idx)
	}
	if !hb.running(idx, cancel) {
		var zero R
		return zero, fmt.Errorf("dedup: %q: %w before the handler started", key, ErrLeaseLost)
	}
	return r.call(hctx, msg)
}

// call runs the handler, turning a panic into a *PanicError so that one bad
// message cannot crash-loop the consumer.
func (r *Receiver[M, R]) call(ctx context.Context, msg M) (v R, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &PanicError{Value: p, Stack: debug.Stack()}
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

// beaterOf returns msg's Heartbeat method, if it has one. Other messages
// are not boxed into an interface to find out.
func (r *Receiver[M, R]) beaterOf(msg M) func(context.Context) error {
	if !r.heartbeats {
		return nil
	}
	if b, ok := any(msg).(Heartbeater); ok {
		return b.Heartbeat
	}
	return nil
}

// detach keeps a store write going when the caller's context is already
// cancelled: a handler that succeeded must still be recorded, or its
// redelivery would repeat the effect. The store's own timeouts bound it.
func detach(ctx context.Context) context.Context {
	if ctx.Err() != nil {
		return context.WithoutCancel(ctx)
	}
	return ctx
}
