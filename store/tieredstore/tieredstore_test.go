package tieredstore_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/store/memstore"
	"github.com/dedup-go/dedup/store/storetest"
	"github.com/dedup-go/dedup/store/tieredstore"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// counting is a remote store that counts the calls reaching it.
type counting struct {
	*memstore.Store
	calls atomic.Int64
}

func (c *counting) Acquire(ctx context.Context, key string, req dedup.AcquireRequest) (dedup.Claim, error) {
	c.calls.Add(1)
	return c.Store.Acquire(ctx, key, req)
}

func (c *counting) Complete(ctx context.Context, key string, token dedup.Token, result []byte, retention time.Duration) error {
	c.calls.Add(1)
	return c.Store.Complete(ctx, key, token, result, retention)
}

func (c *counting) Release(ctx context.Context, key string, token dedup.Token, f dedup.Failure) error {
	c.calls.Add(1)
	return c.Store.Release(ctx, key, token, f)
}

// setup returns a tiered store over a counting memstore, both on one fake
// clock.
func setup(t *testing.T, opts *tieredstore.Options) (*tieredstore.Store, *counting, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(epoch)
	m, err := memstore.New(&memstore.Options{Clock: clk})
	require.NoError(t, err)
	remote := &counting{Store: m}
	var o tieredstore.Options
	if opts != nil {
		o = *opts
	}
	o.Clock = clk
	s, err := tieredstore.New(remote, &o)
	require.NoError(t, err)
	return s, remote, clk
}

func TestConformanceOverMemstore(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		s, _, clk := setup(t, &tieredstore.Options{ClockSkew: time.Nanosecond})
		return storetest.Harness{Store: s, Advance: clk.Advance, Now: clk.Now}
	})
}

func TestNewRefusesBadOptions(t *testing.T) {
	t.Parallel()
	_, err := tieredstore.New(nil, nil)
	require.ErrorIs(t, err, dedup.ErrInvalidConfig)
	m, err := memstore.New(nil)
	require.NoError(t, err)
	for _, o := range []tieredstore.Options{{Capacity: -1}, {MaxLocalTTL: -1}, {ClockSkew: -1}} {
		_, err := tieredstore.New(m, &o)
		require.ErrorIs(t, err, dedup.ErrInvalidConfig, "%+v", o)
	}
}

// TestLocalHitNoRemoteCall: once a record is completed, duplicates are
// answered without calling the remote store, by Peek and by Acquire alike.
func TestLocalHitNoRemoteCall(t *testing.T) {
	t.Parallel()
	s, remote, _ := setup(t, nil)
	ctx := t.Context()
	c, err := s.Acquire(ctx, "ns:a", dedup.AcquireRequest{Lease: time.Minute, Fingerprint: "fp"})
	require.NoError(t, err)
	require.NoError(t, s.Complete(ctx, "ns:a", c.Token, []byte("r"), time.Hour))
	before := remote.calls.Load()

	for range 10 {
		rec := s.Peek("ns:", "a")
		require.NotNil(t, rec)
		require.Equal(t, "r", string(rec.Result))
		require.Equal(t, "fp", rec.Fingerprint)
		dup, err := s.Acquire(ctx, "ns:a", dedup.AcquireRequest{Lease: time.Minute})
		require.NoError(t, err)
		require.False(t, dup.Acquired)
		require.Equal(t, dedup.StateCompleted, dup.Record.State)
	}
	_, err = s.Acquire(ctx, "ns:a", dedup.AcquireRequest{Lease: time.Minute, Fingerprint: "other"})
	require.ErrorIs(t, err, dedup.ErrKeyReused, "a local hit checks the fingerprint")
	require.Equal(t, before, remote.calls.Load(), "a local hit called the remote store")
	require.EqualValues(t, 21, s.Stats().LocalHits)
}

// TestOnlyConfirmedCompletedCached: processing and failed records are
// never answered locally, and a completion the remote store refused is not
// cached.
func TestOnlyConfirmedCompletedCached(t *testing.T) {
	t.Parallel()
	s, remote, clk := setup(t, nil)
	ctx := t.Context()
	lease := dedup.AcquireRequest{Lease: time.Minute}

	c, err := s.Acquire(ctx, "ns:p", lease)
	require.NoError(t, err)
	require.Nil(t, s.Peek("ns:", "p"), "processing record cached")
	require.NoError(t, s.Release(ctx, "ns:p", c.Token, dedup.Failure{Error: "boom", Retention: time.Hour}))
	require.Nil(t, s.Peek("ns:", "p"), "failed record cached")
	retry, err := s.Acquire(ctx, "ns:p", lease)
	require.NoError(t, err)
	require.True(t, retry.Acquired, "a failed record is retried through the remote store")
	require.Equal(t, 2, retry.Record.Attempt)

	// A worker whose lease was taken over completes nothing and caches
	// nothing.
	old, err := s.Acquire(ctx, "ns:q", lease)
	require.NoError(t, err)
	clk.Advance(time.Minute)
	other, err := remote.Acquire(ctx, "ns:q", lease) // another process takes over
	require.NoError(t, err)
	require.True(t, other.Acquired)
	require.ErrorIs(t, s.Complete(ctx, "ns:q", old.Token, []byte("late"), time.Hour), dedup.ErrLeaseLost)
	require.Nil(t, s.Peek("ns:", "q"), "a refused completion was cached")
	require.Zero(t, s.Stats().Cached)
}

// TestLocalCopyNeverOutlivesRemote: a record this process completed expires
// locally no later than remotely; one learned from the remote store
// expires ClockSkew before the remote's expiry; MaxLocalTTL caps both.
func TestLocalCopyNeverOutlivesRemote(t *testing.T) {
	t.Parallel()
	s, remote, clk := setup(t, &tieredstore.Options{MaxLocalTTL: time.Hour, ClockSkew: 10 * time.Second})
	ctx := t.Context()
	lease := dedup.AcquireRequest{Lease: time.Minute}

	// Completed here, retention 1 minute.
	c, err := s.Acquire(ctx, "ns:own", lease)
	require.NoError(t, err)
	require.NoError(t, s.Complete(ctx, "ns:own", c.Token, nil, time.Minute))
	// Completed by another process, retention 1 minute, learned locally.
	rc, err := remote.Acquire(ctx, "ns:learned", lease)
	require.NoError(t, err)
	require.NoError(t, remote.Complete(ctx, "ns:learned", rc.Token, nil, time.Minute))
	learned, err := s.Acquire(ctx, "ns:learned", lease)
	require.NoError(t, err)
	require.Equal(t, dedup.StateCompleted, learned.Record.State)
	// Completed here with a retention past MaxLocalTTL.
	c, err = s.Acquire(ctx, "ns:long", lease)
	require.NoError(t, err)
	require.NoError(t, s.Complete(ctx, "ns:long", c.Token, nil, 48*time.Hour))

	require.NotNil(t, s.Peek("ns:", "learned"))
	clk.Advance(50 * time.Second)
	require.Nil(t, s.Peek("ns:", "learned"), "a learned copy expires ClockSkew early")
	require.NotNil(t, s.Peek("ns:", "own"))
	clk.Advance(10 * time.Second)
	require.Nil(t, s.Peek("ns:", "own"), "an own copy expires with the retention")
	require.NotNil(t, s.Peek("ns:", "long"))
	clk.Advance(time.Hour)
	require.Nil(t, s.Peek("ns:", "long"), "MaxLocalTTL caps a copy")
	rec, err := remote.Get(ctx, "ns:long")
	require.NoError(t, err, "the remote record is still there")
	require.Equal(t, dedup.StateCompleted, rec.State)
}

// TestDeleteClearsLocal: an operator's Delete forgets the local copy too,
// so the message may run again.
func TestDeleteClearsLocal(t *testing.T) {
	t.Parallel()
	s, _, _ := setup(t, nil)
	ctx := t.Context()
	c, err := s.Acquire(ctx, "ns:d", dedup.AcquireRequest{Lease: time.Minute})
	require.NoError(t, err)
	require.NoError(t, s.Complete(ctx, "ns:d", c.Token, nil, time.Hour))
	require.NotNil(t, s.Peek("ns:", "d"))
	require.NoError(t, s.Delete(ctx, "ns:d"))
	require.Nil(t, s.Peek("ns:", "d"))
	again, err := s.Acquire(ctx, "ns:d", dedup.AcquireRequest{Lease: time.Minute})
	require.NoError(t, err)
	require.True(t, again.Acquired)
}

// TestRemoteWithoutAbilities: a remote store that is neither a BatchStore
// nor an Inspector still batches (one call per key), and inspection says
// what is missing.
func TestRemoteWithoutAbilities(t *testing.T) {
	t.Parallel()
	m, err := memstore.New(nil)
	require.NoError(t, err)
	s, err := tieredstore.New(struct{ dedup.Store }{m}, nil)
	require.NoError(t, err)
	ctx := t.Context()
	out := s.AcquireBatch(ctx, []dedup.AcquireItem{{Key: "ns:a", Request: dedup.AcquireRequest{Lease: time.Minute}}})
	require.NoError(t, out[0].Err)
	require.True(t, out[0].Claim.Acquired)
	require.Equal(t, []error{nil}, s.CompleteBatch(ctx, []dedup.CompleteItem{{Key: "ns:a", Token: out[0].Claim.Token, Retention: time.Hour}}))
	require.NotNil(t, s.Peek("ns:", "a"))
	_, err = s.Get(ctx, "ns:a")
	require.ErrorIs(t, err, dedup.ErrInvalidConfig)
	require.ErrorContains(t, err, "not a dedup.Inspector")
}

// TestHeldClaimsBounded: the claims noted for caching are bounded by
// Capacity; past it a completion is simply not cached, and claims whose
// lease ended make room again.
func TestHeldClaimsBounded(t *testing.T) {
	t.Parallel()
	s, _, clk := setup(t, &tieredstore.Options{Capacity: 2})
	ctx := t.Context()
	acquire := func(id string) dedup.Token {
		c, err := s.Acquire(ctx, "ns:"+id, dedup.AcquireRequest{Lease: time.Minute})
		require.NoError(t, err)
		require.True(t, c.Acquired)
		return c.Token
	}
	acquire("a")
	acquire("b")
	c := acquire("c") // over the bound: not noted
	require.NoError(t, s.Complete(ctx, "ns:c", c, nil, time.Hour))
	require.Nil(t, s.Peek("ns:", "c"), "a claim past the bound was cached")

	clk.Advance(time.Minute) // a's and b's leases end
	d := acquire("d")
	require.NoError(t, s.Complete(ctx, "ns:d", d, nil, time.Hour))
	require.NotNil(t, s.Peek("ns:", "d"), "ended claims did not make room")
}
