package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
)

// fingerprintCases pin payload fingerprints: a key reused with another
// payload is refused in every state and claims nothing; an empty
// fingerprint is never checked.
var fingerprintCases = []testCase{
	{"Processing", testFingerprintProcessing},
	{"Completed", testFingerprintCompleted},
	{"Failed", testFingerprintFailed},
	{"EmptyIsNotChecked", testFingerprintEmpty},
	{"FirstIsKept", testFingerprintKept},
}

// requireReused requires that Acquire of key with fingerprint fails with
// ErrKeyReused and claims nothing.
func (f *fixture) requireReused(t *testing.T, key, fingerprint string) {
	t.Helper()
	c, err := f.store.Acquire(f.ctx, key, dedup.AcquireRequest{Lease: f.lease(), Fingerprint: fingerprint})
	require.ErrorIs(t, err, dedup.ErrKeyReused, "Acquire(%q) with another fingerprint", key)
	require.False(t, c.Acquired, "a reused key must claim nothing")
	require.True(t, c.Token.IsZero(), "a reused key must claim nothing")
}

func testFingerprintProcessing(t *testing.T, f *fixture) {
	key := f.key("fp-processing")
	c := f.acquire(t, key, "payload-a")
	require.True(t, c.Acquired)
	require.Equal(t, "payload-a", c.Record.Fingerprint)

	f.requireReused(t, key, "payload-b")

	same := f.acquire(t, key, "payload-a")
	require.False(t, same.Acquired)
	require.Equal(t, dedup.StateProcessing, same.Record.State)
	require.Equal(t, "payload-a", same.Record.Fingerprint)
	require.Equal(t, 1, same.Record.Attempt, "a refused fingerprint must not count an attempt")

	// The refusal claimed nothing: the holder still completes.
	f.complete(t, key, c.Token, []byte("a"))
}

func testFingerprintCompleted(t *testing.T, f *fixture) {
	key := f.key("fp-completed")
	c := f.acquire(t, key, "payload-a")
	require.True(t, c.Acquired)
	f.complete(t, key, c.Token, []byte("a"))

	f.requireReused(t, key, "payload-b")

	same := f.acquire(t, key, "payload-a")
	require.False(t, same.Acquired)
	require.Equal(t, dedup.StateCompleted, same.Record.State)
	require.Equal(t, "payload-a", same.Record.Fingerprint)
	requireBytes(t, []byte("a"), same.Record.Result)
}

func testFingerprintFailed(t *testing.T, f *fixture) {
	key := f.key("fp-failed")
	c := f.acquire(t, key, "payload-a")
	require.True(t, c.Acquired)
	f.release(t, key, c.Token, "boom")

	f.requireReused(t, key, "payload-b")

	// Nothing was claimed and no attempt counted by the refusal.
	again := f.acquire(t, key, "payload-a")
	require.True(t, again.Acquired)
	require.Equal(t, 2, again.Record.Attempt)
	require.Equal(t, "payload-a", again.Record.Fingerprint)
}

func testFingerprintEmpty(t *testing.T, f *fixture) {
	// Stored with one, asked without: not checked, in every state.
	key := f.key("fp-empty-request")
	c := f.acquire(t, key, "payload-a")
	require.True(t, c.Acquired)
	held := f.acquire(t, key, "")
	require.False(t, held.Acquired)
	require.Equal(t, dedup.StateProcessing, held.Record.State)
	f.release(t, key, c.Token, "boom")
	c = f.acquire(t, key, "")
	require.True(t, c.Acquired)
	require.Equal(t, 2, c.Record.Attempt)
	f.complete(t, key, c.Token, []byte("a"))
	done := f.acquire(t, key, "")
	require.Equal(t, dedup.StateCompleted, done.Record.State)
	requireBytes(t, []byte("a"), done.Record.Result)

	// Stored without one, asked with one: not checked either. Whether the
	// record then adopts the fingerprint is the store's choice.
	key = f.key("fp-empty-record")
	c = f.acquire(t, key, "")
	require.True(t, c.Acquired)
	held = f.acquire(t, key, "payload-b")
	require.False(t, held.Acquired)
	require.Equal(t, dedup.StateProcessing, held.Record.State)
	f.complete(t, key, c.Token, []byte("b"))
	done = f.acquire(t, key, "payload-c")
	require.Equal(t, dedup.StateCompleted, done.Record.State)
	requireBytes(t, []byte("b"), done.Record.Result)
}

func testFingerprintKept(t *testing.T, f *fixture) {
	key := f.key("fp-kept")
	c := f.acquire(t, key, "payload-a")
	require.True(t, c.Acquired)
	f.release(t, key, c.Token, "boom")

	// A retry without a fingerprint must not erase the first one.
	c = f.acquire(t, key, "")
	require.True(t, c.Acquired)
	require.Equal(t, "payload-a", c.Record.Fingerprint)
	f.complete(t, key, c.Token, []byte("a"))

	done := f.acquire(t, key, "payload-a")
	require.Equal(t, dedup.StateCompleted, done.Record.State)
	require.Equal(t, "payload-a", done.Record.Fingerprint)
	f.requireReused(t, key, "payload-b")
}
