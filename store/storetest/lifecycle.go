package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/store"
)

// lifecycleCases pin the moves between states: completion, takeover,
// extension, release, attempts and retention.
var lifecycleCases = []testCase{
	{"Complete", testComplete},
	{"CompleteEmptyResult", testCompleteEmptyResult},
	{"CompletedIsImmutable", testCompletedImmutable},
	{"Takeover", testTakeover},
	{"Extend", testExtend},
	{"Release", testRelease},
	{"CompletedKeepsLastError", testCompletedKeepsLastError},
	{"FailedRetention", testFailedRetention},
	{"CompletedRetention", testCompletedRetention},
}

func testComplete(t *testing.T, f *fixture) {
	key := f.key("complete")
	c := f.claim(t, key)
	result := []byte("first result")
	w := f.complete(t, key, c.Token, result)
	// The store must have copied the bytes: callers reuse their buffers.
	copy(result, "XXXXXXXXXXXX")

	rec := f.requireCompleted(t, key, []byte("first result"))
	require.Equal(t, key, rec.Key)
	require.Equal(t, 1, rec.Attempt)
	w.requireAt(t, f.retention(), rec.ExpiresAt, "ExpiresAt of a completed record")

	// A later duplicate sees the same record.
	again := f.requireCompleted(t, key, []byte("first result"))
	require.Equal(t, rec.Attempt, again.Attempt)
	requireSameTime(t, rec.ExpiresAt, again.ExpiresAt, "ExpiresAt must not move when a duplicate reads the record")
}

func testCompleteEmptyResult(t *testing.T, f *fixture) {
	for name, result := range map[string][]byte{"nil": nil, "empty": {}} {
		key := f.key("empty-" + name)
		c := f.claim(t, key)
		f.complete(t, key, c.Token, result)
		f.requireCompleted(t, key, nil)
	}
}

func testCompletedImmutable(t *testing.T, f *fixture) {
	key := f.key("immutable")
	c := f.claim(t, key)
	// Kept past the end of the lease, which the test goes beyond.
	f.completeFor(t, key, c.Token, []byte("kept"), 3*f.lease())

	requireLeaseLost(t, f.store.Complete(f.ctx, f.completeRequest(key, staleToken(), "overwritten")), "Complete of a completed key with another token")
	requireLeaseLost(t, f.store.Release(f.ctx, f.releaseRequest(key, c.Token, "late")), "Release of a completed key")
	requireLeaseLost(t, f.store.Extend(f.ctx, f.extendRequest(key, c.Token)), "Extend of a completed key")
	f.requireCompleted(t, key, []byte("kept"))

	// The lease is over once the record completes: its end changes nothing.
	f.advance(f.lease())
	rec := f.requireCompleted(t, key, []byte("kept"))
	require.Equal(t, 1, rec.Attempt)
}

func testTakeover(t *testing.T, f *fixture) {
	key := f.key("takeover")
	old := f.claim(t, key)
	f.advance(f.lease())

	c := f.acquire(t, key, "") // checks the new LeaseUntil
	require.True(t, c.Acquired, "a key whose lease expired must be taken over")
	requireClaimed(t, c)
	require.Equal(t, 2, c.Record.Attempt, "a takeover counts an attempt")
	require.NotEqual(t, old.Token, c.Token, "a takeover needs a new token")

	// The old holder is fenced off, and its attempts change nothing.
	requireLeaseLost(t, f.store.Complete(f.ctx, f.completeRequest(key, old.Token, "stale")), "Complete with a taken-over token")
	requireLeaseLost(t, f.store.Release(f.ctx, f.releaseRequest(key, old.Token, "stale")), "Release with a taken-over token")
	requireLeaseLost(t, f.store.Extend(f.ctx, store.ExtendRequest{Key: key, Token: old.Token, Lease: 10 * f.lease()}), "Extend with a taken-over token")
	f.requireHeld(t, key, 2)

	// The token that completes the record is the new holder's: the old one
	// is not taken for it.
	f.complete(t, key, c.Token, []byte("new"))
	requireLeaseLost(t, f.store.Complete(f.ctx, f.completeRequest(key, old.Token, "stale")), "Complete with a taken-over token")
	f.requireCompleted(t, key, []byte("new"))
}

func testExtend(t *testing.T, f *fixture) {
	key := f.key("extend")
	c := f.claim(t, key) // holds until 10 ticks
	f.advance(5 * f.tick)

	w := f.extend(t, key, c.Token, 4*f.lease()) // now until at least 45 ticks
	rec := f.requireHeld(t, key, 1)
	w.requireAt(t, 4*f.lease(), rec.LeaseUntil, "LeaseUntil after Extend")
	// Without the store's clock, the order alone: the extension was asked
	// after 5 ticks, for longer than the first lease.
	earliest := c.Record.LeaseUntil.Add(3 * f.lease())
	require.Falsef(t, rec.LeaseUntil.Before(earliest), "LeaseUntil after Extend is %v, before %v", rec.LeaseUntil, earliest)

	f.advance(f.lease()) // past the first lease, well within the extended one
	f.requireHeld(t, key, 1)

	f.advance(3 * f.lease()) // past the extended lease
	taken := f.acquire(t, key, "")
	require.True(t, taken.Acquired, "the extended lease ended, so the key must be taken over")
	require.Equal(t, 2, taken.Record.Attempt)
	requireLeaseLost(t, f.store.Extend(f.ctx, f.extendRequest(key, c.Token)), "Extend with a taken-over token")
	f.requireHeld(t, key, 2)
}

func testRelease(t *testing.T, f *fixture) {
	key := f.key("release")
	c := f.claim(t, key)
	w := f.release(t, key, c.Token, "boom")
	if rec, ok := f.inspect(t, key); ok {
		require.Equal(t, store.StateFailed, rec.State)
		require.Equal(t, "boom", rec.LastError)
		require.Equal(t, 1, rec.Attempt)
		w.requireAt(t, f.retention(), rec.ExpiresAt, "ExpiresAt of a failed record")
	}

	requireLeaseLost(t, f.store.Release(f.ctx, f.releaseRequest(key, c.Token, "twice")), "a second Release")
	requireLeaseLost(t, f.store.Complete(f.ctx, f.completeRequest(key, c.Token, "late")), "Complete after Release")
	requireLeaseLost(t, f.store.Extend(f.ctx, f.extendRequest(key, c.Token)), "Extend after Release")

	second := f.retry(t, key, "", 2) // a failed record remembers its attempts
	require.NotEqual(t, c.Token, second.Token)
	if second.Record.LastError != "" {
		require.Equal(t, "boom", second.Record.LastError)
	}
	f.requireHeld(t, key, 2)

	f.release(t, key, second.Token, "boom again")
	third := f.retry(t, key, "", 3)
	f.complete(t, key, third.Token, []byte("finally"))
	rec := f.requireCompleted(t, key, []byte("finally"))
	require.Equal(t, 3, rec.Attempt)
}

func testCompletedKeepsLastError(t *testing.T, f *fixture) {
	key := f.key("last-error")
	f.release(t, key, f.claim(t, key).Token, "boom")
	c := f.retry(t, key, "", 2)
	f.complete(t, key, c.Token, []byte("ok"))

	rec := f.requireCompleted(t, key, []byte("ok"))
	require.Equal(t, "boom", rec.LastError, "a completed record keeps the error of the failure before it")
	require.Equal(t, 2, rec.Attempt, "a completed record keeps its attempt count")
	if rec, ok := f.inspect(t, key); ok {
		require.Equal(t, store.StateCompleted, rec.State)
		require.Equal(t, "boom", rec.LastError, "Get of a completed record after a failure")
		require.Equal(t, 2, rec.Attempt)
	}
}

func testFailedRetention(t *testing.T, f *fixture) {
	key := f.key("failed-retention")
	f.release(t, key, f.claim(t, key).Token, "boom") // kept for 10 ticks
	f.advance(5 * f.tick)
	c := f.retry(t, key, "", 2) // within its retention a failed record keeps its attempts

	f.release(t, key, c.Token, "boom") // kept for 10 more ticks
	f.advance(f.retention())
	c = f.claim(t, key)
	require.Equal(t, 1, c.Record.Attempt, "an expired failed record is forgotten")
}

func testCompletedRetention(t *testing.T, f *fixture) {
	key := f.key("retention")
	c := f.claim(t, key)
	f.complete(t, key, c.Token, []byte("kept")) // kept for 10 ticks
	f.advance(5 * f.tick)
	f.requireCompleted(t, key, []byte("kept"))

	f.advance(5 * f.tick)
	again := f.acquire(t, key, "")
	require.True(t, again.Acquired, "a completed record must be forgotten after its retention")
	require.Equal(t, 1, again.Record.Attempt)
	require.Empty(t, again.Record.Result)
	requireLeaseLost(t, f.store.Complete(f.ctx, f.completeRequest(key, c.Token, "stale")), "Complete with the first claim's token")
}
