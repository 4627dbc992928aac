package dedup_test

import (
	"context"
	"fmt"
	"math/rand/v2"
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
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store"
)

// TestExactlyOnceUnderContention: 64 workers deliver each of 1,000 ids 3
// times in random order, and the handler fails the first attempt of one id
// in ten, so the simulated broker redelivers. Each id's effect happens exactly once,
// none is lost, and every duplicate gets the first result.
func TestExactlyOnceUnderContention(t *testing.T) {
	t.Parallel()
	const ids, copies, workers = 1000, 3, 64
	st := newMemstore(t, clock.Real())

	var effects [ids]atomic.Int64
	var nonce atomic.Int64
	rcv := newReceiver(t, st, func(ctx context.Context, o order) (string, error) {
		var n int
		fmt.Sscan(o.ID[2:], &n)
		// One id in ten fails its first attempt (a random failure rate
		// would exhaust MaxAttempts for some id in about one run of a
		// hundred, which is not what this test is about).
		if held, _ := store.ClaimFromContext(ctx); n%10 == 0 && held.Attempt == 1 {
			return "", errTransient
		}
		effects[n].Add(1)
		return fmt.Sprintf("receipt-%s-%d", o.ID, nonce.Add(1)), nil
	}, &dedup.Config{Namespace: "contention", Backoff: dedup.BackoffFunc(func(int) time.Duration { return 0 })})

	deliveries := make([]order, 0, ids*copies)
	for i := range ids {
		for range copies {
			deliveries = append(deliveries, order{ID: fmt.Sprintf("o-%d", i)})
		}
	}
	rand.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })

	var mu sync.Mutex
	answers := make(map[string][]string) // id -> every value acked
	queue := make(chan order, len(deliveries))
	for _, d := range deliveries {
		queue <- d
	}
	var pending sync.WaitGroup
	pending.Add(len(deliveries))
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for o := range queue {
				res, err := rcv.Handle(context.Background(), o)
				switch d := adapter.Bind(rcv).Decide(res, err); d.Action {
				case delivery.Ack:
					require.NoError(t, err)
					mu.Lock()
					answers[o.ID] = append(answers[o.ID], res.Value)
					mu.Unlock()
					pending.Done()
				case delivery.Retry:
					queue <- o // the broker redelivers
				default:
					t.Errorf("%s: unexpected %v (%v)", o.ID, d.Action, err)
					pending.Done()
				}
			}
		})
	}
	pending.Wait()
	close(queue)
	testenv.Wait(t, &wg, "the deliveries to return")

	for i := range ids {
		id := fmt.Sprintf("o-%d", i)
		require.Equal(t, int64(1), effects[i].Load(), "effects of %s", id)
		require.Len(t, answers[id], copies, "acks of %s", id)
		for _, v := range answers[id] {
			require.Equal(t, answers[id][0], v, "%s: every delivery gets the first result", id)
		}
	}
}

// TestConcurrentDuplicatesShareOneClaim: concurrent deliveries of one key
// inside one process wait for the first instead of each asking the store.
// The store here cannot answer from memory (no Peeker), so without the
// shared flight the waiting deliveries would find the key in flight.
func TestConcurrentDuplicatesShareOneClaim(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) { testConcurrentDuplicatesShareOneClaim(t) })
}

func testConcurrentDuplicatesShareOneClaim(t *testing.T) {
	const n = 50
	st := &faultyStore{Store: newMemstore(t, clock.Real())}
	release := make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce)
	var calls atomic.Int64
	rcv := newReceiver(t, st, func(ctx context.Context, o order) (string, error) {
		calls.Add(1)
		<-release
		return "first", nil
	}, nil)

	var started, wg sync.WaitGroup
	started.Add(n)
	results := make([]dedup.Result[string], n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			started.Done()
			results[i], errs[i] = rcv.Handle(context.Background(), order{ID: "o-1"})
		})
	}
	started.Wait()
	synctest.Wait() // every delivery is blocked: the first in its handler, the others behind it
	require.Equal(t, n-1, dedup.Waiting(rcv, "default:o-1"), "the duplicates wait on the first delivery")
	releaseOnce()
	testenv.Wait(t, &wg, "the deliveries to return")

	processed := 0
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, "first", results[i].Value)
		require.NotEqual(t, delivery.StatusInFlight, results[i].Status)
		if results[i].Status == delivery.StatusProcessed {
			processed++
		}
	}
	require.Equal(t, 1, processed)
	require.Equal(t, int64(1), calls.Load())
	require.Less(t, st.acquires.Load(), int64(n), "waiters did not each go to the store")
}

// TestConcurrentDuplicateWithOtherPayload: a waiter whose fingerprint
// differs from the first delivery's gets ErrKeyReused, as the store would
// have answered.
func TestConcurrentDuplicateWithOtherPayload(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) { testConcurrentDuplicateWithOtherPayload(t) })
}

func testConcurrentDuplicateWithOtherPayload(t *testing.T) {
	st := &faultyStore{Store: newMemstore(t, clock.Real())}
	entered := make(chan struct{})
	release := make(chan struct{})
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce)
	rcv, err := dedup.NewReceiver(st, func(o signedOrder) (string, error) { return o.ID, nil },
		func(ctx context.Context, o signedOrder) (int, error) {
			close(entered)
			<-release
			return o.Amount, nil
		}, nil)
	require.NoError(t, err)

	var wg sync.WaitGroup
	var firstErr error
	wg.Go(func() { _, firstErr = rcv.Handle(context.Background(), signedOrder{ID: "o-1", Amount: 10}) })
	testenv.Recv(t, entered, "the handler to start")
	var otherErr error
	wg.Go(func() { _, otherErr = rcv.Handle(context.Background(), signedOrder{ID: "o-1", Amount: 99}) })
	synctest.Wait() // the second delivery is blocked behind the first, in flight
	require.Equal(t, 1, dedup.Waiting(rcv, "default:o-1"), "the other payload waits on the first delivery")
	releaseOnce()
	testenv.Wait(t, &wg, "the deliveries to return")
	require.NoError(t, firstErr)
	require.ErrorIs(t, otherErr, dedup.ErrKeyReused)
}

// TestManyKeysInFlightAtOnce: with many more keys in flight than the
// receiver has lists for them, each duplicate waits for the delivery of its
// own key and shares its value, whichever order the first deliveries end
// in; once they all ended, no key is left in flight.
func TestManyKeysInFlightAtOnce(t *testing.T) {
	t.Parallel()
	const keys = 1500
	release := make([]chan struct{}, keys)
	for i := range release {
		release[i] = make(chan struct{})
	}
	started := make(chan struct{}, keys)
	rcv := newReceiver(t, newMemstore(t, clock.Real()), func(ctx context.Context, o order) (string, error) {
		var n int
		fmt.Sscan(o.ID[2:], &n)
		started <- struct{}{}
		<-release[n]
		return "value-of-" + o.ID, nil
	}, nil)
	type outcome struct {
		res dedup.Result[string]
		err error
	}
	firsts, dups := make([]outcome, keys), make([]outcome, keys)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Go(func() {
			firsts[i].res, firsts[i].err = rcv.Handle(context.Background(), order{ID: fmt.Sprintf("o-%d", i)})
		})
	}
	for range keys {
		testenv.Recv(t, started, "every first delivery's handler to start")
	}
	require.Equal(t, keys, dedup.InFlight(rcv))
	for i := range keys {
		wg.Go(func() {
			dups[i].res, dups[i].err = rcv.Handle(context.Background(), order{ID: fmt.Sprintf("o-%d", i)})
		})
	}
	for i := range keys {
		key := fmt.Sprintf("default:o-%d", i)
		require.Eventually(t, func() bool { return dedup.Waiting(rcv, key) == 1 }, 10*time.Second, time.Millisecond, "the duplicate of %s waits for it", key)
	}
	for _, i := range rand.Perm(keys) {
		close(release[i])
	}
	testenv.Wait(t, &wg, "the deliveries to return")
	for i := range keys {
		want := fmt.Sprintf("value-of-o-%d", i)
		require.NoError(t, firsts[i].err)
		require.Equal(t, delivery.StatusProcessed, firsts[i].res.Status)
		require.Equal(t, want, firsts[i].res.Value)
		require.NoError(t, dups[i].err)
		require.Equal(t, delivery.StatusDuplicate, dups[i].res.Status, "o-%d", i)
		require.Equal(t, want, dups[i].res.Value, "the duplicate shares its own key's value")
	}
	require.Zero(t, dedup.InFlight(rcv), "no key is left in flight")
}
