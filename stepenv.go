package dedup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/store"
)

// This file holds what the steps of a receiver's handlers share: the store
// calls that read and write step records, bounded and retried.

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
