package dedup_test

import (
	"context"
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
)

// outcome is a Handle result sent from the goroutine that ran it.
type outcome struct {
	res dedup.Result[string]
	err error
}

// handleAsync runs rcv.Handle on its own goroutine.
func handleAsync(ctx context.Context, rcv *dedup.Receiver[order, string], o order) <-chan outcome {
	ch := make(chan outcome, 1)
	go func() {
		res, err := rcv.Handle(ctx, o)
		ch <- outcome{res, err}
	}()
	return ch
}

// waitFor waits until every other goroutine of the test's bubble
// (testing/synctest) is durably blocked, and requires cond then.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	synctest.Wait()
	require.Truef(t, cond(), "every goroutine is blocked, and still not: %s", what)
}

// advanceUntil advances clk by step, each time once every other goroutine
// of the test's bubble is durably blocked, until ch yields; it fails after
// maxAdvances steps.
func advanceUntil(t *testing.T, clk *clock.Fake, step time.Duration, ch <-chan outcome) outcome {
	t.Helper()
	for range maxAdvances {
		synctest.Wait()
		select {
		case o := <-ch:
			return o
		default:
		}
		clk.Advance(step)
	}
	t.Fatalf("Handle did not return within %d advances of %v", maxAdvances, step)
	panic("unreachable")
}

// maxAdvances bounds advanceUntil: far more steps than any test needs.
const maxAdvances = 10_000

// TestCompletionRetriedWhileLeaseHolds: the store goes down between the
// handler's success and its completion. The receiver keeps retrying the
// completion while its lease holds, answers in-process duplicates from the
// result it holds meanwhile, and records it once the store is back: another
// process never runs the handler a second time.
func TestCompletionRetriedWhileLeaseHolds(t *testing.T) {
	t.Parallel()
	synctest.Test(t, testCompletionRetriedWhileLeaseHolds)
}

func testCompletionRetriedWhileLeaseHolds(t *testing.T) {
	clk := clock.NewFake(epoch)
	st := &faultyStore{Store: newMemstore(t, clk)}
	var effects atomic.Int64
	h := func(ctx context.Context, o order) (string, error) {
		effects.Add(1)
		st.down.Store(true) // the store goes away while the handler runs
		return "charged", nil
	}
	cfg := &dedup.Config{Clock: clk, Lease: testLease, Namespace: "billing"}
	rcv := newReceiver(t, st, h, cfg)
	other := newReceiver(t, st, h, cfg) // another process on the same store

	first := handleAsync(t.Context(), rcv, order{ID: "o-1"})
	waitFor(t, "the completion to be retried", func() bool { return clk.Pending() >= 2 }) // the heartbeat and a retry's wait

	dup, err := rcv.Handle(t.Context(), order{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusDuplicate, dup.Status, "an in-process duplicate is answered from the result held")
	require.Equal(t, "charged", dup.Value)
	_, err = other.Handle(t.Context(), order{ID: "o-1"})
	require.ErrorIs(t, err, dedup.ErrStoreUnavailable, "fail-closed elsewhere while the store is down")

	clk.Advance(testLease / 2) // an outage shorter than the lease
	st.down.Store(false)
	o := advanceUntil(t, clk, 100*time.Millisecond, first)
	require.NoError(t, o.err)
	require.Equal(t, delivery.StatusProcessed, o.res.Status)
	require.NoError(t, o.res.Problem, "the completion was recorded once the store came back")

	clk.Advance(3 * testLease) // long past the first claim's lease
	res, err := other.Handle(t.Context(), order{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusDuplicate, res.Status)
	require.Equal(t, "charged", res.Value)
	require.Equal(t, int64(1), effects.Load(), "no double effect")
	require.Zero(t, rcv.Stats().ResultsNotStored)
}

// TestCompletionRetriedUnderNoWait: with NoWait the first delivery joins
// no in-process flight, and a completion retried while the store is down
// still records the success once it is back.
func TestCompletionRetriedUnderNoWait(t *testing.T) {
	t.Parallel()
	synctest.Test(t, testCompletionRetriedUnderNoWait)
}

func testCompletionRetriedUnderNoWait(t *testing.T) {
	clk := clock.NewFake(epoch)
	st := &faultyStore{Store: newMemstore(t, clk)}
	var effects atomic.Int64
	rcv := newReceiver(t, st, func(ctx context.Context, o order) (string, error) {
		effects.Add(1)
		st.down.Store(true) // the store goes away while the handler runs
		return "charged", nil
	}, &dedup.Config{Clock: clk, Lease: testLease, NoWait: true})

	first := handleAsync(t.Context(), rcv, order{ID: "o-1"})
	waitFor(t, "the completion to be retried", func() bool { return clk.Pending() >= 2 }) // the heartbeat and a retry's wait
	clk.Advance(testLease / 2)
	st.down.Store(false)
	o := advanceUntil(t, clk, 100*time.Millisecond, first)
	require.NoError(t, o.err)
	require.Equal(t, delivery.StatusProcessed, o.res.Status)
	require.NoError(t, o.res.Problem, "the completion was recorded once the store came back")
	res, err := rcv.Handle(t.Context(), order{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusDuplicate, res.Status)
	require.Equal(t, int64(1), effects.Load())
}

// TestCompletionGivesUpWhenLeaseEnds: a store that stays down past the
// lease: the receiver stops retrying before the lease ends, acks (the
// effect happened) and reports the result as not stored.
func TestCompletionGivesUpWhenLeaseEnds(t *testing.T) {
	t.Parallel()
	synctest.Test(t, testCompletionGivesUpWhenLeaseEnds)
}

func testCompletionGivesUpWhenLeaseEnds(t *testing.T) {
	clk := clock.NewFake(epoch)
	st := &faultyStore{Store: newMemstore(t, clk)}
	var gaveUpAt time.Time
	rcv := newReceiver(t, st, func(ctx context.Context, o order) (string, error) {
		st.down.Store(true)
		return "charged", nil
	}, &dedup.Config{Clock: clk, Lease: testLease})

	o := advanceUntil(t, clk, time.Second, handleAsync(t.Context(), rcv, order{ID: "o-1"}))
	gaveUpAt = clk.Now()
	require.NoError(t, o.err)
	require.Equal(t, delivery.StatusProcessed, o.res.Status)
	require.ErrorIs(t, o.res.Problem, dedup.ErrResultNotStored)
	require.ErrorIs(t, o.res.Problem, dedup.ErrStoreUnavailable)
	require.Equal(t, delivery.Ack, adapter.Bind(rcv).Decide(o.res, o.err).Action)
	require.True(t, gaveUpAt.Before(epoch.Add(testLease+time.Second)), "gave up at %v, within the lease (one step of slack)", gaveUpAt.Sub(epoch))
	require.Equal(t, uint64(1), rcv.Stats().ResultsNotStored)
}

// TestUnconfirmedLeaseEndsLocally: a worker cut off from the store cannot
// extend its lease. When the lease ends by its own clock (less a margin),
// its handler is cancelled with ErrLeaseLost, before another process could
// take the key over, and the broker stops hearing that it is in progress.
func TestUnconfirmedLeaseEndsLocally(t *testing.T) {
	t.Parallel()
	synctest.Test(t, testUnconfirmedLeaseEndsLocally)
}

func testUnconfirmedLeaseEndsLocally(t *testing.T) {
	clk := clock.NewFake(epoch)
	st := &faultyStore{Store: newMemstore(t, clk)}
	var beats atomic.Int64
	var cancelledAt atomic.Int64
	keyOf := func(o beatingOrder) (string, error) { return o.ID, nil }
	rcv, err := dedup.NewReceiver(st, keyOf, func(ctx context.Context, o beatingOrder) (string, error) {
		st.down.Store(true) // cut off from the store
		<-ctx.Done()
		cancelledAt.Store(int64(clk.Now().Sub(epoch)))
		return "", context.Cause(ctx)
	}, &dedup.Config{Clock: clk, Lease: testLease})
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() {
		_, err := rcv.Handle(context.Background(), beatingOrder{ID: "o-1", beats: &beats})
		done <- err
	}()
	var herr error
	for i := 0; herr == nil; i++ {
		synctest.Wait()
		select {
		case herr = <-done:
			continue
		default:
		}
		require.Less(t, i, maxAdvances, "the handler was never cancelled")
		clk.Advance(time.Second)
	}
	require.ErrorIs(t, herr, dedup.ErrLeaseLost)
	require.Less(t, time.Duration(cancelledAt.Load()), testLease, "cancelled before the store's lease could end")
	require.Zero(t, beats.Load(), "no InProgress for a lease that was never confirmed")
}

// hangingStore is down from when down is set until hangs completions have
// failed: every call then hangs as against a store whose client keeps
// dialling, until its context ends or the store's own bound (like
// redisstore's Timeout) passes, and fails.
type hangingStore struct {
	plainStore
	bound     time.Duration
	hangs     int64
	down      atomic.Bool
	completes atomic.Int64
}

func (s *hangingStore) CallTimeout() time.Duration { return s.bound }

func (s *hangingStore) hang(ctx context.Context, op, key string) error {
	select {
	case <-ctx.Done():
	case <-time.After(s.bound):
	}
	return &store.OpError{Op: op, Key: key, Err: errConnRefused}
}

func (s *hangingStore) Complete(ctx context.Context, req store.CompleteRequest) error {
	if !s.down.Load() {
		return s.plainStore.Complete(ctx, req)
	}
	err := s.hang(ctx, "complete", req.Key)
	if s.completes.Add(1) == s.hangs {
		s.down.Store(false)
	}
	return err
}

func (s *hangingStore) Extend(ctx context.Context, req store.ExtendRequest) error {
	if !s.down.Load() {
		return s.plainStore.Extend(ctx, req)
	}
	return s.hang(ctx, "extend", req.Key)
}

// TestCompletionRetriesFitInTheLease: each completion attempt is bounded by
// a fifth of the lease, so an outage shorter than the lease (here two
// attempts against a store that hangs up to its own bound, which equals
// the lease) costs retries, never the record: the duplicate is answered
// and the handler ran once.
func TestCompletionRetriesFitInTheLease(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	st := &hangingStore{plainStore: plainStore{newMemstore(t, clock.Real())}, bound: lease, hangs: 2}
	var runs atomic.Int64
	rcv := newReceiver(t, st, func(ctx context.Context, o order) (string, error) {
		runs.Add(1)
		st.down.Store(true) // the store goes down after the effect
		return "charged " + o.ID, nil
	}, &dedup.Config{Clock: clock.Real(), Lease: lease})

	res, err := rcv.Handle(t.Context(), order{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, res.Status)
	require.NoError(t, res.Problem, "the completion was retried within the lease")
	require.Equal(t, int64(2), st.completes.Load(), "two attempts hung before the third stored the result")

	res, err = rcv.Handle(t.Context(), order{ID: "o-1"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusDuplicate, res.Status)
	require.Equal(t, "charged o-1", res.Value)
	require.Equal(t, int64(1), runs.Load())
	require.Zero(t, rcv.Stats().ResultsNotStored)
}
