package dedup_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store"
)

// TestClaimFromContext: the handler sees its claim (key, token, attempt,
// retention); a handler that completes the record itself (as pgstore's
// CompleteTx will, inside the user's transaction) marks the claim, and the
// receiver does not complete it again.
func TestClaimFromContext(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	st := &countingStore{Store: newMemstore(t, clk)}
	rcv := newReceiver(t, st, func(ctx context.Context, o order) (string, error) {
		c, ok := store.ClaimFromContext(ctx)
		if !ok {
			return "", errors.New("no claim in the handler's context")
		}
		if o.Amount > 0 { // complete inside "the user's transaction"
			err := st.Store.Complete(ctx, store.CompleteRequest{Key: c.Key, Token: c.Token, Result: []byte(`"in-tx"`), Retention: c.Retention})
			if err != nil {
				return "", err
			}
			c.MarkCompleted()
		}
		return "ok", nil
	}, &dedup.Config{Namespace: "billing", Clock: clk, Retention: time.Hour})

	_, ok := store.ClaimFromContext(t.Context())
	require.False(t, ok, "no claim outside a handler")

	res, err := rcv.Handle(t.Context(), order{ID: "o-1", Amount: 5})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, res.Status)
	require.Zero(t, st.completes.Load(), "the receiver did not complete a record the handler completed")
	dup, err := rcv.Handle(t.Context(), order{ID: "o-1", Amount: 5})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusDuplicate, dup.Status)
	require.Equal(t, "in-tx", dup.Value, "the handler's own completion is the record")

	res, err = rcv.Handle(t.Context(), order{ID: "o-2"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, res.Status)
	require.Equal(t, int64(1), st.completes.Load(), "an unmarked claim is completed by the receiver")
}

// countingStore counts the completions and extensions that reach the
// store.
type countingStore struct {
	store.Store
	completes, extends atomic.Int64
}

func (s *countingStore) Complete(ctx context.Context, req store.CompleteRequest) error {
	s.completes.Add(1)
	return s.Store.Complete(ctx, req)
}

func (s *countingStore) Extend(ctx context.Context, req store.ExtendRequest) error {
	s.extends.Add(1)
	return s.Store.Extend(ctx, req)
}

// TestReentrantHandleIsInFlight: a handler that calls Handle for the key it
// is processing (directly or through a nested consumer) gets in-flight
// instead of waiting on itself forever.
func TestReentrantHandleIsInFlight(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	var rcv *dedup.Receiver[order, string]
	var inner dedup.Result[string]
	var innerErr error
	rcv = newReceiver(t, newMemstore(t, clk), func(ctx context.Context, o order) (string, error) {
		if o.Amount == 0 {
			return "inner", nil
		}
		inner, innerErr = rcv.Handle(ctx, order{ID: o.ID})
		other, err := rcv.Handle(ctx, order{ID: o.ID + "-other"})
		if err != nil || other.Status != delivery.StatusProcessed {
			return "", errors.New("a nested Handle of another key must run")
		}
		return "outer", nil
	}, &dedup.Config{Clock: clk})

	done := make(chan struct{})
	var res dedup.Result[string]
	var err error
	go func() {
		defer close(done)
		res, err = rcv.Handle(t.Context(), order{ID: "o-1", Amount: 1})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a re-entrant Handle deadlocked")
	}
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, res.Status)
	require.NoError(t, innerErr)
	require.Equal(t, delivery.StatusInFlight, inner.Status)
	require.Equal(t, delivery.Retry, adapter.Bind(rcv).Decide(inner, innerErr).Action)
}

// TestNoWait: with Config.NoWait, a delivery of a key being handled in this
// process is answered in flight at once; by default it waits and shares
// the first delivery's result.
func TestNoWait(t *testing.T) {
	t.Parallel()
	for _, noWait := range []bool{false, true} {
		clk := clock.NewFake(epoch)
		entered := make(chan struct{})
		release := make(chan struct{})
		releaseOnce := sync.OnceFunc(func() { close(release) })
		t.Cleanup(releaseOnce)
		var calls atomic.Int64
		rcv := newReceiver(t, newMemstore(t, clk), func(ctx context.Context, o order) (string, error) {
			calls.Add(1)
			close(entered)
			<-release
			return "first", nil
		}, &dedup.Config{Clock: clk, NoWait: noWait, Lease: testLease})

		var wg sync.WaitGroup
		wg.Go(func() { _, _ = rcv.Handle(t.Context(), order{ID: "o-1"}) })
		testenv.Recv(t, entered, "the handler to start")
		if noWait {
			res, err := rcv.Handle(t.Context(), order{ID: "o-1"})
			require.NoError(t, err)
			require.Equal(t, delivery.StatusInFlight, res.Status, "NoWait answers at once")
			require.InDelta(t, 180*time.Millisecond, res.RetryAfter, float64(20*time.Millisecond), "the first look again comes soon")
			releaseOnce()
		} else {
			second := make(chan dedup.Result[string], 1)
			wg.Go(func() {
				res, _ := rcv.Handle(t.Context(), order{ID: "o-1"})
				second <- res
			})
			releaseOnce()
			select {
			case res := <-second:
				require.Equal(t, delivery.StatusDuplicate, res.Status)
				require.Equal(t, "first", res.Value)
			case <-time.After(10 * time.Second):
				t.Fatal("the waiting duplicate never got the first delivery's result")
			}
		}
		testenv.Wait(t, &wg, "the deliveries to return")
		require.Equal(t, int64(1), calls.Load())
	}
}

// slowAcquireStore holds every Acquire until release is closed, after
// telling entered, so that deliveries of one key meet inside the store.
type slowAcquireStore struct {
	store.Store
	entered chan struct{}
	release chan struct{}
}

func (s *slowAcquireStore) Acquire(ctx context.Context, req store.AcquireRequest) (store.Claim, error) {
	s.entered <- struct{}{}
	<-s.release
	return s.Store.Acquire(ctx, req)
}

// TestNoWaitReplaysACompletedKey: with Config.NoWait, deliveries of a
// completed key that meet in this process are each replayed from the
// record, never answered in flight (an HTTP client's concurrent retries
// of a request that already succeeded get its response, not a 409).
func TestNoWaitReplaysACompletedKey(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	mem := newMemstore(t, clk)
	slow := &slowAcquireStore{Store: plainStore{mem}, entered: make(chan struct{}, 2), release: make(chan struct{})}
	var calls atomic.Int64
	h := func(ctx context.Context, o order) (string, error) { calls.Add(1); return "first", nil }
	first := newReceiver(t, mem, h, &dedup.Config{Clock: clk, Lease: testLease})
	res, err := first.Handle(t.Context(), order{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, res.Status)

	rcv := newReceiver(t, slow, h, &dedup.Config{Clock: clk, Lease: testLease, NoWait: true})
	results := make(chan dedup.Result[string], 2)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			res, err := rcv.Handle(t.Context(), order{ID: "o-1"})
			assert.NoError(t, err)
			results <- res
		})
	}
	testenv.Recv(t, slow.entered, "the first delivery to reach the store")
	testenv.Recv(t, slow.entered, "the second delivery to reach the store while the first is there")
	close(slow.release)
	testenv.Wait(t, &wg, "the deliveries to return")
	for range 2 {
		res := <-results
		require.Equal(t, delivery.StatusDuplicate, res.Status)
		require.Equal(t, "first", res.Value)
	}
	require.Equal(t, int64(1), calls.Load())
}

// TestForget: a message dead-lettered after MaxAttempts leaves a failed
// record, so a redriven copy is dead-lettered again at once; after Forget,
// the redriven copy runs the (fixed) handler.
func TestForget(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	var fixed atomic.Bool
	var calls atomic.Int64
	rcv := newReceiver(t, newMemstore(t, clk), func(ctx context.Context, o order) (string, error) {
		calls.Add(1)
		if !fixed.Load() {
			return "", errors.New("bug")
		}
		return "charged", nil
	}, &dedup.Config{Clock: clk, MaxAttempts: 2})

	for range 2 {
		res, err := rcv.Handle(t.Context(), order{ID: "o-1"})
		require.Error(t, err)
		require.Equal(t, delivery.StatusNone, res.Status)
	}
	res, err := rcv.Handle(t.Context(), order{ID: "o-1"})
	require.Equal(t, delivery.DeadLetter, adapter.Bind(rcv).Decide(res, err).Action)
	fixed.Store(true)
	_, err = rcv.Handle(t.Context(), order{ID: "o-1"})
	require.ErrorIs(t, err, dedup.ErrAttemptsExhausted, "a redrive without Forget is dead-lettered again")
	require.Equal(t, int64(2), calls.Load())

	require.NoError(t, rcv.Forget(t.Context(), "o-1"))
	res, err = rcv.Handle(t.Context(), order{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, res.Status)
	require.Equal(t, 1, res.Attempt, "the record starts afresh")

	require.ErrorIs(t, rcv.Forget(t.Context(), ""), dedup.ErrNoKey)
	plain := newReceiver(t, plainStore{newMemstore(t, clk)}, func(ctx context.Context, o order) (string, error) { return "", nil }, nil)
	require.ErrorIs(t, plain.Forget(t.Context(), "o-1"), dedup.ErrNotSupported)
}

// plainStore hides every optional ability of its store.
type plainStore struct{ store.Store }

// TestObserver: a caller of Handle has the observer hear one event per
// delivery as soon as it is answered, with its status, attempt, decision,
// whether the outcome is stored, and durations; a panicking observer is
// recovered; Observe fills the namespace of an event an adapter reports
// itself.
func TestObserver(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	var mu sync.Mutex
	var events []delivery.Event
	obs := delivery.ObserverFunc(func(ctx context.Context, e delivery.Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e)
		if e.Key == "billing:panic" {
			panic("observer bug")
		}
	})
	rcv := newReceiver(t, newMemstore(t, clk), func(ctx context.Context, o order) (string, error) {
		if o.Amount < 0 {
			return "", errors.New("declined")
		}
		return "ok", nil
	}, &dedup.Config{Namespace: "billing", Clock: clk, Observer: obs})

	for _, o := range []order{{ID: "o-1"}, {ID: "o-1"}, {ID: "o-2", Amount: -1}, {ID: "panic"}} {
		_, _ = rcv.Handle(t.Context(), o)
	}
	adapter.Bind(rcv).Observe(t.Context(), delivery.Event{Key: "billing:o-3", Decision: delivery.Decision{Action: delivery.Retry, Reason: delivery.ReasonCanceled}, Settled: true,
		Origin: delivery.Origin{Broker: "fake"}})

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, events, 5)
	require.Equal(t, "billing", events[0].Namespace)
	require.Equal(t, "billing:o-1", events[0].Key)
	require.Equal(t, delivery.StatusProcessed, events[0].Status)
	require.Equal(t, 1, events[0].Attempt)
	require.Equal(t, delivery.Decision{Action: delivery.Ack, Reason: delivery.ReasonProcessed}, events[0].Decision)
	require.True(t, events[0].Stored)
	require.False(t, events[0].Settled, "nobody settled a Handle")
	require.Positive(t, events[0].Duration)
	require.LessOrEqual(t, events[0].HandlerDuration+events[0].StoreDuration, events[0].Duration)
	require.Equal(t, delivery.StatusDuplicate, events[1].Status)
	require.True(t, events[1].Stored)
	require.Error(t, events[2].Err)
	require.Equal(t, delivery.StatusNone, events[2].Status)
	require.Equal(t, delivery.Retry, events[2].Decision.Action)
	require.Equal(t, delivery.ReasonHandlerError, events[2].Decision.Reason)
	require.False(t, events[2].Stored)
	require.Equal(t, "fake", events[4].Broker)
	require.Equal(t, "billing", events[4].Namespace, "Observe fills the namespace")
}
