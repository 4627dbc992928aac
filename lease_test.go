package dedup_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/internal/testenv"
)

const testLease = 30 * time.Second

// TestLeaseExpiryTakeover: a worker that stalls past its lease (its
// heartbeat cannot run: here its clock never moves) loses the key to the
// next delivery; its late completion fails with ErrLeaseLost and does not
// overwrite the newer result.
func TestLeaseExpiryTakeover(t *testing.T) {
	t.Parallel()
	storeClock := clock.NewFake(epoch)
	st := newMemstore(t, storeClock)

	entered := make(chan struct{})
	release := make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce) // a failing test must not leave the handler blocked
	stale := newReceiver(t, st, func(ctx context.Context, o order) (string, error) {
		close(entered)
		<-release
		return "stale", nil
	}, &dedup.Config{Clock: clock.NewFake(epoch), Lease: testLease})
	var fresh atomic.Int64
	next := newReceiver(t, st, func(ctx context.Context, o order) (string, error) {
		fresh.Add(1)
		return "fresh", nil
	}, &dedup.Config{Clock: storeClock, Lease: testLease})

	var wg sync.WaitGroup
	var staleRes dedup.Result[string]
	var staleErr error
	wg.Go(func() { staleRes, staleErr = stale.Handle(context.Background(), order{ID: "o-1"}) })
	testenv.Recv(t, entered, "the handler to start")

	res, err := next.Handle(t.Context(), order{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, dedup.StatusInFlight, res.Status, "the lease still holds")
	require.Equal(t, testLease, res.RetryAfter)
	require.Equal(t, dedup.Retry, next.Decide(res, err).Action)

	storeClock.Advance(testLease + time.Second)
	res, err = next.Handle(t.Context(), order{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, dedup.StatusProcessed, res.Status, "the expired lease was taken over")
	require.Equal(t, 2, res.Attempt)
	require.Equal(t, "fresh", res.Value)

	releaseOnce()
	testenv.Wait(t, &wg, "the deliveries to return")
	require.NoError(t, staleErr, "a done status never comes with an error")
	require.Equal(t, dedup.StatusProcessed, staleRes.Status)
	require.ErrorIs(t, staleRes.Problem, dedup.ErrLeaseLost)
	require.Equal(t, dedup.Ack, stale.Decide(staleRes, staleErr).Action,
		"the stale worker's effect happened; the new holder owns the record")
	require.Equal(t, uint64(1), stale.Stats().LeaseLost)

	res, err = next.Handle(t.Context(), order{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, dedup.StatusDuplicate, res.Status)
	require.Equal(t, "fresh", res.Value, "the stale completion did not overwrite the newer result")
	require.Equal(t, int64(1), fresh.Load())
}

// beatingOrder counts the heartbeats the broker would receive.
type beatingOrder struct {
	ID    string
	beats *atomic.Int64
}

func (o beatingOrder) Heartbeat(context.Context) error { o.beats.Add(1); return nil }

// TestHeartbeatKeepsSlowHandlerLease: a handler that runs for twice its
// lease keeps the key, because the heartbeat extends it every third of a
// lease, and the message hears every beat.
func TestHeartbeatKeepsSlowHandlerLease(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	st := newMemstore(t, clk)
	entered := make(chan struct{})
	release := make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce) // a failing test must not leave the handler blocked
	keyOf := func(o beatingOrder) (string, error) { return o.ID, nil }
	slow, err := dedup.NewReceiver(st, keyOf, func(ctx context.Context, o beatingOrder) (string, error) {
		close(entered)
		<-release
		return "slow", ctx.Err()
	}, &dedup.Config{Clock: clk, Lease: testLease})
	require.NoError(t, err)
	other, err := dedup.NewReceiver(st, keyOf, func(ctx context.Context, o beatingOrder) (string, error) {
		return "other", nil
	}, &dedup.Config{Clock: clk, Lease: testLease})
	require.NoError(t, err)

	var beats atomic.Int64
	msg := beatingOrder{ID: "o-1", beats: &beats}
	var wg sync.WaitGroup
	var res dedup.Result[string]
	var resErr error
	wg.Go(func() { res, resErr = slow.Handle(context.Background(), msg) })
	testenv.Recv(t, entered, "the handler to start")

	for range 6 { // two leases, in steps of a third
		clk.Advance(testLease / 3)
		r, err := other.Handle(t.Context(), msg)
		require.NoError(t, err)
		require.Equal(t, dedup.StatusInFlight, r.Status, "the heartbeat keeps the key")
	}
	require.Equal(t, int64(6), beats.Load())

	releaseOnce()
	testenv.Wait(t, &wg, "the deliveries to return")
	require.NoError(t, resErr)
	require.Equal(t, dedup.StatusProcessed, res.Status)
	require.Equal(t, 1, res.Attempt)
	require.Zero(t, clk.Pending(), "the heartbeat timer is stopped once the handler returns")
}

// TestLostLeaseCancelsHandler: when the heartbeat finds the lease taken
// over, the handler's context is cancelled with ErrLeaseLost as its cause.
func TestLostLeaseCancelsHandler(t *testing.T) {
	t.Parallel()
	storeClock := clock.NewFake(epoch)
	workerClock := clock.NewFake(epoch)
	st := newMemstore(t, storeClock)

	entered := make(chan struct{})
	var cause error
	stale := newReceiver(t, st, func(ctx context.Context, o order) (string, error) {
		close(entered)
		<-ctx.Done()
		cause = context.Cause(ctx)
		return "", ctx.Err()
	}, &dedup.Config{Clock: workerClock, Lease: testLease})
	next := newReceiver(t, st, func(ctx context.Context, o order) (string, error) { return "fresh", nil },
		&dedup.Config{Clock: storeClock, Lease: testLease})

	var wg sync.WaitGroup
	var staleErr error
	wg.Go(func() { _, staleErr = stale.Handle(context.Background(), order{ID: "o-1"}) })
	testenv.Recv(t, entered, "the handler to start")
	storeClock.Advance(testLease + time.Second)
	res, err := next.Handle(t.Context(), order{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, dedup.StatusProcessed, res.Status)

	workerClock.Advance(testLease / 3) // the stale worker's heartbeat runs
	testenv.Wait(t, &wg, "the deliveries to return")
	require.ErrorIs(t, cause, dedup.ErrLeaseLost)
	require.ErrorIs(t, staleErr, dedup.ErrLeaseLost, "Handle says why the handler failed")
	require.Equal(t, dedup.ReasonInFlight, stale.Decide(dedup.Result[string]{}, staleErr).Reason, "never dead-lettered: the new holder decides")

	res, err = next.Handle(t.Context(), order{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, dedup.StatusDuplicate, res.Status)
	require.Equal(t, "fresh", res.Value)
}
