package dedup_test

import (
	"context"
	"errors"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/memstore"
)

// order is the message type of these tests.
type order struct {
	ID     string
	Amount int
}

func orderID(o order) (string, error) { return o.ID, nil }

// epoch is where fake clocks start.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// newMemstore returns a memstore on clk.
func newMemstore(t testing.TB, clk clock.Clock) *memstore.Store {
	t.Helper()
	s, err := memstore.New(&memstore.Options{Clock: clk})
	require.NoError(t, err)
	return s
}

// newReceiver returns a receiver on store with cfg (nil: a fake clock at epoch).
func newReceiver[R any](t testing.TB, st store.Store, h dedup.Handler[order, R], cfg *dedup.Config) *dedup.Receiver[order, R] {
	t.Helper()
	rcv, err := dedup.NewReceiver(st, orderID, h, cfg)
	require.NoError(t, err)
	return rcv
}

// errConnRefused stands for what a network store returns when its server is down.
var errConnRefused = &netError{syscall.ECONNREFUSED}

type netError struct{ errno syscall.Errno }

func (e *netError) Error() string { return "dial tcp 127.0.0.1:6379: " + e.errno.Error() }
func (e *netError) Unwrap() error { return e.errno }

// faultyStore wraps a real store: while down is set, every call fails as a
// store whose server is unreachable. It counts the calls that reach it.
type faultyStore struct {
	store.Store
	down     atomic.Bool
	acquires atomic.Int64
}

func (s *faultyStore) Acquire(ctx context.Context, req store.AcquireRequest) (store.Claim, error) {
	s.acquires.Add(1)
	if s.down.Load() {
		return store.Claim{}, errConnRefused
	}
	return s.Store.Acquire(ctx, req)
}

func (s *faultyStore) Complete(ctx context.Context, req store.CompleteRequest) error {
	if s.down.Load() {
		return errConnRefused
	}
	return s.Store.Complete(ctx, req)
}

func (s *faultyStore) Release(ctx context.Context, req store.ReleaseRequest) error {
	if s.down.Load() {
		return errConnRefused
	}
	return s.Store.Release(ctx, req)
}

func (s *faultyStore) Extend(ctx context.Context, req store.ExtendRequest) error {
	if s.down.Load() {
		return errConnRefused
	}
	return s.Store.Extend(ctx, req)
}

var _ store.Store = (*faultyStore)(nil)

// errTransient is a handler error worth retrying.
var errTransient = errors.New("payment gateway timeout")
