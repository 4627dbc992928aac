package dedup_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/memstore"
)

// slowCompleteStore holds every Complete until proceed is closed, after
// telling completing: a slow Redis, a busy connection pool.
type slowCompleteStore struct {
	store.Store
	completing chan struct{}
	proceed    chan struct{}
	once       sync.Once
}

func (s *slowCompleteStore) Complete(ctx context.Context, req store.CompleteRequest) error {
	s.once.Do(func() { close(s.completing) })
	<-s.proceed
	return s.Store.Complete(ctx, req)
}

// TestShutdownDuringCompleteStillRecords: the caller's context (a shutdown,
// a deadline) ends while Complete is under way. The completion does not
// die with it: the success is recorded, and the redelivery after the lease
// is a duplicate.
func TestShutdownDuringCompleteStillRecords(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	st := &slowCompleteStore{Store: newMemstore(t, clk), completing: make(chan struct{}), proceed: make(chan struct{})}
	var effects atomic.Int64
	rcv := newReceiver(t, st, func(ctx context.Context, o order) (string, error) {
		effects.Add(1)
		return "charged", nil
	}, &dedup.Config{Clock: clk, Lease: testLease})

	ctx, cancel := context.WithCancel(t.Context())
	ch := make(chan outcome, 1)
	go func() {
		res, err := rcv.Handle(ctx, order{ID: "o-1"})
		ch <- outcome{res, err}
	}()
	select {
	case <-st.completing:
	case <-time.After(10 * time.Second):
		t.Fatal("Complete was never called")
	}
	cancel() // the shutdown's deadline fires during Complete
	close(st.proceed)
	var o outcome
	select {
	case o = <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("Handle did not return")
	}
	require.NoError(t, o.err)
	require.NoError(t, o.res.Problem, "the completion ran on a context of its own")

	clk.Advance(2 * testLease)
	res, err := rcv.Handle(t.Context(), order{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusDuplicate, res.Status)
	require.Equal(t, int64(1), effects.Load())
}

// TestWaiterOfLostLeaseGetsStoredResult: a duplicate waiting in this
// process on a delivery whose lease was taken over by another process is
// answered with the record's result (the newer one), not the stale value.
func TestWaiterOfLostLeaseGetsStoredResult(t *testing.T) {
	t.Parallel()
	synctest.Test(t, testWaiterOfLostLeaseGetsStoredResult)
}

func testWaiterOfLostLeaseGetsStoredResult(t *testing.T) {
	storeClock := clock.NewFake(epoch)
	st := newMemstore(t, storeClock)
	entered := make(chan struct{})
	release := make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce)
	// Its clock never moves: its heartbeat never runs, like a stalled worker.
	stale := newReceiver(t, st, func(ctx context.Context, o order) (string, error) {
		close(entered)
		<-release
		return "stale", nil
	}, &dedup.Config{Clock: clock.NewFake(epoch), Lease: testLease})
	other := newReceiver(t, st, func(ctx context.Context, o order) (string, error) { return "fresh", nil },
		&dedup.Config{Clock: storeClock, Lease: testLease})

	first := handleAsync(t.Context(), stale, order{ID: "o-1"})
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first delivery never ran")
	}
	waiter := handleAsync(t.Context(), stale, order{ID: "o-1"}) // waits on the first, in this process
	waitFor(t, "the duplicate to wait on the first delivery", func() bool { return dedup.Waiting(stale, "default:o-1") == 1 })
	storeClock.Advance(testLease + time.Second)
	res, err := other.Handle(t.Context(), order{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, res.Status, "the other process took the key over")

	releaseOnce()
	for _, ch := range []<-chan outcome{first, waiter} {
		select {
		case o := <-ch:
			require.NoError(t, o.err)
			if ch == waiter {
				require.Equal(t, delivery.StatusDuplicate, o.res.Status)
				require.Equal(t, "fresh", o.res.Value, "the waiter gets the record's result, not the stale value")
			} else {
				require.Equal(t, delivery.StatusProcessed, o.res.Status)
				require.ErrorIs(t, o.res.Problem, dedup.ErrLeaseLost)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a delivery did not return")
		}
	}
}

// failingCodec cannot decode what it stored.
type failingCodec struct{ dedup.JSONCodec }

func (failingCodec) Unmarshal([]byte, any) error { return errors.New("corrupt") }

// TestStoredResultUndecodable: a stored result that does not decode is a
// duplicate with ErrResultUndecodable in Result.Problem, acked.
func TestStoredResultUndecodable(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	rcv := newReceiver(t, newMemstore(t, clk), func(ctx context.Context, o order) (string, error) { return "x", nil },
		&dedup.Config{Clock: clk, Codec: failingCodec{}})
	_, err := rcv.Handle(t.Context(), order{ID: "o-1"})
	require.NoError(t, err)
	res, err := rcv.Handle(t.Context(), order{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusDuplicate, res.Status)
	require.ErrorIs(t, res.Problem, dedup.ErrResultUndecodable)
	require.Equal(t, delivery.Ack, adapter.Bind(rcv).Decide(res, err).Action)
}

// deadlineStore records whether Complete's context had a deadline, says
// it is in process when inProcess is set, and that it bounds its own calls
// within bound.
type deadlineStore struct {
	store.Store
	inProcess bool
	bound     time.Duration
	deadline  atomic.Bool
}

func (s *deadlineStore) InProcess() bool { return s.inProcess }

func (s *deadlineStore) CallTimeout() time.Duration { return s.bound }

func (s *deadlineStore) Complete(ctx context.Context, req store.CompleteRequest) error {
	_, ok := ctx.Deadline()
	s.deadline.Store(ok)
	return s.Store.Complete(ctx, req)
}

// TestStoreTimeoutOnlyForStoresThatWait: a completion is bounded by
// StoreTimeout, unless the store says it never waits (store.InProcess) or
// bounds its own calls within StoreTimeout (store.Bounded).
func TestStoreTimeoutOnlyForStoresThatWait(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		inProcess    bool
		bound        time.Duration
		wantDeadline bool
	}{
		{wantDeadline: true}, // waits, and cannot say how long
		{inProcess: true},
		{bound: time.Second},   // within StoreTimeout (a fifth of the lease)
		{bound: testLease / 5}, // exactly StoreTimeout
		{bound: testLease/5 + time.Millisecond, wantDeadline: true}, // longer than StoreTimeout
		{bound: testLease, wantDeadline: true},                      // one call could take the whole lease
		{bound: -time.Second, wantDeadline: true},                   // nonsense: not trusted
	} {
		clk := clock.NewFake(epoch)
		st := &deadlineStore{Store: plainStore{newMemstore(t, clk)}, inProcess: tc.inProcess, bound: tc.bound}
		rcv := newReceiver(t, st, func(ctx context.Context, o order) (string, error) { return "ok", nil },
			&dedup.Config{Clock: clk, Lease: testLease})
		res, err := rcv.Handle(context.Background(), order{ID: "o-1"})
		require.NoError(t, err)
		require.Equal(t, delivery.StatusProcessed, res.Status)
		require.Equal(t, tc.wantDeadline, st.deadline.Load(), "%+v", tc)
	}
}

// completeCtxStore records what the context of each Complete carries.
type completeCtxStore struct {
	*memstore.Store // keeps InProcess: the receiver sets no timeout
	value           atomic.Value
	errs            atomic.Int64 // Completes whose context had ended
	cancellable     atomic.Int64 // Completes whose context could end
}

type valueKey struct{}

func (s *completeCtxStore) Complete(ctx context.Context, req store.CompleteRequest) error {
	s.value.Store(ctx.Value(valueKey{}))
	if ctx.Err() != nil {
		s.errs.Add(1)
	}
	if ctx.Done() != nil {
		s.cancellable.Add(1)
	}
	return s.Store.Complete(ctx, req)
}

// TestCompletionKeepsCallerValuesNotItsCancellation: a store that bounds
// its own calls completes under the caller's values (a trace, a tenant),
// never under its cancellation, even when the caller's context ended while
// the handler ran.
func TestCompletionKeepsCallerValuesNotItsCancellation(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	st := &completeCtxStore{Store: newMemstore(t, clk)}
	ctx, cancel := context.WithCancel(context.WithValue(t.Context(), valueKey{}, "tenant-7"))
	rcv := newReceiver(t, st, func(context.Context, order) (string, error) {
		cancel() // a shutdown while the handler works
		return "charged", nil
	}, &dedup.Config{Clock: clk, Lease: testLease})

	res, err := rcv.Handle(ctx, order{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, res.Status)
	require.NoError(t, res.Problem, "the success is recorded")
	require.Equal(t, "tenant-7", st.value.Load(), "the caller's values reach the store")
	require.Zero(t, st.errs.Load(), "the caller's cancellation does not")
	require.Zero(t, st.cancellable.Load())

	dup, err := rcv.Handle(t.Context(), order{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusDuplicate, dup.Status)
}
