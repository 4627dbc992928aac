package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/store"
)

// fencingCases pin what a token may still do: after its lease's deadline
// and before a takeover, a call either has its full effect or fails with
// ErrLeaseLost and has none, and once one has failed, every later one
// fails; Complete with the token that completed the record succeeds again
// and changes nothing.
var fencingCases = []testCase{
	{"CompleteAfterExpiry", testCompleteAfterExpiry},
	{"ReleaseAfterExpiry", testReleaseAfterExpiry},
	{"ExtendAfterExpiry", testExtendAfterExpiry},
	{"CompleteTwice", testCompleteTwice},
	{"StaleTokenWhileHeld", testStaleTokenWhileHeld},
}

// requireFencedOff requires that the token of claim c, refused once on key
// after its lease ended, had no effect and stays refused for every call,
// and that the key is then taken over with the attempt count plus one.
func (f *fixture) requireFencedOff(t *testing.T, key string, c store.Claim) {
	t.Helper()
	token := c.Token
	if rec, ok := f.inspect(t, key); ok {
		requireSameRecord(t, c.Record, rec, "a refused call with the token of an expired lease")
	}
	requireLeaseLost(t, f.store.Extend(f.ctx, f.extendRequest(key, token)), "Extend after a call with the token failed")
	requireLeaseLost(t, f.store.Complete(f.ctx, f.completeRequest(key, token, "late")), "Complete after a call with the token failed")
	requireLeaseLost(t, f.store.Release(f.ctx, f.releaseRequest(key, token, "late")), "Release after a call with the token failed")

	taken := f.acquire(t, key, "")
	require.True(t, taken.Acquired, "the token's call was refused, so the key must be free to take over")
	require.Equal(t, 2, taken.Record.Attempt, "a takeover counts an attempt")
	require.NotEqual(t, token, taken.Token)

	requireLeaseLost(t, f.store.Extend(f.ctx, f.extendRequest(key, token)), "Extend with a taken-over token")
	requireLeaseLost(t, f.store.Complete(f.ctx, f.completeRequest(key, token, "late")), "Complete with a taken-over token")
	f.requireHeld(t, key, 2)

	// No failure was recorded by the refused calls: the completed record
	// keeps none.
	f.complete(t, key, taken.Token, []byte("new"))
	rec := f.requireCompleted(t, key, []byte("new"))
	require.Empty(t, rec.LastError, "a refused Release must not record its error")
}

func testCompleteAfterExpiry(t *testing.T, f *fixture) {
	key := f.key("complete-late")
	c := f.claim(t, key)
	f.advance(f.lease())

	// Nobody took the key over: a store may accept the holder's result or
	// refuse it, but never half of it.
	var err error
	w := f.during(func() { err = f.store.Complete(f.ctx, f.completeRequest(key, c.Token, "late")) })
	if err != nil {
		requireLeaseLost(t, err, "Complete after the lease expired")
		f.requireFencedOff(t, key, c)
		return
	}
	f.note(key, w.earliest(f.retention()))
	rec := f.requireCompleted(t, key, []byte("late"))
	require.Equal(t, 1, rec.Attempt)
	w.requireAt(t, f.retention(), rec.ExpiresAt, "ExpiresAt of a record completed after its lease")
}

func testReleaseAfterExpiry(t *testing.T, f *fixture) {
	key := f.key("release-late")
	c := f.claim(t, key)
	f.advance(f.lease())

	var err error
	w := f.during(func() { err = f.store.Release(f.ctx, f.releaseRequest(key, c.Token, "late")) })
	if err != nil {
		requireLeaseLost(t, err, "Release after the lease expired")
		f.requireFencedOff(t, key, c)
		return
	}
	f.note(key, w.earliest(f.retention()))
	if rec, ok := f.inspect(t, key); ok {
		require.Equal(t, store.StateFailed, rec.State)
		require.Equal(t, "late", rec.LastError)
		require.Equal(t, 1, rec.Attempt)
	}
	requireLeaseLost(t, f.store.Complete(f.ctx, f.completeRequest(key, c.Token, "late")), "Complete after Release")
	f.retry(t, key, "", 2) // the released record counts its attempt
}

func testExtendAfterExpiry(t *testing.T, f *fixture) {
	key := f.key("extend-late")
	c := f.claim(t, key)
	f.advance(f.lease())

	var err error
	w := f.during(func() { err = f.store.Extend(f.ctx, f.extendRequest(key, c.Token)) })
	if err != nil {
		requireLeaseLost(t, err, "Extend after the lease expired")
		f.requireFencedOff(t, key, c)
		return
	}
	// Extended: the token holds the key again, as if it never lapsed.
	f.note(key, w.earliest(f.lease()))
	rec := f.requireHeld(t, key, 1)
	w.requireAt(t, f.lease(), rec.LeaseUntil, "LeaseUntil of a lease extended after its deadline")
	f.complete(t, key, c.Token, []byte("extended"))
	f.requireCompleted(t, key, []byte("extended"))
}

func testCompleteTwice(t *testing.T, f *fixture) {
	key := f.key("complete-twice")
	c := f.claim(t, key)
	f.complete(t, key, c.Token, []byte("first"))
	first := f.requireCompleted(t, key, []byte("first"))

	// A handler that completed its record in its own transaction is
	// completed again by its receiver, perhaps with another result and
	// retention: it succeeds, and the first result stays.
	err := f.store.Complete(f.ctx, store.CompleteRequest{Key: key, Token: c.Token, Result: []byte("second"), Retention: 3 * f.retention()})
	f.expectKept(t, key, err == nil, "Complete with the token that completed the record: %v", err)
	again := f.requireCompleted(t, key, []byte("first"))
	require.Equal(t, first.Attempt, again.Attempt)
	requireSameTime(t, first.ExpiresAt, again.ExpiresAt, "a second Complete must not move ExpiresAt")
	if p, ok := f.store.(store.Peeker); ok {
		rec, found := peek(p, key)
		require.True(t, found)
		requireBytes(t, []byte("first"), rec.Result)
	}

	// Completing is all the token may do again.
	requireLeaseLost(t, f.store.Release(f.ctx, f.releaseRequest(key, c.Token, "late")), "Release of a completed key")
	requireLeaseLost(t, f.store.Extend(f.ctx, f.extendRequest(key, c.Token)), "Extend of a completed key")
	f.requireCompleted(t, key, []byte("first"))
}

// testStaleTokenWhileHeld: once another claim took the key over, every
// call with the first claim's token fails with ErrLeaseLost and leaves the
// new holder's record as it is, whatever the store does with a late call
// before a takeover.
func testStaleTokenWhileHeld(t *testing.T, f *fixture) {
	key := f.key("stale-while-held")
	old := f.claim(t, key)
	f.advance(f.lease())
	taken := f.acquire(t, key, "")
	require.True(t, taken.Acquired, "the lease ended: the key must be taken over")
	require.Equal(t, 2, taken.Record.Attempt)

	requireLeaseLost(t, f.store.Complete(f.ctx, f.completeRequest(key, old.Token, "stale")), "Complete with the token of a claim taken over")
	requireLeaseLost(t, f.store.Release(f.ctx, f.releaseRequest(key, old.Token, "stale")), "Release with the token of a claim taken over")
	requireLeaseLost(t, f.store.Extend(f.ctx, f.extendRequest(key, old.Token)), "Extend with the token of a claim taken over")
	rec := f.requireHeld(t, key, 2)
	require.Empty(t, rec.LastError, "a refused Release must not record its error")

	f.complete(t, key, taken.Token, []byte("new"))
	f.requireCompleted(t, key, []byte("new"))
}
