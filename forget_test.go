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
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/store"
)

// forgetStore is a store Forget is tested on, with the clock its leases
// are measured by: read it, and move it past a lease.
type forgetStore struct {
	name string
	new  func(t *testing.T) (s store.Store, cfg *dedup.Config, now func() time.Time, advance func(time.Duration))
}

func forgetStores() []forgetStore {
	return []forgetStore{
		{name: "memstore", new: func(t *testing.T) (store.Store, *dedup.Config, func() time.Time, func(time.Duration)) {
			clk := clock.NewFake(epoch)
			return newMemstore(t, clk), &dedup.Config{Clock: clk}, clk.Now, clk.Advance
		}},
	}
}

// TestForgetHeldKey: a Forget while a delivery runs the handler is refused
// with ErrKeyHeld and deletes nothing, so a second delivery of the message
// (to another consumer) finds the key in flight and the handler never runs twice at once. (The
// Forget of old deleted the claim: the second delivery claimed the key
// afresh and ran the handler beside the first.) Once the first delivery
// completed, Forget deletes the record and the next delivery runs again.
func TestForgetHeldKey(t *testing.T) {
	t.Parallel()
	for _, fs := range forgetStores() {
		t.Run(fs.name, func(t *testing.T) {
			t.Parallel()
			st, cfg, _, _ := fs.new(t)
			var (
				calls, running, most atomic.Int64
				started              = make(chan struct{})
				release              = make(chan struct{})
				once                 sync.Once
			)
			handler := func(ctx context.Context, o order) (string, error) {
				n := running.Add(1)
				defer running.Add(-1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				if calls.Add(1) == 1 {
					once.Do(func() { close(started) })
					select {
					case <-release:
					case <-ctx.Done():
						return "", ctx.Err()
					}
				}
				return "charged", nil
			}
			// Two consumers of one store, as two processes are: a
			// receiver holds a second delivery in its own process back
			// by itself, whatever the store says.
			rcv := newReceiver(t, st, handler, cfg)
			other := newReceiver(t, st, handler, cfg)

			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			first := make(chan error, 1)
			go func() {
				res, err := rcv.Handle(ctx, order{ID: "o-1"})
				if err == nil && res.Status != delivery.StatusProcessed {
					err = errStatus(res.Status)
				}
				first <- err
			}()
			select {
			case <-started:
			case <-ctx.Done():
				t.Fatal("the handler did not start")
			}

			forgot := rcv.Forget(ctx, "o-1")
			res, err := other.Handle(ctx, order{ID: "o-1"})
			require.NoError(t, err)
			require.Equal(t, int64(1), most.Load(), "the handler never runs twice at once")
			require.Equal(t, int64(1), calls.Load(), "the handler ran once")
			require.Equal(t, delivery.StatusInFlight, res.Status, "the second delivery finds the key in flight")
			require.ErrorIs(t, forgot, dedup.ErrKeyHeld, "Forget of a key a delivery holds")

			close(release)
			select {
			case err := <-first:
				require.NoError(t, err)
			case <-ctx.Done():
				t.Fatal("the first delivery did not finish")
			}

			require.NoError(t, rcv.Forget(ctx, "o-1"), "Forget of a completed record")
			res, err = other.Handle(ctx, order{ID: "o-1"})
			require.NoError(t, err)
			require.Equal(t, delivery.StatusProcessed, res.Status, "after Forget the message runs again")
			require.Equal(t, 1, res.Attempt, "the record starts afresh")
			require.Equal(t, int64(2), calls.Load())
			require.Equal(t, int64(1), most.Load())

			require.NoError(t, rcv.Forget(ctx, "never-seen"), "Forget of an id with no record is not an error")
		})
	}
}

// TestForgetEndedLease: the claim of a worker that crashed stays until its
// lease ends; Forget refuses it before and deletes it after, and the next
// delivery runs the handler afresh.
func TestForgetEndedLease(t *testing.T) {
	t.Parallel()
	for _, fs := range forgetStores() {
		t.Run(fs.name, func(t *testing.T) {
			t.Parallel()
			st, cfg, now, advance := fs.new(t)
			cfg.Namespace = "billing"
			var calls atomic.Int64
			rcv := newReceiver(t, st, func(ctx context.Context, o order) (string, error) {
				calls.Add(1)
				return "charged", nil
			}, cfg)

			// A crashed worker's claim: taken, never settled.
			const lease = 200 * time.Millisecond
			c, err := st.Acquire(t.Context(), store.AcquireRequest{Key: "billing:o-2", Lease: lease})
			require.NoError(t, err)
			require.True(t, c.Acquired)
			if err := rcv.Forget(t.Context(), "o-2"); err != nil {
				require.ErrorIs(t, err, dedup.ErrKeyHeld)
				// Refused: the claim is still there.
				in := st.(store.Inspector)
				rec, err := in.Get(t.Context(), "billing:o-2")
				require.NoError(t, err)
				require.Equal(t, store.StateProcessing, rec.State)
			} else {
				// Only a machine too slow to call Forget within the lease
				// gets here.
				require.False(t, now().Before(c.Record.LeaseUntil), "Forget deleted a claim under a live lease")
			}

			advance(2 * lease)
			require.NoError(t, rcv.Forget(t.Context(), "o-2"), "Forget of a claim whose lease ended")
			res, err := rcv.Handle(t.Context(), order{ID: "o-2"})
			require.NoError(t, err)
			require.Equal(t, delivery.StatusProcessed, res.Status)
			require.Equal(t, 1, res.Attempt, "the crashed claim was forgotten")
			require.Equal(t, int64(1), calls.Load())
			require.ErrorIs(t, st.Complete(t.Context(), store.CompleteRequest{Key: "billing:o-2", Token: c.Token, Retention: time.Minute}),
				store.ErrLeaseLost, "the crashed worker's token holds nothing")
		})
	}
}

type errStatus delivery.Status

func (e errStatus) Error() string { return "unexpected status " + delivery.Status(e).String() }
