package dedup_test

import (
	"context"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/store"
)

// answerLosingStore wraps a store: its next lose claims are written, and
// then their answer is lost, as a connection reset or a failover after the
// write loses it.
type answerLosingStore struct {
	store.BatchStore
	lose atomic.Int64
}

func (s *answerLosingStore) lost(c store.Claim, req store.AcquireRequest) (store.Claim, error) {
	if c.Acquired && s.lose.Load() > 0 {
		s.lose.Add(-1)
		return store.Claim{}, &store.OpError{Op: "acquire", Key: req.Key, Err: syscall.ECONNRESET}
	}
	return c, nil
}

func (s *answerLosingStore) Acquire(ctx context.Context, req store.AcquireRequest) (store.Claim, error) {
	c, err := s.BatchStore.Acquire(ctx, req)
	if err != nil {
		return c, err
	}
	return s.lost(c, req)
}

func (s *answerLosingStore) AcquireBatch(ctx context.Context, reqs []store.AcquireRequest) []store.AcquireOutcome {
	out := s.BatchStore.AcquireBatch(ctx, reqs)
	for i := range out {
		if out[i].Err == nil {
			out[i].Claim, out[i].Err = s.lost(out[i].Claim, reqs[i])
		}
	}
	return out
}

// deliverUntilProcessed delivers one message as an adapter does, again
// after each delay Decide gives, on the fake clock, until it is processed,
// and returns how long that took on the clock and the last result.
func deliverUntilProcessed(t *testing.T, clk *clock.Fake, rcv *dedup.Receiver[order, string], handle func() (dedup.Result[string], error)) (time.Duration, dedup.Result[string]) {
	t.Helper()
	start := clk.Now()
	for range 100 {
		res, err := handle()
		if err == nil && res.Status == delivery.StatusProcessed {
			return clk.Now().Sub(start), res
		}
		d := adapter.Bind(rcv).Decide(res, err)
		require.Equal(t, delivery.Retry, d.Action, "status %v, error %v", res.Status, err)
		clk.Advance(d.Delay)
	}
	t.Fatal("the message was not processed in 100 deliveries")
	return 0, dedup.Result[string]{}
}

// TestLostClaimAnswer: a claim that the store wrote and whose answer was
// lost is asked for again, at the next delivery, with the same token: the
// store grants the claim it holds for it, and the message runs one store
// retry delay later, as its first attempt, not a lease later as the second
// (a partition stalled 30 s that way in a Redis Cluster failover).
func TestLostClaimAnswer(t *testing.T) {
	t.Parallel()
	stores := map[string]func(t *testing.T, clk clock.Clock) store.BatchStore{
		"memstore": func(t *testing.T, clk clock.Clock) store.BatchStore { return newMemstore(t, clk) },
	}
	for _, storeName := range []string{"memstore"} {
		for _, batch := range []bool{false, true} {
			name := storeName + "/" + map[bool]string{false: "Handle", true: "HandleBatch"}[batch]
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				clk := clock.NewFake(epoch)
				st := &answerLosingStore{BatchStore: stores[storeName](t, clk)}
				st.lose.Store(1)
				var runs atomic.Int64
				rcv := newReceiver(t, st, func(ctx context.Context, o order) (string, error) {
					runs.Add(1)
					return "charged " + o.ID, ctx.Err()
				}, &dedup.Config{Clock: clk})

				handle := func() (dedup.Result[string], error) {
					if !batch {
						return rcv.Handle(t.Context(), order{ID: "o-1"})
					}
					out := rcv.HandleBatch(t.Context(), []order{{ID: "o-1"}})
					return out[0].Result, out[0].Err
				}
				took, res := deliverUntilProcessed(t, clk, rcv, handle)
				t.Logf("%s: processed %v after the lost answer (StoreRetryDelay %v, lease %v), attempt %d", name, took, (5 * time.Second), (30 * time.Second), res.Attempt)
				require.LessOrEqual(t, took, (5 * time.Second), "a lost answer costs one store retry delay, not a lease")
				require.Equal(t, 1, res.Attempt, "the claim granted again is the first attempt")
				require.Equal(t, int64(1), runs.Load())
				require.Zero(t, st.lose.Load(), "the store lost one answer")

				again, err := handle()
				require.NoError(t, err)
				require.Equal(t, delivery.StatusDuplicate, again.Status)
				require.Equal(t, int64(1), runs.Load())
			})
		}
	}
}

// TestLostClaimTokenTakenOnce: the token of a lost claim goes to one
// Acquire only: a second delivery of the key that claims while the first
// runs (NoWait, here from inside the handler) asks with a token of its
// own and finds the key in flight, instead of being granted the same
// claim and running the handler beside it.
func TestLostClaimTokenTakenOnce(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	st := &answerLosingStore{BatchStore: newMemstore(t, clk)}
	st.lose.Store(1)
	var (
		rcv   *dedup.Receiver[order, string]
		runs  atomic.Int64
		inner dedup.Result[string]
	)
	rcv = newReceiver(t, st, func(ctx context.Context, o order) (string, error) {
		if runs.Add(1) > 1 {
			return "beside", ctx.Err() // granted the claim that runs already
		}
		var err error
		inner, err = rcv.Handle(context.WithoutCancel(ctx), o)
		if err != nil {
			return "", err
		}
		return "ok", ctx.Err()
	}, &dedup.Config{Clock: clk, NoWait: true})

	_, err := rcv.Handle(t.Context(), order{ID: "o-1"})
	require.ErrorIs(t, err, dedup.ErrStoreUnavailable)
	res, err := rcv.Handle(t.Context(), order{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, res.Status)
	require.Equal(t, delivery.StatusInFlight, inner.Status, "the delivery beside the one holding the lost claim's token finds the key held")
	require.Equal(t, int64(1), runs.Load())
}

// TestLostClaimTokenSurvivesCanceledBatch: a batch whose context ended
// before it claimed gives the lost claim's token back, so the key's next
// delivery still asks with it and runs at once, as its first attempt.
func TestLostClaimTokenSurvivesCanceledBatch(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	st := &answerLosingStore{BatchStore: newMemstore(t, clk)}
	st.lose.Store(1)
	rcv := newReceiver(t, st, func(ctx context.Context, o order) (string, error) {
		return "ok", ctx.Err()
	}, &dedup.Config{Clock: clk})
	batch := func(ctx context.Context) dedup.Outcome[string] {
		return rcv.HandleBatch(ctx, []order{{ID: "o-1"}})[0]
	}

	require.ErrorIs(t, batch(t.Context()).Err, dedup.ErrStoreUnavailable, "the claim's answer is lost")
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, batch(canceled).Err, dedup.ErrCanceled)
	o := batch(t.Context())
	require.NoError(t, o.Err)
	require.Equal(t, delivery.StatusProcessed, o.Result.Status, "the lost claim is granted at once, not in flight for a lease")
	require.Equal(t, 1, o.Result.Attempt)
}
