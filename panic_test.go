package dedup_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store"
)

// panicky panics in MarshalJSON (after the effect) or UnmarshalJSON (on
// replay) when told to.
type panicky struct {
	V         string
	OnMarshal bool
}

var unmarshalPanics atomic.Bool

func (p panicky) MarshalJSON() ([]byte, error) {
	if p.OnMarshal {
		panic("MarshalJSON bug")
	}
	type plain panicky
	return json.Marshal(plain(p))
}

func (p *panicky) UnmarshalJSON(data []byte) error {
	if unmarshalPanics.Load() {
		panic("UnmarshalJSON bug")
	}
	type plain panicky
	return json.Unmarshal(data, (*plain)(p))
}

// TestPanicAfterEffect: a result whose MarshalJSON panics after the handler
// succeeded completes the record without its result: no panic escapes, the
// delivery is acked, and a redelivery does not repeat the effect.
func TestPanicAfterEffect(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	var calls atomic.Int64
	rcv := newReceiver(t, newMemstore(t, clk), func(ctx context.Context, o order) (panicky, error) {
		calls.Add(1)
		return panicky{V: "charged", OnMarshal: true}, nil
	}, &dedup.Config{Clock: clk})

	var res dedup.Result[panicky]
	var err error
	require.NotPanics(t, func() { res, err = rcv.Handle(t.Context(), order{ID: "o-1"}) })
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, res.Status)
	require.ErrorIs(t, res.Problem, dedup.ErrResultNotStored)
	var pe *dedup.PanicError
	require.ErrorAs(t, res.Problem, &pe)
	require.Equal(t, delivery.Ack, adapter.Bind(rcv).Decide(res, err).Action)

	res, err = rcv.Handle(t.Context(), order{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusDuplicate, res.Status)
	require.Equal(t, int64(1), calls.Load(), "the effect never repeats")
}

// TestPanicOnReplay: a stored result whose UnmarshalJSON panics makes every
// duplicate a duplicate with the problem in Result, not a crash loop.
func TestPanicOnReplay(t *testing.T) {
	clk := clock.NewFake(epoch)
	rcv := newReceiver(t, newMemstore(t, clk), func(ctx context.Context, o order) (panicky, error) {
		return panicky{V: "charged"}, nil
	}, &dedup.Config{Clock: clk})
	_, err := rcv.Handle(t.Context(), order{ID: "o-1"})
	require.NoError(t, err)

	unmarshalPanics.Store(true)
	defer unmarshalPanics.Store(false)
	for range 2 {
		var res dedup.Result[panicky]
		require.NotPanics(t, func() { res, err = rcv.Handle(t.Context(), order{ID: "o-1"}) })
		require.NoError(t, err)
		require.Equal(t, delivery.StatusDuplicate, res.Status)
		require.ErrorIs(t, res.Problem, dedup.ErrResultUndecodable)
		require.Equal(t, delivery.Ack, adapter.Bind(rcv).Decide(res, err).Action)
	}
	require.Equal(t, uint64(2), rcv.Stats().ResultsUndecodable)
}

// panickyCodec panics on every call.
type panickyCodec struct{}

func (panickyCodec) Marshal(any) ([]byte, error) { panic("codec bug") }
func (panickyCodec) Unmarshal([]byte, any) error { panic("codec bug") }

func TestPanickingCodec(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	var calls atomic.Int64
	rcv := newReceiver(t, newMemstore(t, clk), func(ctx context.Context, o order) (string, error) {
		calls.Add(1)
		return "x", nil
	}, &dedup.Config{Clock: clk, Codec: panickyCodec{}})
	var res dedup.Result[string]
	var err error
	require.NotPanics(t, func() { res, err = rcv.Handle(t.Context(), order{ID: "o-1"}) })
	require.NoError(t, err)
	require.ErrorIs(t, res.Problem, dedup.ErrResultNotStored)
	res, err = rcv.Handle(t.Context(), order{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusDuplicate, res.Status)
	require.Equal(t, int64(1), calls.Load())
}

// fingerprintPanics is a message whose Fingerprint panics.
type fingerprintPanics struct{ ID string }

func (fingerprintPanics) Fingerprint() (string, error) { panic("Fingerprint bug") }

// TestPanicBeforeEffect: a Fingerprint that panics is poison, before any
// claim: dead-lettered, the handler never runs.
func TestPanicBeforeEffect(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	var calls atomic.Int64
	rcv, err := dedup.NewReceiver(newMemstore(t, clk), func(m fingerprintPanics) (string, error) { return m.ID, nil },
		func(ctx context.Context, m fingerprintPanics) (string, error) { calls.Add(1); return "", nil }, &dedup.Config{Clock: clk})
	require.NoError(t, err)
	var res dedup.Result[string]
	require.NotPanics(t, func() { res, err = rcv.Handle(t.Context(), fingerprintPanics{ID: "o-1"}) })
	require.ErrorIs(t, err, dedup.ErrUndecodable)
	var pe *dedup.PanicError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, delivery.DeadLetter, adapter.Bind(rcv).Decide(res, err).Action)
	require.Zero(t, calls.Load())
}

// beatPanics is a message whose Heartbeat panics (on the heartbeat's timer
// goroutine, where a panic would kill the process).
type beatPanics struct{ ID string }

func (beatPanics) Heartbeat(context.Context) error { panic("Heartbeat bug") }

func TestPanickingHeartbeat(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	entered := make(chan struct{})
	release := make(chan struct{})
	rcv, err := dedup.NewReceiver(newMemstore(t, clk), func(m beatPanics) (string, error) { return m.ID, nil },
		func(ctx context.Context, m beatPanics) (string, error) {
			close(entered)
			<-release
			return "done", nil
		}, &dedup.Config{Clock: clk, Lease: testLease})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := rcv.Handle(context.Background(), beatPanics{ID: "o-1"})
		done <- err
	}()
	testenv.Recv(t, entered, "the handler to start")
	clk.Advance(testLease / 3) // the heartbeat runs, and the message's Heartbeat panics
	close(release)
	require.NoError(t, <-done)
}

// TestHandlerOwnDeadlineIsHandlerError: a deadline the handler set itself
// is a failure like any other: backoff and attempts, not "shutdown".
func TestHandlerOwnDeadlineIsHandlerError(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	rcv := newReceiver(t, newMemstore(t, clk), func(ctx context.Context, o order) (string, error) {
		cctx, cancel := context.WithTimeout(ctx, 0)
		defer cancel()
		<-cctx.Done()
		return "", cctx.Err()
	}, &dedup.Config{Clock: clk, MaxAttempts: 2})
	res, err := rcv.Handle(t.Context(), order{ID: "o-1"})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, dedup.ErrCanceled)
	d := adapter.Bind(rcv).Decide(res, err)
	require.Equal(t, delivery.ReasonHandlerError, d.Reason)
	res, err = rcv.Handle(t.Context(), order{ID: "o-1"})
	require.Equal(t, delivery.ReasonAttemptsExhausted, adapter.Bind(rcv).Decide(res, err).Reason, "it counts towards MaxAttempts")

	// The caller's own cancellation is a shutdown: not processed, retried.
	ctx, cancel := context.WithCancel(t.Context())
	shut := newReceiver(t, newMemstore(t, clk), func(ctx context.Context, o order) (string, error) {
		cancel()
		return "", ctx.Err()
	}, &dedup.Config{Clock: clk})
	res, err = shut.Handle(ctx, order{ID: "o-2"})
	require.ErrorIs(t, err, dedup.ErrCanceled)
	require.Equal(t, delivery.ReasonCanceled, adapter.Bind(shut).Decide(res, err).Reason)
	require.True(t, errors.Is(err, context.Canceled))
}

// panickingStore is a user's store that panics in Acquire once released:
// a panic no recover of the receiver's covers.
type panickingStore struct {
	store.Store
	entered, release chan struct{}
}

func (s *panickingStore) Acquire(ctx context.Context, req store.AcquireRequest) (store.Claim, error) {
	close(s.entered)
	<-s.release
	panic("store bug")
}

// TestPanickingStoreFreesWaiters: when the first delivery of a key panics
// past the receiver (in the store, whose panics are the caller's to see),
// the deliveries waiting for it get an error instead of waiting forever,
// and the key is free for the next delivery.
func TestPanickingStoreFreesWaiters(t *testing.T) {
	t.Parallel()
	synctest.Test(t, testPanickingStoreFreesWaiters)
}

func testPanickingStoreFreesWaiters(t *testing.T) {
	st := &panickingStore{Store: newMemstore(t, clock.NewFake(epoch)), entered: make(chan struct{}), release: make(chan struct{})}
	rcv := newReceiver(t, st, func(ctx context.Context, o order) (struct{}, error) { return struct{}{}, nil }, nil)

	leaderPanic := make(chan any, 1)
	go func() {
		defer func() { leaderPanic <- recover() }()
		_, _ = rcv.Handle(context.Background(), order{ID: "o-1"})
	}()
	testenv.Recv(t, st.entered, "the first delivery to reach the store")
	var wg sync.WaitGroup
	var followerErr error
	wg.Go(func() { _, followerErr = rcv.Handle(context.Background(), order{ID: "o-1"}) })
	waitFor(t, "the duplicate to wait on the first delivery", func() bool { return dedup.Waiting(rcv, "default:o-1") == 1 })
	close(st.release)
	require.Equal(t, "store bug", testenv.Recv(t, leaderPanic, "the leader's panic"), "the store's panic reaches the caller")
	testenv.Wait(t, &wg, "the waiting delivery to return")
	require.Error(t, followerErr, "the waiter is told the first delivery ended without an outcome")
	require.Zero(t, dedup.Waiting(rcv, "default:o-1"), "the key is no longer in flight")
}
