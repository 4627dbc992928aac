package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/store"
)

// fingerprintCases pin payload fingerprints: a key reused with another
// payload is refused in every state and claims nothing; an empty
// fingerprint is never checked.
var fingerprintCases = []testCase{
	{"Processing", testFingerprintProcessing},
	{"Completed", testFingerprintCompleted},
	{"Failed", testFingerprintFailed},
	{"ExpiredLease", testFingerprintExpiredLease},
	{"EmptyIsNotChecked", testFingerprintEmpty},
	{"FirstIsKept", testFingerprintKept},
}

// requireReused requires that Acquire of key with fingerprint fails with
// ErrKeyReused and claims nothing.
func (f *fixture) requireReused(t *testing.T, key, fingerprint string) {
	t.Helper()
	c, err := f.store.Acquire(f.ctx, store.AcquireRequest{Key: key, Lease: f.lease(), Fingerprint: fingerprint})
	f.expectKept(t, key, errors.Is(err, store.ErrKeyReused), "Acquire(%q) with another fingerprint: got %v, want ErrKeyReused", key, err)
	require.False(t, c.Acquired, "a reused key must claim nothing")
	require.True(t, c.Token.IsZero(), "a reused key must claim nothing")
}

func testFingerprintProcessing(t *testing.T, f *fixture) {
	key := f.key("fp-processing")
	c := f.acquire(t, key, "payload-a")
	require.True(t, c.Acquired)
	require.Equal(t, "payload-a", c.Record.Fingerprint)

	f.requireReused(t, key, "payload-b")

	same := f.requireHeld(t, key, 1) // a refused fingerprint counts no attempt
	require.Equal(t, "payload-a", same.Fingerprint)

	// The refusal claimed nothing: the holder still completes.
	f.complete(t, key, c.Token, []byte("a"))
}

func testFingerprintCompleted(t *testing.T, f *fixture) {
	key := f.key("fp-completed")
	c := f.acquire(t, key, "payload-a")
	require.True(t, c.Acquired)
	f.complete(t, key, c.Token, []byte("a"))

	f.requireReused(t, key, "payload-b")

	same := f.requireCompleted(t, key, []byte("a"))
	require.Equal(t, "payload-a", same.Fingerprint)
}

func testFingerprintFailed(t *testing.T, f *fixture) {
	key := f.key("fp-failed")
	c := f.acquire(t, key, "payload-a")
	require.True(t, c.Acquired)
	f.release(t, key, c.Token, "boom")
	before, inspected := f.inspect(t, key)

	// It wins over the retry that an equal fingerprint would get.
	f.requireReused(t, key, "payload-b")
	if inspected {
		after, _ := f.inspect(t, key)
		requireSameRecord(t, before, after, "a refused Acquire of a failed record")
	}

	// Nothing was claimed and no attempt counted by the refusal.
	again := f.retry(t, key, "payload-a", 2)
	require.Equal(t, "payload-a", again.Record.Fingerprint)
}

func testFingerprintExpiredLease(t *testing.T, f *fixture) {
	key := f.key("fp-expired")
	c := f.acquire(t, key, "payload-a")
	require.True(t, c.Acquired)
	f.advance(f.lease())
	f.note(key, time.Time{}) // an expired claim is kept until it is taken over
	before, inspected := f.inspect(t, key)

	// It wins over the takeover that an equal fingerprint would get.
	f.requireReused(t, key, "payload-b")
	if inspected {
		after, _ := f.inspect(t, key)
		requireSameRecord(t, before, after, "a refused Acquire of a processing record whose lease expired")
		require.Equal(t, store.StateProcessing, after.State)
		require.Equal(t, 1, after.Attempt)
	}

	// Nothing was claimed and no attempt counted by the refusal.
	again := f.acquire(t, key, "payload-a")
	require.True(t, again.Acquired, "the expired lease is taken over by an equal fingerprint")
	require.Equal(t, 2, again.Record.Attempt)
	require.NotEqual(t, c.Token, again.Token)
	require.Equal(t, "payload-a", again.Record.Fingerprint)
}

// requireSameRecord requires that a call changed nothing of a record.
func requireSameRecord(t *testing.T, want, got store.Record, what string) {
	t.Helper()
	require.Equal(t, want.Key, got.Key, "%s: Key", what)
	require.Equal(t, want.State, got.State, "%s: State", what)
	require.Equal(t, want.Attempt, got.Attempt, "%s: Attempt", what)
	require.Equal(t, want.Fingerprint, got.Fingerprint, "%s: Fingerprint", what)
	require.Equal(t, string(want.Result), string(got.Result), "%s: Result", what)
	require.Equal(t, want.LastError, got.LastError, "%s: LastError", what)
	requireSameTime(t, want.LeaseUntil, got.LeaseUntil, what+": LeaseUntil")
	requireSameTime(t, want.ExpiresAt, got.ExpiresAt, what+": ExpiresAt")
}

func testFingerprintEmpty(t *testing.T, f *fixture) {
	// Stored with one, asked without: not checked, in every state.
	key := f.key("fp-empty-request")
	c := f.acquire(t, key, "payload-a")
	require.True(t, c.Acquired)
	f.requireFound(t, key, "", store.StateProcessing)
	f.release(t, key, c.Token, "boom")
	c = f.retry(t, key, "", 2)
	f.complete(t, key, c.Token, []byte("a"))
	done := f.requireFound(t, key, "", store.StateCompleted)
	requireBytes(t, []byte("a"), done.Result)

	// Stored without one, asked with one: not checked either. Whether the
	// record then adopts the fingerprint is the store's choice.
	key = f.key("fp-empty-record")
	c = f.acquire(t, key, "")
	require.True(t, c.Acquired)
	f.requireFound(t, key, "payload-b", store.StateProcessing)
	f.complete(t, key, c.Token, []byte("b"))
	done = f.requireFound(t, key, "payload-c", store.StateCompleted)
	requireBytes(t, []byte("b"), done.Result)
}

// requireFound requires that Acquire of key with fingerprint claims
// nothing and finds a record in state, and returns it.
func (f *fixture) requireFound(t *testing.T, key, fingerprint string, state store.State) store.Record {
	t.Helper()
	deadline := f.deadlines[key]
	c := f.acquire(t, key, fingerprint)
	f.expect(t, !c.Acquired && c.Record.State == state, deadline,
		"Acquire(%q) with fingerprint %q should find a %s record; it got acquired=%v, a %s record", key, fingerprint, state, c.Acquired, c.Record.State)
	return c.Record
}

func testFingerprintKept(t *testing.T, f *fixture) {
	key := f.key("fp-kept")
	c := f.acquire(t, key, "payload-a")
	require.True(t, c.Acquired)
	f.release(t, key, c.Token, "boom")

	// A retry without a fingerprint must not erase the first one.
	c = f.retry(t, key, "", 2)
	require.Equal(t, "payload-a", c.Record.Fingerprint)
	f.complete(t, key, c.Token, []byte("a"))

	done := f.requireFound(t, key, "payload-a", store.StateCompleted)
	require.Equal(t, "payload-a", done.Fingerprint)
	f.requireReused(t, key, "payload-b")
}
