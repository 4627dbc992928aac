package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/store"
)

// badInputCases pin the refusals: every bad argument is an error, never a
// panic (an empty key ErrInvalidKey, a non-positive duration
// ErrInvalidConfig, a zero or stale token ErrLeaseLost, a cancelled context
// the context's error), and a refused call changes nothing.
var badInputCases = []testCase{
	{"EmptyKey", testEmptyKey},
	{"BadLease", testBadLease},
	{"BadRetention", testBadRetention},
	{"ZeroToken", testZeroToken},
	{"AbsentKey", testAbsentKey},
	{"CanceledContext", testCanceledContext},
}

// badDurations are the durations a store must refuse.
var badDurations = []time.Duration{0, -time.Second}

func testEmptyKey(t *testing.T, f *fixture) {
	c, err := f.store.Acquire(f.ctx, store.AcquireRequest{Key: "", Lease: f.lease()})
	require.ErrorIs(t, err, store.ErrInvalidKey, "Acquire of an empty key")
	require.False(t, c.Acquired)
	require.ErrorIs(t, f.store.Complete(f.ctx, f.completeRequest("", staleToken(), "")), store.ErrInvalidKey, "Complete of an empty key")
	require.ErrorIs(t, f.store.Release(f.ctx, f.releaseRequest("", staleToken(), "boom")), store.ErrInvalidKey, "Release of an empty key")
	require.ErrorIs(t, f.store.Extend(f.ctx, f.extendRequest("", staleToken())), store.ErrInvalidKey, "Extend of an empty key")
}

func testBadLease(t *testing.T, f *fixture) {
	key := f.key("bad-lease")
	for _, lease := range badDurations {
		c, err := f.store.Acquire(f.ctx, store.AcquireRequest{Key: key, Lease: lease})
		require.ErrorIs(t, err, store.ErrInvalidConfig, "Acquire with lease %v", lease)
		require.False(t, c.Acquired)
	}
	c := f.claim(t, key)
	require.Equal(t, 1, c.Record.Attempt, "a refused Acquire must claim nothing")

	for _, lease := range badDurations {
		err := f.store.Extend(f.ctx, store.ExtendRequest{Key: key, Token: c.Token, Lease: lease})
		require.ErrorIs(t, err, store.ErrInvalidConfig, "Extend with lease %v", lease)
		require.NotErrorIs(t, err, store.ErrLeaseLost, "a bad lease is the caller's mistake, not a lost lease")
	}
	rec := f.requireHeld(t, key, 1)
	requireSameTime(t, c.Record.LeaseUntil, rec.LeaseUntil, "a refused Extend must not move the lease")
	f.complete(t, key, c.Token, []byte("ok"))
}

func testBadRetention(t *testing.T, f *fixture) {
	key := f.key("bad-retention")
	c := f.claim(t, key)
	for _, retention := range badDurations {
		err := f.store.Complete(f.ctx, store.CompleteRequest{Key: key, Token: c.Token, Result: []byte("x"), Retention: retention})
		require.ErrorIs(t, err, store.ErrInvalidConfig, "Complete with retention %v", retention)
		require.NotErrorIs(t, err, store.ErrLeaseLost, "a bad retention is the caller's mistake, not a lost lease")
		err = f.store.Release(f.ctx, store.ReleaseRequest{Key: key, Token: c.Token, Error: "boom", Retention: retention})
		require.ErrorIs(t, err, store.ErrInvalidConfig, "Release with retention %v", retention)
		require.NotErrorIs(t, err, store.ErrLeaseLost, "a bad retention is the caller's mistake, not a lost lease")
	}
	// The refused calls changed nothing: the claim still holds.
	f.requireHeld(t, key, 1)
	f.complete(t, key, c.Token, []byte("ok"))
	f.requireCompleted(t, key, []byte("ok"))
}

func testZeroToken(t *testing.T, f *fixture) {
	key := f.key("zero-token")
	c := f.claim(t, key)
	var zero store.Token
	requireLeaseLost(t, f.store.Complete(f.ctx, f.completeRequest(key, zero, "x")), "Complete with the zero token")
	requireLeaseLost(t, f.store.Release(f.ctx, f.releaseRequest(key, zero, "boom")), "Release with the zero token")
	requireLeaseLost(t, f.store.Extend(f.ctx, f.extendRequest(key, zero)), "Extend with the zero token")
	f.requireHeld(t, key, 1)
	f.complete(t, key, c.Token, []byte("ok"))
}

func testAbsentKey(t *testing.T, f *fixture) {
	key := f.key("absent")
	requireLeaseLost(t, f.store.Complete(f.ctx, f.completeRequest(key, staleToken(), "x")), "Complete of an absent key")
	requireLeaseLost(t, f.store.Release(f.ctx, f.releaseRequest(key, staleToken(), "boom")), "Release of an absent key")
	requireLeaseLost(t, f.store.Extend(f.ctx, f.extendRequest(key, staleToken())), "Extend of an absent key")
	c := f.claim(t, key)
	require.Equal(t, 1, c.Record.Attempt, "the refused calls must not create a record")
}

func testCanceledContext(t *testing.T, f *fixture) {
	ctx, cancel := context.WithCancel(f.ctx)
	cancel()

	key := f.key("canceled")
	c, err := f.store.Acquire(ctx, store.AcquireRequest{Key: key, Lease: f.lease()})
	require.ErrorIs(t, err, context.Canceled, "Acquire with a canceled context")
	require.False(t, c.Acquired)

	c = f.claim(t, key)
	require.Equal(t, 1, c.Record.Attempt, "the canceled Acquire must claim nothing")
	require.ErrorIs(t, f.store.Complete(ctx, f.completeRequest(key, c.Token, "x")), context.Canceled, "Complete with a canceled context")
	require.ErrorIs(t, f.store.Release(ctx, f.releaseRequest(key, c.Token, "boom")), context.Canceled, "Release with a canceled context")
	require.ErrorIs(t, f.store.Extend(ctx, f.extendRequest(key, c.Token)), context.Canceled, "Extend with a canceled context")

	// The canceled calls changed nothing.
	f.requireHeld(t, key, 1)
	f.complete(t, key, c.Token, []byte("ok"))
	f.requireCompleted(t, key, []byte("ok"))
}
