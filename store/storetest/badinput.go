package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
)

// badInputCases pin the refusals: every bad argument is an error, never a
// panic, and a refused call changes nothing.
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
	c, err := f.store.Acquire(f.ctx, "", dedup.AcquireRequest{Lease: f.lease()})
	require.Error(t, err, "Acquire of an empty key")
	require.False(t, c.Acquired)
	require.Error(t, f.store.Complete(f.ctx, "", staleToken(), nil, f.retention()), "Complete of an empty key")
	require.Error(t, f.store.Release(f.ctx, "", staleToken(), f.failure("boom")), "Release of an empty key")
	require.Error(t, f.store.Extend(f.ctx, "", staleToken(), f.lease()), "Extend of an empty key")
}

func testBadLease(t *testing.T, f *fixture) {
	key := f.key("bad-lease")
	for _, lease := range badDurations {
		c, err := f.store.Acquire(f.ctx, key, dedup.AcquireRequest{Lease: lease})
		require.Error(t, err, "Acquire with lease %v", lease)
		require.False(t, c.Acquired)
	}
	c := f.claim(t, key)
	require.Equal(t, 1, c.Record.Attempt, "a refused Acquire must claim nothing")

	for _, lease := range badDurations {
		err := f.store.Extend(f.ctx, key, c.Token, lease)
		require.Error(t, err, "Extend with lease %v", lease)
		require.NotErrorIs(t, err, dedup.ErrLeaseLost, "a bad lease is the caller's mistake, not a lost lease")
	}
	rec := f.requireHeld(t, key, 1)
	f.requireAbout(t, c.Record.LeaseUntil, rec.LeaseUntil, "a refused Extend must not move the lease")
	f.complete(t, key, c.Token, []byte("ok"))
}

func testBadRetention(t *testing.T, f *fixture) {
	key := f.key("bad-retention")
	c := f.claim(t, key)
	for _, retention := range badDurations {
		err := f.store.Complete(f.ctx, key, c.Token, []byte("x"), retention)
		require.Error(t, err, "Complete with retention %v", retention)
		require.NotErrorIs(t, err, dedup.ErrLeaseLost, "a bad retention is the caller's mistake, not a lost lease")
		err = f.store.Release(f.ctx, key, c.Token, dedup.Failure{Error: "boom", Retention: retention})
		require.Error(t, err, "Release with retention %v", retention)
		require.NotErrorIs(t, err, dedup.ErrLeaseLost, "a bad retention is the caller's mistake, not a lost lease")
	}
	// The refused calls changed nothing: the claim still holds.
	f.requireHeld(t, key, 1)
	f.complete(t, key, c.Token, []byte("ok"))
	f.requireCompleted(t, key, []byte("ok"))
}

func testZeroToken(t *testing.T, f *fixture) {
	key := f.key("zero-token")
	c := f.claim(t, key)
	var zero dedup.Token
	requireLeaseLost(t, f.store.Complete(f.ctx, key, zero, []byte("x"), f.retention()), "Complete with the zero token")
	requireLeaseLost(t, f.store.Release(f.ctx, key, zero, f.failure("boom")), "Release with the zero token")
	requireLeaseLost(t, f.store.Extend(f.ctx, key, zero, f.lease()), "Extend with the zero token")
	f.requireHeld(t, key, 1)
	f.complete(t, key, c.Token, []byte("ok"))
}

func testAbsentKey(t *testing.T, f *fixture) {
	key := f.key("absent")
	requireLeaseLost(t, f.store.Complete(f.ctx, key, staleToken(), []byte("x"), f.retention()), "Complete of an absent key")
	requireLeaseLost(t, f.store.Release(f.ctx, key, staleToken(), f.failure("boom")), "Release of an absent key")
	requireLeaseLost(t, f.store.Extend(f.ctx, key, staleToken(), f.lease()), "Extend of an absent key")
	c := f.claim(t, key)
	require.Equal(t, 1, c.Record.Attempt, "the refused calls must not create a record")
}

func testCanceledContext(t *testing.T, f *fixture) {
	ctx, cancel := context.WithCancel(f.ctx)
	cancel()

	key := f.key("canceled")
	c, err := f.store.Acquire(ctx, key, dedup.AcquireRequest{Lease: f.lease()})
	require.ErrorIs(t, err, context.Canceled, "Acquire with a canceled context")
	require.False(t, c.Acquired)

	c = f.claim(t, key)
	require.Equal(t, 1, c.Record.Attempt, "the canceled Acquire must claim nothing")
	require.ErrorIs(t, f.store.Complete(ctx, key, c.Token, []byte("x"), f.retention()), context.Canceled, "Complete with a canceled context")
	require.ErrorIs(t, f.store.Release(ctx, key, c.Token, f.failure("boom")), context.Canceled, "Release with a canceled context")
	require.ErrorIs(t, f.store.Extend(ctx, key, c.Token, f.lease()), context.Canceled, "Extend with a canceled context")

	// The canceled calls changed nothing.
	f.requireHeld(t, key, 1)
	f.complete(t, key, c.Token, []byte("ok"))
	f.requireCompleted(t, key, []byte("ok"))
}
