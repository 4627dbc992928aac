package tieredstore_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/memstore"
	"github.com/dedup-go/dedup/store/storetest"
	"github.com/dedup-go/dedup/store/tieredstore"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// counting is a remote store that counts the calls reaching it, batches
// as one call each.
type counting struct {
	*memstore.Store
	calls atomic.Int64
}

func (c *counting) Acquire(ctx context.Context, req store.AcquireRequest) (store.Claim, error) {
	c.calls.Add(1)
	return c.Store.Acquire(ctx, req)
}

func (c *counting) Complete(ctx context.Context, req store.CompleteRequest) error {
	c.calls.Add(1)
	return c.Store.Complete(ctx, req)
}

func (c *counting) CompleteReport(ctx context.Context, req store.CompleteRequest) (store.Completion, error) {
	c.calls.Add(1)
	return c.Store.CompleteReport(ctx, req)
}

func (c *counting) Release(ctx context.Context, req store.ReleaseRequest) error {
	c.calls.Add(1)
	return c.Store.Release(ctx, req)
}

func (c *counting) Extend(ctx context.Context, req store.ExtendRequest) error {
	c.calls.Add(1)
	return c.Store.Extend(ctx, req)
}

func (c *counting) AcquireBatch(ctx context.Context, reqs []store.AcquireRequest) []store.AcquireOutcome {
	c.calls.Add(1)
	return c.Store.AcquireBatch(ctx, reqs)
}

func (c *counting) CompleteBatch(ctx context.Context, reqs []store.CompleteRequest) []error {
	c.calls.Add(1)
	return c.Store.CompleteBatch(ctx, reqs)
}

func (c *counting) CompleteBatchReport(ctx context.Context, reqs []store.CompleteRequest) []store.CompleteOutcome {
	c.calls.Add(1)
	return c.Store.CompleteBatchReport(ctx, reqs)
}

func (c *counting) ExtendBatch(ctx context.Context, reqs []store.ExtendRequest) []error {
	c.calls.Add(1)
	return c.Store.ExtendBatch(ctx, reqs)
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

// acquire claims key through s with a one-minute lease.
func acquire(t *testing.T, s store.Store, key, fingerprint string) store.Claim {
	t.Helper()
	c, err := s.Acquire(t.Context(), store.AcquireRequest{Key: key, Lease: time.Minute, Fingerprint: fingerprint})
	require.NoError(t, err)
	require.True(t, c.Acquired, "Acquire(%q) found a %s record", key, c.Record.State)
	return c
}

// complete completes key held by token through s, kept for an hour.
func complete(t *testing.T, s store.Store, key string, token store.Token, result string) {
	t.Helper()
	require.NoError(t, s.Complete(t.Context(), store.CompleteRequest{Key: key, Token: token, Result: []byte(result), Retention: time.Hour}))
}

func TestConformanceOverMemstore(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		s, _, clk := setup(t, &tieredstore.Options{ClockSkew: time.Nanosecond})
		return storetest.Harness{Store: s, Advance: clk.Advance, Now: clk.Now}
	})
}

// TestConformanceOverPlainRemote: over a remote store that cannot tell
// what a Complete wrote (no store.CompleteReporter, as pgstore), the
// contract holds all the same, and CompleteReport answers
// store.CompletionUnknown (its storetest subtests skip). The remote store
// keeps no step records either (the Steps subtests skip).
func TestConformanceOverPlainRemote(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		clk := clock.NewFake(epoch)
		m, err := memstore.New(&memstore.Options{Clock: clk})
		require.NoError(t, err)
		plain := struct {
			store.BatchStore
			store.Inspector
		}{m, m}
		s, err := tieredstore.New(plain, &tieredstore.Options{Clock: clk, ClockSkew: time.Nanosecond})
		require.NoError(t, err)
		require.False(t, s.KeepsSteps())
		return storetest.Harness{Store: withoutSteps{s, s, s, s, s}, Advance: clk.Advance, Now: clk.Now}
	})
}

// withoutSteps is a Store without its StepStore methods, for a Store that
// keeps no step records: storetest runs its Steps group on any
// store.StepStore (it does not ask store.KeepsSteps).
type withoutSteps struct {
	store.BatchStore
	store.Peeker
	store.Inspector
	store.Bounded
	store.CompleteReporter
}

func TestNewRefusesBadOptions(t *testing.T) {
	t.Parallel()
	_, err := tieredstore.New(nil, nil)
	require.ErrorIs(t, err, store.ErrInvalidConfig)
	m, err := memstore.New(nil)
	require.NoError(t, err)
	for _, o := range []tieredstore.Options{{Capacity: -1}, {MaxLocalTTL: -1}, {ClockSkew: -1}} {
		_, err := tieredstore.New(m, &o)
		require.ErrorIs(t, err, store.ErrInvalidConfig, "%+v", o)
	}
}

// TestLocalHitNoRemoteCall: once a record is completed, duplicates are
// answered without calling the remote store, by Peek and by Acquire alike.
func TestLocalHitNoRemoteCall(t *testing.T) {
	t.Parallel()
	s, remote, _ := setup(t, nil)
	ctx := t.Context()
	c := acquire(t, s, "ns:a", "fp")
	complete(t, s, "ns:a", c.Token, "r")
	before := remote.calls.Load()

	for range 10 {
		rec := s.Peek("ns:", "a")
		require.NotNil(t, rec)
		require.Equal(t, "r", string(rec.Result))
		require.Equal(t, "fp", rec.Fingerprint)
		dup, err := s.Acquire(ctx, store.AcquireRequest{Key: "ns:a", Lease: time.Minute})
		require.NoError(t, err)
		require.False(t, dup.Acquired)
		require.Equal(t, store.StateCompleted, dup.Record.State)
	}
	_, err := s.Acquire(ctx, store.AcquireRequest{Key: "ns:a", Lease: time.Minute, Fingerprint: "other"})
	require.ErrorIs(t, err, store.ErrKeyReused, "a local hit checks the fingerprint")
	out := s.AcquireBatch(ctx, []store.AcquireRequest{{Key: "ns:a", Lease: time.Minute}})
	require.NoError(t, out[0].Err)
	require.Equal(t, "r", string(out[0].Claim.Record.Result))
	require.Equal(t, before, remote.calls.Load(), "a local hit called the remote store")
	require.EqualValues(t, 22, s.Stats().LocalHits)
}

// TestLocalCopyKeepsLastError: the local copy of a completed record is the
// remote's record but for its expiry: the attempt count, the fingerprint,
// the last failure before the success, the completing token and the
// creation time included, whether Complete or CompleteBatch completed it.
// Its CompletedAt, which the remote stamped and did not answer, is left
// zero, never guessed.
func TestLocalCopyKeepsLastError(t *testing.T) {
	t.Parallel()
	for _, batch := range []bool{false, true} {
		s, remote, _ := setup(t, nil)
		ctx := t.Context()
		first := acquire(t, s, "ns:k", "fp")
		require.NoError(t, s.Release(ctx, store.ReleaseRequest{Key: "ns:k", Token: first.Token, Error: "boom", Retention: time.Hour}))
		retry := acquire(t, s, "ns:k", "fp")
		require.Equal(t, 2, retry.Record.Attempt)
		require.Equal(t, "boom", retry.Record.LastError)
		if batch {
			require.Equal(t, []error{nil}, s.CompleteBatch(ctx, []store.CompleteRequest{{Key: "ns:k", Token: retry.Token, Result: []byte("ok"), Retention: time.Hour}}))
		} else {
			complete(t, s, "ns:k", retry.Token, "ok")
		}

		want, err := remote.Get(ctx, "ns:k")
		require.NoError(t, err)
		require.Equal(t, "boom", want.LastError, "the remote store keeps the last error")
		local := s.Peek("ns:", "k")
		require.NotNil(t, local, "batch=%v", batch)
		require.Equal(t, retry.Token, local.Token, "batch=%v: the local copy's token", batch)
		require.False(t, local.CreatedAt.IsZero(), "batch=%v: the local copy's creation time", batch)
		require.True(t, local.CompletedAt.IsZero(), "batch=%v: the local copy's CompletedAt is a guess", batch)
		want.ExpiresAt, want.CompletedAt = local.ExpiresAt, time.Time{}
		require.Equal(t, want, *local, "batch=%v: the local copy differs from the remote record", batch)
		dup, err := s.Acquire(ctx, store.AcquireRequest{Key: "ns:k", Lease: time.Minute})
		require.NoError(t, err)
		require.Equal(t, "boom", dup.Record.LastError)
		require.Equal(t, 2, dup.Record.Attempt)
	}
}

// TestLearnedCopyIsTheRemotes: a completed record that another process
// completed, learned from the remote's answer to Acquire, is kept as the
// remote answered it but for its expiry: its token and its times too.
func TestLearnedCopyIsTheRemotes(t *testing.T) {
	t.Parallel()
	s, remote, clk := setup(t, nil)
	ctx := t.Context()
	c := acquire(t, remote, "ns:k", "")
	clk.Advance(time.Second)
	complete(t, remote, "ns:k", c.Token, "ok")
	want, err := remote.Get(ctx, "ns:k")
	require.NoError(t, err)
	require.False(t, want.CompletedAt.IsZero())

	dup, err := s.Acquire(ctx, store.AcquireRequest{Key: "ns:k", Lease: time.Minute})
	require.NoError(t, err)
	require.False(t, dup.Acquired)
	local := s.Peek("ns:", "k")
	require.NotNil(t, local, "the completed record the remote answered is cached")
	want.ExpiresAt = local.ExpiresAt
	require.Equal(t, want, *local)
	require.Equal(t, c.Token, local.Token)
}

// TestCompleteAgain: Complete with the token that already completed the
// record succeeds again and changes nothing, here and in the remote store.
// A record the handler completed in its own transaction (on the remote
// store, marked on its claim) is not cached with the result the second
// Complete carries: the local tier learns the first one from the remote.
func TestCompleteAgain(t *testing.T) {
	t.Parallel()
	s, remote, _ := setup(t, nil)
	ctx := t.Context()

	c := acquire(t, s, "ns:twice", "")
	complete(t, s, "ns:twice", c.Token, "first")
	complete(t, s, "ns:twice", c.Token, "second")
	require.Equal(t, "first", string(s.Peek("ns:", "twice").Result))
	rec, err := remote.Get(ctx, "ns:twice")
	require.NoError(t, err)
	require.Equal(t, "first", string(rec.Result))

	c = acquire(t, s, "ns:tx", "")
	held := &store.HeldClaim{Key: "ns:tx", Token: c.Token, Attempt: 1, Retention: time.Hour}
	complete(t, remote, "ns:tx", c.Token, "in the transaction") // what pgstore.CompleteTx does
	held.MarkCompleted()
	require.NoError(t, s.Complete(store.ContextWithClaim(ctx, held),
		store.CompleteRequest{Key: "ns:tx", Token: c.Token, Result: []byte("by the receiver"), Retention: time.Hour}))
	require.Nil(t, s.Peek("ns:", "tx"), "cached a result the remote store did not keep")
	dup, err := s.Acquire(ctx, store.AcquireRequest{Key: "ns:tx", Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, "in the transaction", string(dup.Record.Result))
	require.Equal(t, "in the transaction", string(s.Peek("ns:", "tx").Result), "learned from the remote store")
}

// TestOnlyConfirmedCompletedCached: processing and failed records are
// never answered locally, and a completion the remote store refused is not
// cached.
func TestOnlyConfirmedCompletedCached(t *testing.T) {
	t.Parallel()
	s, remote, clk := setup(t, nil)
	ctx := t.Context()

	c := acquire(t, s, "ns:p", "")
	require.Nil(t, s.Peek("ns:", "p"), "processing record cached")
	require.NoError(t, s.Release(ctx, store.ReleaseRequest{Key: "ns:p", Token: c.Token, Error: "boom", Retention: time.Hour}))
	require.Nil(t, s.Peek("ns:", "p"), "failed record cached")
	retry := acquire(t, s, "ns:p", "")
	require.Equal(t, 2, retry.Record.Attempt, "a failed record is retried through the remote store")

	// A worker whose lease was taken over completes nothing and caches
	// nothing.
	old := acquire(t, s, "ns:q", "")
	clk.Advance(time.Minute)
	acquire(t, remote, "ns:q", "") // another process takes over
	err := s.Complete(ctx, store.CompleteRequest{Key: "ns:q", Token: old.Token, Result: []byte("late"), Retention: time.Hour})
	require.ErrorIs(t, err, store.ErrLeaseLost)
	require.Nil(t, s.Peek("ns:", "q"), "a refused completion was cached")
	require.Zero(t, s.Stats().Cached)
}

// TestCancelledContext: a cancelled context is returned as its error even
// for a key the local tier could answer.
func TestCancelledContext(t *testing.T) {
	t.Parallel()
	s, remote, _ := setup(t, nil)
	c := acquire(t, s, "ns:c", "")
	complete(t, s, "ns:c", c.Token, "r")
	before := remote.calls.Load()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := s.Acquire(ctx, store.AcquireRequest{Key: "ns:c", Lease: time.Minute})
	require.ErrorIs(t, err, context.Canceled)
	out := s.AcquireBatch(ctx, []store.AcquireRequest{{Key: "ns:c", Lease: time.Minute}, {Key: "ns:new", Lease: time.Minute}})
	for _, o := range out {
		require.ErrorIs(t, o.Err, context.Canceled)
	}
	require.Equal(t, before, remote.calls.Load())
}

// TestLocalCopyNeverOutlivesRemote: a record this process completed expires
// locally no later than remotely; one learned from the remote store
// expires ClockSkew before the remote's expiry; MaxLocalTTL caps both.
func TestLocalCopyNeverOutlivesRemote(t *testing.T) {
	t.Parallel()
	s, remote, clk := setup(t, &tieredstore.Options{MaxLocalTTL: time.Hour, ClockSkew: 10 * time.Second})
	ctx := t.Context()
	minute := func(st store.Store, key string) {
		c := acquire(t, st, key, "")
		require.NoError(t, st.Complete(ctx, store.CompleteRequest{Key: key, Token: c.Token, Retention: time.Minute}))
	}

	minute(s, "ns:own")          // completed here, retention 1 minute
	minute(remote, "ns:learned") // completed by another process
	learned, err := s.Acquire(ctx, store.AcquireRequest{Key: "ns:learned", Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, store.StateCompleted, learned.Record.State)
	c := acquire(t, s, "ns:long", "") // completed here, retention past MaxLocalTTL
	require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: "ns:long", Token: c.Token, Retention: 48 * time.Hour}))

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
	require.Equal(t, store.StateCompleted, rec.State)
}

// TestDeleteClearsLocal: an operator's Delete forgets the local copy too,
// so the message may run again.
func TestDeleteClearsLocal(t *testing.T) {
	t.Parallel()
	s, _, _ := setup(t, nil)
	c := acquire(t, s, "ns:d", "")
	complete(t, s, "ns:d", c.Token, "")
	require.NotNil(t, s.Peek("ns:", "d"))
	require.NoError(t, s.Delete(t.Context(), "ns:d"))
	require.Nil(t, s.Peek("ns:", "d"))
	again := acquire(t, s, "ns:d", "")
	require.Equal(t, 1, again.Record.Attempt)
}

// TestScan: Scan yields the remote store's records, processing ones too.
func TestScan(t *testing.T) {
	t.Parallel()
	s, _, _ := setup(t, nil)
	c := acquire(t, s, "ns:a", "")
	complete(t, s, "ns:a", c.Token, "r")
	acquire(t, s, "ns:b", "")
	acquire(t, s, "other:c", "")
	var got []string
	for rec, err := range s.Scan(t.Context(), "ns:") {
		require.NoError(t, err)
		got = append(got, rec.Key+" "+rec.State.String())
	}
	require.Equal(t, []string{"ns:a completed", "ns:b processing"}, got)
}

// TestRemoteWithoutAbilities: a remote store that is neither a BatchStore
// nor an Inspector still batches (one call per key), and inspection says
// what is missing.
func TestRemoteWithoutAbilities(t *testing.T) {
	t.Parallel()
	m, err := memstore.New(nil)
	require.NoError(t, err)
	s, err := tieredstore.New(struct{ store.Store }{m}, nil)
	require.NoError(t, err)
	ctx := t.Context()
	out := s.AcquireBatch(ctx, []store.AcquireRequest{{Key: "ns:a", Lease: time.Minute}, {Key: "ns:a", Lease: time.Minute}})
	require.NoError(t, out[0].Err)
	require.True(t, out[0].Claim.Acquired)
	require.NoError(t, out[1].Err)
	require.False(t, out[1].Claim.Acquired, "a repeated key is claimed by its first request only")
	token := out[0].Claim.Token
	require.Equal(t, []error{nil, nil}, s.ExtendBatch(ctx, []store.ExtendRequest{{Key: "ns:a", Token: token, Lease: time.Minute}, {Key: "ns:a", Token: token, Lease: time.Minute}}))
	errs := s.ExtendBatch(ctx, []store.ExtendRequest{{Key: "ns:a", Token: store.NewToken(), Lease: time.Minute}})
	require.ErrorIs(t, errs[0], store.ErrLeaseLost)
	require.Equal(t, []error{nil}, s.CompleteBatch(ctx, []store.CompleteRequest{{Key: "ns:a", Token: token, Retention: time.Hour}}))
	require.NotNil(t, s.Peek("ns:", "a"))

	_, err = s.Get(ctx, "ns:a")
	require.ErrorIs(t, err, store.ErrInvalidConfig)
	require.ErrorContains(t, err, "not a store.Inspector")
	require.ErrorIs(t, s.Delete(ctx, "ns:a"), store.ErrInvalidConfig)
	n := 0
	for rec, err := range s.Scan(ctx, "ns:") {
		n++
		require.Zero(t, rec)
		require.ErrorIs(t, err, store.ErrInvalidConfig)
	}
	require.Equal(t, 1, n, "Scan yields its failure once")
}

// TestHeldClaimsBounded: the claims noted for caching are bounded by
// Capacity; past it a completion is simply not cached, and claims whose
// lease ended make room again.
func TestHeldClaimsBounded(t *testing.T) {
	t.Parallel()
	s, _, clk := setup(t, &tieredstore.Options{Capacity: 2})
	acquire(t, s, "ns:a", "")
	acquire(t, s, "ns:b", "")
	c := acquire(t, s, "ns:c", "") // over the bound: not noted
	complete(t, s, "ns:c", c.Token, "")
	require.Nil(t, s.Peek("ns:", "c"), "a claim past the bound was cached")

	clk.Advance(time.Minute) // a's and b's leases end
	d := acquire(t, s, "ns:d", "")
	complete(t, s, "ns:d", d.Token, "")
	require.NotNil(t, s.Peek("ns:", "d"), "ended claims did not make room")
}

// TestExtendBatch: ExtendBatch extends the remote leases in one call and
// answers each request on its own.
func TestExtendBatch(t *testing.T) {
	t.Parallel()
	s, remote, clk := setup(t, nil)
	ctx := t.Context()
	a := acquire(t, s, "ns:a", "")
	b := acquire(t, s, "ns:b", "")
	clk.Advance(50 * time.Second)
	before := remote.calls.Load()
	errs := s.ExtendBatch(ctx, []store.ExtendRequest{
		{Key: "ns:a", Token: a.Token, Lease: time.Minute},
		{Key: "ns:a", Token: store.NewToken(), Lease: time.Minute},
		{Key: "ns:absent", Token: store.NewToken(), Lease: time.Minute},
		{Key: "ns:b", Token: b.Token, Lease: time.Minute},
	})
	require.Equal(t, before+1, remote.calls.Load(), "one call to the remote's ExtendBatch")
	require.Len(t, errs, 4)
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], store.ErrLeaseLost)
	require.ErrorIs(t, errs[2], store.ErrLeaseLost)
	require.NoError(t, errs[3])

	clk.Advance(20 * time.Second) // past the first leases, within their extension
	for _, key := range []string{"ns:a", "ns:b"} {
		held, err := remote.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
		require.NoError(t, err)
		require.False(t, held.Acquired, "the remote lease of %s was not extended", key)
	}
}

// TestExtendKeepsNotedClaims: Extend and ExtendBatch keep the claims noted
// for caching as the remote store answered: an extended claim stays noted
// past its first deadline, a lost one is forgotten and makes room.
func TestExtendKeepsNotedClaims(t *testing.T) {
	t.Parallel()
	for name, extend := range map[string]func(s *tieredstore.Store, req store.ExtendRequest) error{
		"Extend": func(s *tieredstore.Store, req store.ExtendRequest) error {
			return s.Extend(t.Context(), req)
		},
		"ExtendBatch": func(s *tieredstore.Store, req store.ExtendRequest) error {
			return s.ExtendBatch(t.Context(), []store.ExtendRequest{req})[0]
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, remote, clk := setup(t, &tieredstore.Options{Capacity: 1})
			a := acquire(t, s, "ns:a", "")
			clk.Advance(50 * time.Second)
			require.NoError(t, extend(s, store.ExtendRequest{Key: "ns:a", Token: a.Token, Lease: time.Minute}))
			clk.Advance(20 * time.Second)  // past a's first lease, within its extension
			b := acquire(t, s, "ns:b", "") // the table holds a's live claim: b is not noted
			complete(t, s, "ns:a", a.Token, "a")
			complete(t, s, "ns:b", b.Token, "b")
			require.NotNil(t, s.Peek("ns:", "a"), "the extended claim was forgotten at its first deadline")
			require.Nil(t, s.Peek("ns:", "b"), "a claim past the bound was noted")

			// A claim deleted behind this Store's back: Extend learns it is
			// lost and forgets it, which makes room for the next one.
			c := acquire(t, s, "ns:c", "")
			require.NoError(t, remote.Delete(t.Context(), "ns:c"))
			require.ErrorIs(t, extend(s, store.ExtendRequest{Key: "ns:c", Token: c.Token, Lease: time.Minute}), store.ErrLeaseLost)
			d := acquire(t, s, "ns:d", "")
			complete(t, s, "ns:d", d.Token, "d")
			require.NotNil(t, s.Peek("ns:", "d"), "the lost claim still held the room")
		})
	}
}

// boundedStore is a remote store that bounds its calls within bound.
type boundedStore struct {
	store.Store
	bound time.Duration
}

func (s boundedStore) CallTimeout() time.Duration { return s.bound }

// TestCallTimeoutIsTheRemotes: the tiered store bounds its calls as its
// remote does (the local tier never waits), and cannot say so over a
// remote that does not.
func TestCallTimeoutIsTheRemotes(t *testing.T) {
	t.Parallel()
	s, remote, _ := setup(t, nil)
	require.Zero(t, s.CallTimeout(), "a remote that is not store.Bounded")
	bounded, err := tieredstore.New(boundedStore{Store: remote, bound: 3 * time.Second}, nil)
	require.NoError(t, err)
	require.Equal(t, 3*time.Second, bounded.CallTimeout())
}
