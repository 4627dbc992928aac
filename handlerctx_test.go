package dedup_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store"
)

// The handler's context is the receiver's own type, whose cancellable part
// is made only when asked for. These tests hold it to what a
// context.WithCancelCause of the caller's context carrying the claim would
// do, whether or not the handler ever asked for Done.

// TestHandlerContextEndsWhenHandlerReturns: a context the handler kept
// (for a goroutine it started) is done once the handler returned, whether
// the handler asked for Done or not.
func TestHandlerContextEndsWhenHandlerReturns(t *testing.T) {
	t.Parallel()
	for _, askDone := range []bool{false, true} {
		var kept context.Context
		var done <-chan struct{}
		rcv := newReceiver(t, newMemstore(t, clock.NewFake(epoch)), func(ctx context.Context, o order) (struct{}, error) {
			kept = ctx
			if askDone {
				done = ctx.Done()
			}
			require.NoError(t, ctx.Err(), "not done while the handler runs")
			return struct{}{}, nil
		}, nil)
		_, err := rcv.Handle(t.Context(), order{ID: "o-1"})
		require.NoError(t, err)
		require.ErrorIs(t, kept.Err(), context.Canceled, "askDone=%v", askDone)
		require.ErrorIs(t, context.Cause(kept), context.Canceled)
		testenv.Recv(t, kept.Done(), "the kept context to be done")
		if askDone {
			testenv.Recv(t, done, "the channel the handler asked for to be closed")
		}
	}
}

// TestHandlerContextFollowsCaller: the caller's cancellation (with its
// cause), values and deadline reach the handler, also through a context
// the handler derives, and when the handler asks only after the fact.
func TestHandlerContextFollowsCaller(t *testing.T) {
	t.Parallel()
	type valueKey struct{}
	shutdown := errors.New("shutting down")
	for _, mode := range []string{"err-only", "done", "derived"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			entered := make(chan struct{})
			proceed := make(chan struct{})
			var seenErr, seenCause error
			var seenValue any
			var seenDeadline time.Time
			rcv := newReceiver(t, newMemstore(t, clock.NewFake(epoch)), func(ctx context.Context, o order) (struct{}, error) {
				seenValue = ctx.Value(valueKey{})
				seenDeadline, _ = ctx.Deadline()
				if _, ok := store.ClaimFromContext(ctx); !ok {
					return struct{}{}, errors.New("no claim")
				}
				close(entered)
				switch mode {
				case "err-only": // never asks for Done
					<-proceed
				case "done":
					<-ctx.Done()
				case "derived":
					dctx, cancel := context.WithTimeout(ctx, time.Hour)
					defer cancel()
					<-dctx.Done()
					seenCause = context.Cause(dctx)
					return struct{}{}, dctx.Err()
				}
				seenErr, seenCause = ctx.Err(), context.Cause(ctx)
				return struct{}{}, ctx.Err()
			}, nil)

			deadline := time.Now().Add(time.Hour)
			parent, cancelDeadline := context.WithDeadline(context.WithValue(t.Context(), valueKey{}, "v"), deadline)
			defer cancelDeadline()
			ctx, cancel := context.WithCancelCause(parent)
			var wg sync.WaitGroup
			var err error
			wg.Go(func() { _, err = rcv.Handle(ctx, order{ID: "o-1"}) })
			testenv.Recv(t, entered, "the handler to start")
			cancel(shutdown)
			close(proceed)
			testenv.Wait(t, &wg, "Handle to return")

			require.ErrorIs(t, err, dedup.ErrCanceled)
			require.Equal(t, "v", seenValue)
			require.True(t, seenDeadline.Equal(deadline), "deadline %v, want %v", seenDeadline, deadline)
			require.ErrorIs(t, seenCause, shutdown)
			if mode != "derived" {
				require.ErrorIs(t, seenErr, context.Canceled)
			}
		})
	}
}

// TestHandlerContextString: printing the handler's context names it and
// its claim's key, and reads nothing unlocked (the race detector watches).
func TestHandlerContextString(t *testing.T) {
	t.Parallel()
	var printed string
	rcv := newReceiver(t, newMemstore(t, clock.NewFake(epoch)), func(ctx context.Context, o order) (struct{}, error) {
		printed = fmt.Sprint(ctx)
		return struct{}{}, nil
	}, nil)
	_, err := rcv.Handle(context.Background(), order{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, "context.Background.WithClaim(default:o-1)", printed)
}

// TestKeptHandlerContextsStayTheirOwn: the deliveries that follow reuse
// what a delivery no longer needs, never what its handler can still reach:
// a context kept past the handler's return goes on answering its own claim,
// done, however many deliveries ran since; so does a context derived from
// it after the return.
func TestKeptHandlerContextsStayTheirOwn(t *testing.T) {
	t.Parallel()
	type kept struct {
		ctx, derived context.Context
		token        store.Token
	}
	var all []kept
	rcv := newReceiver(t, newMemstore(t, clock.NewFake(epoch)), func(ctx context.Context, o order) (struct{}, error) {
		held, ok := store.ClaimFromContext(ctx)
		require.True(t, ok)
		all = append(all, kept{ctx: ctx, token: held.Token})
		return struct{}{}, nil
	}, &dedup.Config{Clock: clock.NewFake(epoch)})
	for i := range 64 {
		res, err := rcv.Handle(t.Context(), order{ID: "o-" + strconv.Itoa(i)})
		require.NoError(t, err)
		require.Equal(t, delivery.StatusProcessed, res.Status)
		derived, cancel := context.WithCancel(all[i].ctx)
		t.Cleanup(cancel)
		all[i].derived = derived
	}
	for i, k := range all {
		held, ok := store.ClaimFromContext(k.ctx)
		require.True(t, ok, "delivery %d", i)
		require.Equal(t, "default:o-"+strconv.Itoa(i), held.Key, "delivery %d's context answers its own claim", i)
		require.Equal(t, k.token, held.Token, "delivery %d", i)
		require.Equal(t, 1, held.Attempt, "delivery %d", i)
		require.ErrorIs(t, k.ctx.Err(), context.Canceled, "delivery %d's context is done", i)
		testenv.Recv(t, k.ctx.Done(), "a kept context to be done")
		testenv.Recv(t, k.derived.Done(), "a context derived after the return to be done")
		held, ok = store.ClaimFromContext(k.derived)
		require.True(t, ok)
		require.Equal(t, "default:o-"+strconv.Itoa(i), held.Key)
	}
}

// TestHandlerContextDoneRacingReturn: a goroutine the handler started asks
// for Done while the handler returns (after a delay that varies from one
// delivery to the next, so that some calls land while the handler's
// context ends); the channel it gets is closed, whichever comes first.
func TestHandlerContextDoneRacingReturn(t *testing.T) {
	t.Parallel()
	var asked sync.WaitGroup
	var mu sync.Mutex
	var dones []<-chan struct{}
	var spin atomic.Int64
	rcv := newReceiver(t, newMemstore(t, clock.NewFake(epoch)), func(ctx context.Context, o order) (struct{}, error) {
		ready := make(chan struct{})
		asked.Go(func() {
			close(ready)
			for range spin.Add(1) % 4096 {
				spin.Add(0)
			}
			d := ctx.Done()
			mu.Lock()
			dones = append(dones, d)
			mu.Unlock()
		})
		<-ready
		return struct{}{}, nil
	}, &dedup.Config{Clock: clock.NewFake(epoch)})
	for i := range 4000 {
		_, err := rcv.Handle(t.Context(), order{ID: "o-" + strconv.Itoa(i)})
		require.NoError(t, err)
	}
	testenv.Wait(t, &asked, "the goroutines to ask for Done")
	for _, d := range dones {
		testenv.Recv(t, d, "a Done asked for while the handler returned to be closed")
	}
}
