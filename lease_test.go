package dedup_test

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/memstore"
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
	require.Equal(t, delivery.StatusInFlight, res.Status, "the lease still holds")
	require.InDelta(t, 180*time.Millisecond, res.RetryAfter, float64(20*time.Millisecond), "the first look again comes soon")
	require.Equal(t, delivery.Retry, adapter.Bind(next).Decide(res, err).Action)

	storeClock.Advance(testLease + time.Second)
	res, err = next.Handle(t.Context(), order{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, res.Status, "the expired lease was taken over")
	require.Equal(t, 2, res.Attempt)
	require.Equal(t, "fresh", res.Value)

	releaseOnce()
	testenv.Wait(t, &wg, "the deliveries to return")
	require.NoError(t, staleErr, "a done status never comes with an error")
	require.Equal(t, delivery.StatusProcessed, staleRes.Status)
	require.ErrorIs(t, staleRes.Problem, dedup.ErrLeaseLost)
	require.Equal(t, delivery.Ack, adapter.Bind(stale).Decide(staleRes, staleErr).Action,
		"the stale worker's effect happened; the new holder owns the record")
	require.Equal(t, uint64(1), stale.Stats().LeaseLost)

	res, err = next.Handle(t.Context(), order{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusDuplicate, res.Status)
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
		require.Equal(t, delivery.StatusInFlight, r.Status, "the heartbeat keeps the key")
	}
	require.Equal(t, int64(6), beats.Load())

	releaseOnce()
	testenv.Wait(t, &wg, "the deliveries to return")
	require.NoError(t, resErr)
	require.Equal(t, delivery.StatusProcessed, res.Status)
	require.Equal(t, 1, res.Attempt)
	require.Zero(t, clk.Pending(), "the heartbeat timer is stopped once the handler returns")
}

// TestLostLeaseCancelsHandler: when the heartbeat finds the lease taken
// over, the handler's context is cancelled with ErrLeaseLost as its cause.
func TestLostLeaseCancelsHandler(t *testing.T) {
	t.Parallel()
	// How the handler meets its context: waiting on Done, never asking for
	// Done (the receiver's context then makes its cancellable part only
	// for the cause), or through a context derived from it.
	for _, mode := range []string{"done", "never-waits", "derived"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			storeClock := clock.NewFake(epoch)
			workerClock := clock.NewFake(epoch)
			st := newMemstore(t, storeClock)

			entered := make(chan struct{})
			proceed := make(chan struct{})
			var cause, ctxErr error
			stale := newReceiver(t, st, func(ctx context.Context, o order) (string, error) {
				if mode == "derived" {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, time.Hour)
					defer cancel()
				}
				close(entered)
				if mode == "never-waits" {
					<-proceed
				} else {
					<-ctx.Done()
				}
				ctxErr, cause = ctx.Err(), context.Cause(ctx)
				return "", ctxErr
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
			require.Equal(t, delivery.StatusProcessed, res.Status)

			workerClock.Advance(testLease / 3) // the stale worker's heartbeat runs
			close(proceed)
			testenv.Wait(t, &wg, "the deliveries to return")
			require.ErrorIs(t, ctxErr, context.Canceled)
			require.ErrorIs(t, cause, dedup.ErrLeaseLost)
			require.ErrorIs(t, staleErr, dedup.ErrLeaseLost, "Handle says why the handler failed")
			require.Equal(t, delivery.ReasonInFlight, adapter.Bind(stale).Decide(dedup.Result[string]{}, staleErr).Reason, "never dead-lettered: the new holder decides")

			res, err = next.Handle(t.Context(), order{ID: "o-1"})
			require.NoError(t, err)
			require.Equal(t, delivery.StatusDuplicate, res.Status)
			require.Equal(t, "fresh", res.Value)
		})
	}
}

// TestHeartbeatOneTimerPerReceiver: deliveries running at once share one
// timer until their first beat, which comes a third of a lease after each
// one's own claim; a delivery that finishes sooner is never extended, and
// the shared timer does not outlive the deliveries by more than one firing.
func TestHeartbeatOneTimerPerReceiver(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	st := &countingStore{Store: newMemstore(t, clk)}
	started := make(chan string, 8)
	release := map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{})}
	rcv, err := dedup.NewReceiver(st, func(o beatingOrder) (string, error) { return o.ID, nil },
		func(ctx context.Context, o beatingOrder) (string, error) {
			started <- o.ID
			if ch, ok := release[o.ID]; ok {
				<-ch
			}
			return o.ID, nil
		}, &dedup.Config{Clock: clk, Lease: testLease})
	require.NoError(t, err)

	// Quick deliveries: no extension, no beat, one pending timer at most.
	var quickBeats atomic.Int64
	for i := range 20 {
		res, err := rcv.Handle(t.Context(), beatingOrder{ID: "quick-" + strconv.Itoa(i), beats: &quickBeats})
		require.NoError(t, err)
		require.Equal(t, delivery.StatusProcessed, res.Status)
		<-started
	}
	require.LessOrEqual(t, clk.Pending(), 1, "finished deliveries leave one shared timer at most")

	var wg sync.WaitGroup
	var aBeats, bBeats atomic.Int64
	wg.Go(func() { _, _ = rcv.Handle(context.Background(), beatingOrder{ID: "a", beats: &aBeats}) })
	testenv.Recv(t, started, "a's handler to start")
	clk.Advance(testLease / 6)
	wg.Go(func() { _, _ = rcv.Handle(context.Background(), beatingOrder{ID: "b", beats: &bBeats}) })
	testenv.Recv(t, started, "b's handler to start")
	require.Equal(t, 1, clk.Pending(), "two running deliveries, one timer")

	clk.Advance(testLease / 6) // a third of a lease after a's claim
	require.Equal(t, int64(1), aBeats.Load(), "a beats a third of a lease after its claim")
	require.Zero(t, bBeats.Load(), "b's first beat is not due yet")
	clk.Advance(testLease / 6)
	require.Equal(t, int64(1), bBeats.Load(), "b beats a third of a lease after its own claim")
	clk.Advance(testLease / 6)
	require.Equal(t, int64(2), aBeats.Load(), "a beats on its own timer from then on")
	require.Equal(t, int64(3), st.extends.Load())

	close(release["a"])
	close(release["b"])
	testenv.Wait(t, &wg, "the slow deliveries to return")
	clk.Advance(2 * testLease)
	require.Zero(t, quickBeats.Load(), "the quick deliveries never beat")
	require.Equal(t, int64(3), st.extends.Load(), "no extension after the deliveries ended")
	require.Zero(t, clk.Pending(), "no timer is left once the shared one fired with nothing due")
}

// gateClock is a fake clock that, once armed, holds the next AfterFunc(0)
// until released: the call by which the receiver's shared beat timer hands
// a heartbeat due for its first beat to a timer of its own.
type gateClock struct {
	*clock.Fake
	mu   sync.Mutex
	held chan struct{} // closed once a call is held
	hold chan struct{} // closed by the test to let it go on
}

func (c *gateClock) arm() (held, release chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.held, c.hold = make(chan struct{}), make(chan struct{})
	return c.held, c.hold
}

func (c *gateClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	c.mu.Lock()
	held, hold := c.held, c.hold
	if d <= 0 {
		c.held, c.hold = nil, nil
	}
	c.mu.Unlock()
	if d <= 0 && held != nil {
		close(held)
		<-hold
	}
	return c.Fake.AfterFunc(d, f)
}

// TestDeliveryEndsWhileItsFirstBeatIsHandedOver: a delivery that returns
// while the shared timer hands its heartbeat to a timer of its own (the
// timer took it from the queue, and has yet to arm it) is extended no
// more, and what it leaves behind is not reused under the timer (here by
// the next delivery): no extension, no timer and no panic after it ended.
func TestDeliveryEndsWhileItsFirstBeatIsHandedOver(t *testing.T) {
	t.Parallel()
	clk := &gateClock{Fake: clock.NewFake(epoch)}
	st := &countingStore{Store: newMemstore(t, clk.Fake)}
	started := make(chan string, 3)
	release := map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{})}
	rcv, err := dedup.NewReceiver(st, orderID, func(ctx context.Context, o order) (string, error) {
		started <- o.ID
		if ch, ok := release[o.ID]; ok {
			<-ch
		}
		return o.ID, nil
	}, &dedup.Config{Clock: clk, Lease: testLease})
	require.NoError(t, err)

	var wg sync.WaitGroup
	var resA, resB dedup.Result[string]
	var errA, errB error
	bDone := make(chan struct{})
	wg.Go(func() { resA, errA = rcv.Handle(context.Background(), order{ID: "a"}) })
	testenv.Recv(t, started, "a's handler to start") // a is first in the queue
	wg.Go(func() {
		defer close(bDone)
		resB, errB = rcv.Handle(context.Background(), order{ID: "b"})
	})
	testenv.Recv(t, started, "b's handler to start")

	held, hold := clk.arm()
	advanced := make(chan struct{})
	wg.Go(func() {
		defer close(advanced)
		clk.Advance(testLease / 3) // both first beats are due
	})
	testenv.Recv(t, held, "the shared timer to arm a's timer")
	// b is out of the queue and its timer not armed yet: b returns now,
	// and another delivery runs.
	close(release["b"])
	testenv.Recv(t, bDone, "b to return")
	res, err := rcv.Handle(t.Context(), order{ID: "c"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, res.Status)
	testenv.Recv(t, started, "c's handler to start")

	close(hold)
	testenv.Recv(t, advanced, "the first beats to run")
	require.Equal(t, int64(1), st.extends.Load(), "a's first beat extended a; b had returned")
	close(release["a"])
	testenv.Wait(t, &wg, "the deliveries to return")
	require.NoError(t, errA)
	require.NoError(t, errB)
	require.Equal(t, delivery.StatusProcessed, resA.Status)
	require.Equal(t, delivery.StatusProcessed, resB.Status)

	clk.Advance(2 * testLease)
	require.Equal(t, int64(1), st.extends.Load(), "no extension after the deliveries ended")
	require.Zero(t, clk.Pending(), "no timer is left")
}

// TestDroppedReceiverLetsItsStoreGo: the shared beat timer, which waits a
// third of a lease after the last delivery, keeps neither a receiver that
// its owner dropped nor its store (a memstore's records) from the
// collector.
func TestDroppedReceiverLetsItsStoreGo(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	gone := func() weak.Pointer[memstore.Store] {
		st := newMemstore(t, clk)
		rcv := newReceiver(t, st, func(context.Context, order) (struct{}, error) { return struct{}{}, nil }, &dedup.Config{Clock: clk})
		res, err := rcv.Handle(t.Context(), order{ID: "o-1"})
		require.NoError(t, err)
		require.Equal(t, delivery.StatusProcessed, res.Status)
		require.Equal(t, 1, clk.Pending(), "the shared beat timer waits")
		return weak.Make(st)
	}()
	for i := 0; i < 10 && gone.Value() != nil; i++ {
		runtime.GC()
	}
	require.Nil(t, gone.Value(), "the store was collected while the beat timer waits")
	require.Equal(t, 1, clk.Pending())
}
