package dedup_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store"
)

// TestInFlightLooksAgainSoon: a key held elsewhere is looked at again after
// about 200 ms, then twice as long each time in a row, never after more
// than the holder's remaining lease; once the holder finishes, the next
// look answers the duplicate, and a new wait on the key starts short again.
func TestInFlightLooksAgainSoon(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	st := newMemstore(t, clk)
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce)
	var runs atomic.Int64
	h := func(ctx context.Context, o order) (string, error) {
		runs.Add(1)
		entered <- struct{}{}
		select {
		case <-release:
			return "done " + o.ID, nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	// Two receivers on one store stand for two processes: the holder's
	// clock stands still, so its heartbeat never runs.
	holder := newReceiver(t, st, h, &dedup.Config{Clock: clock.NewFake(epoch), Lease: testLease})
	waiter := newReceiver(t, st, h, &dedup.Config{Clock: clk, Lease: testLease})

	var wg sync.WaitGroup
	wg.Go(func() { _, _ = holder.Handle(context.Background(), order{ID: "o-1"}) })
	testenv.Recv(t, entered, "the holder's handler to start")

	var waited time.Duration
	for i, step := range []time.Duration{200, 400, 800, 1600, 3200} {
		res, err := waiter.Handle(t.Context(), order{ID: "o-1"})
		require.NoError(t, err)
		require.Equal(t, delivery.StatusInFlight, res.Status)
		step *= time.Millisecond
		require.LessOrEqual(t, res.RetryAfter, step, "look %d", i+1)
		require.GreaterOrEqual(t, res.RetryAfter, step-step/5, "look %d", i+1)
		d := adapter.Bind(waiter).Decide(res, err)
		require.Equal(t, delivery.Retry, d.Action)
		require.Equal(t, res.RetryAfter, d.Delay)
		clk.Advance(d.Delay)
		waited += d.Delay
	}
	require.Less(t, waited, 7*time.Second, "five looks in a row come long before the 30 s lease ends")

	releaseOnce()
	testenv.Wait(t, &wg, "the holder to finish")
	res, err := waiter.Handle(t.Context(), order{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusDuplicate, res.Status, "the holder's result is seen at the next look")
	require.Equal(t, "done o-1", res.Value)
	require.Equal(t, int64(1), runs.Load())
}

// TestInFlightLooksAreBounded: while a dead holder's lease runs out, the
// looks double up to what remains of it, so a 30 s lease costs at most
// log2(30 s / 200 ms) + 3 store reads before the key is taken over; the
// looks at another key begin short again.
func TestInFlightLooksAreBounded(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	st := newMemstore(t, clk)
	// The dead holder: claimed o-1 and o-2, and never extends or completes.
	for _, id := range []string{"o-1", "o-2"} {
		c, err := st.Acquire(t.Context(), store.AcquireRequest{Key: "default" + ":" + id, Lease: testLease})
		require.NoError(t, err)
		require.True(t, c.Acquired)
	}
	var runs atomic.Int64
	waiter := newReceiver(t, st, func(ctx context.Context, o order) (string, error) {
		runs.Add(1)
		return "taken over", nil
	}, &dedup.Config{Clock: clk, Lease: testLease})

	looks := 0
	for {
		res, err := waiter.Handle(t.Context(), order{ID: "o-1"})
		require.NoError(t, err)
		if res.Status != delivery.StatusInFlight {
			require.Equal(t, delivery.StatusProcessed, res.Status, "the expired lease is taken over")
			break
		}
		looks++
		require.LessOrEqual(t, looks, 10, "looks at one key during a 30 s lease")
		require.Positive(t, res.RetryAfter)
		if looks == 6 {
			other, err := waiter.Handle(t.Context(), order{ID: "o-2"})
			require.NoError(t, err)
			require.Equal(t, delivery.StatusInFlight, other.Status)
			require.LessOrEqual(t, other.RetryAfter, 200*time.Millisecond, "another key's first look comes soon")
		}
		clk.Advance(res.RetryAfter)
	}
	require.GreaterOrEqual(t, looks, 5)
	require.Equal(t, int64(1), runs.Load())
}

// TestInFlightLooksStartOverOnTakeover: once an orphaned claim was taken
// over, the new holder has just begun: the next look comes after a first
// wait again, not after the doubled waits the dead holder ran up, which
// could reach a whole second lease.
func TestInFlightLooksStartOverOnTakeover(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	st := newMemstore(t, clk)
	key := "default" + ":o-1"
	dead, err := st.Acquire(t.Context(), store.AcquireRequest{Key: key, Lease: testLease})
	require.NoError(t, err)
	require.True(t, dead.Acquired)
	waiter := newReceiver(t, st, func(ctx context.Context, o order) (string, error) {
		return "", errors.New("the waiter must not run the handler")
	}, &dedup.Config{Clock: clk, Lease: testLease})

	// The waiter looks until the dead holder's lease ends: its waits
	// doubled, the last ones reaching to the lease's end.
	var longest time.Duration
	for clk.Now().Before(dead.Record.LeaseUntil) {
		res, err := waiter.Handle(t.Context(), order{ID: "o-1"})
		require.NoError(t, err)
		require.Equal(t, delivery.StatusInFlight, res.Status)
		require.Equal(t, 1, res.Attempt)
		longest = max(longest, res.RetryAfter)
		clk.Advance(res.RetryAfter)
	}
	require.Greater(t, longest, 2*time.Second, "the waits doubled while the first holder was away")

	// Right then, another process takes the key over.
	taken, err := st.Acquire(t.Context(), store.AcquireRequest{Key: key, Lease: testLease})
	require.NoError(t, err)
	require.True(t, taken.Acquired)
	require.Equal(t, 2, taken.Record.Attempt)

	res, err := waiter.Handle(t.Context(), order{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusInFlight, res.Status)
	require.Equal(t, 2, res.Attempt)
	require.LessOrEqual(t, res.RetryAfter, 200*time.Millisecond, "the new holder's first look comes soon")
}
