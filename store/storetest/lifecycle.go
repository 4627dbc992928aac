package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
)

// lifecycleCases pin the moves between states: completion, fencing by
// token, lease expiry and takeover, extension, release and retention.
var lifecycleCases = []testCase{
	{"Complete", testComplete},
	{"CompleteEmptyResult", testCompleteEmptyResult},
	{"CompletedIsImmutable", testCompletedImmutable},
	{"Takeover", testTakeover},
	{"ExpiredWithoutTakeover", testExpiredWithoutTakeover},
	{"Extend", testExtend},
	{"Release", testRelease},
	{"FailedRetention", testFailedRetention},
	{"CompletedRetention", testCompletedRetention},
}

func testComplete(t *testing.T, f *fixture) {
	key := f.key("complete")
	c := f.claim(t, key)
	result := []byte("first result")
	f.complete(t, key, c.Token, result)
	// The store must have copied the bytes: callers reuse their buffers.
	copy(result, "XXXXXXXXXXXX")

	rec := f.requireCompleted(t, key, []byte("first result"))
	require.Equal(t, key, rec.Key)
	require.Equal(t, 1, rec.Attempt)
	f.requireFromNow(t, f.retention(), rec.ExpiresAt, "ExpiresAt of a completed record")

	// A later duplicate sees the same record.
	again := f.requireCompleted(t, key, []byte("first result"))
	require.Equal(t, rec.Attempt, again.Attempt)
	f.requireAbout(t, rec.ExpiresAt, again.ExpiresAt, "ExpiresAt must not move when a duplicate reads the record")
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
	require.NoError(t, f.store.Complete(f.ctx, key, c.Token, []byte("kept"), 3*f.lease()))

	requireLeaseLost(t, f.store.Complete(f.ctx, key, c.Token, []byte("overwritten"), f.retention()), "a second Complete")
	requireLeaseLost(t, f.store.Release(f.ctx, key, c.Token, f.failure("late")), "Release of a completed key")
	requireLeaseLost(t, f.store.Extend(f.ctx, key, c.Token, f.lease()), "Extend of a completed key")
	f.requireCompleted(t, key, []byte("kept"))

	// The lease is over once the record completes: its end changes nothing.
	f.advance(f.lease() + f.tick)
	rec := f.requireCompleted(t, key, []byte("kept"))
	require.Equal(t, 1, rec.Attempt)
}

func testTakeover(t *testing.T, f *fixture) {
	key := f.key("takeover")
	old := f.claim(t, key)
	f.advance(f.lease() + f.tick)

	c := f.acquire(t, key, "")
	require.True(t, c.Acquired, "a key whose lease expired must be taken over")
	require.Equal(t, 2, c.Record.Attempt, "a takeover counts an attempt")
	require.NotEqual(t, old.Token, c.Token, "a takeover needs a new token")
	require.False(t, c.Token.IsZero())
	f.requireFromNow(t, f.lease(), c.Record.LeaseUntil, "LeaseUntil after a takeover")

	// The old holder is fenced off, and its attempts change nothing.
	requireLeaseLost(t, f.store.Complete(f.ctx, key, old.Token, []byte("stale"), f.retention()), "Complete with a taken-over token")
	requireLeaseLost(t, f.store.Release(f.ctx, key, old.Token, f.failure("stale")), "Release with a taken-over token")
	requireLeaseLost(t, f.store.Extend(f.ctx, key, old.Token, 10*f.lease()), "Extend with a taken-over token")
	f.requireHeld(t, key, 2)

	f.complete(t, key, c.Token, []byte("new"))
	requireLeaseLost(t, f.store.Complete(f.ctx, key, old.Token, []byte("stale"), f.retention()), "Complete with a taken-over token")
	f.requireCompleted(t, key, []byte("new"))
}

func testExpiredWithoutTakeover(t *testing.T, f *fixture) {
	key := f.key("expired")
	c := f.claim(t, key)
	f.advance(f.lease() + f.tick)

	// Nobody took the key over: a store may still accept the holder's
	// result or refuse it, but its answer must match the record.
	err := f.store.Complete(f.ctx, key, c.Token, []byte("late"), f.retention())
	if err == nil {
		f.requireCompleted(t, key, []byte("late"))
		return
	}
	requireLeaseLost(t, err, "Complete after the lease expired")
	again := f.acquire(t, key, "")
	require.True(t, again.Acquired, "Complete was refused, so the key must be free to claim")
}

func testExtend(t *testing.T, f *fixture) {
	key := f.key("extend")
	c := f.claim(t, key) // holds until 10 ticks
	f.advance(5 * f.tick)

	require.NoError(t, f.store.Extend(f.ctx, key, c.Token, 2*f.lease())) // now until 25 ticks
	rec := f.requireHeld(t, key, 1)
	// Advance may oversleep on real time, which only moves the new lease
	// later: bound it from below here, from both sides against Now.
	earliest := c.Record.LeaseUntil.Add(5*f.tick + f.lease() - f.tick)
	require.Truef(t, rec.LeaseUntil.After(earliest), "LeaseUntil after Extend is %v, before %v", rec.LeaseUntil, earliest)
	f.requireFromNow(t, 2*f.lease(), rec.LeaseUntil, "LeaseUntil after Extend")

	f.advance(f.lease()) // 15 ticks: past the first lease, within the extended one
	f.requireHeld(t, key, 1)

	f.advance(f.lease() + 5*f.tick) // 30 ticks: past the extended lease
	taken := f.acquire(t, key, "")
	require.True(t, taken.Acquired, "the extended lease ended, so the key must be taken over")
	require.Equal(t, 2, taken.Record.Attempt)
	requireLeaseLost(t, f.store.Extend(f.ctx, key, c.Token, f.lease()), "Extend with a taken-over token")
	f.requireHeld(t, key, 2)
}

func testRelease(t *testing.T, f *fixture) {
	key := f.key("release")
	c := f.claim(t, key)
	f.release(t, key, c.Token, "boom")
	if rec, ok := f.inspect(t, key); ok {
		require.Equal(t, dedup.StateFailed, rec.State)
		require.Equal(t, "boom", rec.LastError)
		require.Equal(t, 1, rec.Attempt)
		f.requireFromNow(t, f.retention(), rec.ExpiresAt, "ExpiresAt of a failed record")
	}

	requireLeaseLost(t, f.store.Release(f.ctx, key, c.Token, f.failure("twice")), "a second Release")
	requireLeaseLost(t, f.store.Complete(f.ctx, key, c.Token, []byte("late"), f.retention()), "Complete after Release")
	requireLeaseLost(t, f.store.Extend(f.ctx, key, c.Token, f.lease()), "Extend after Release")

	second := f.acquire(t, key, "")
	require.True(t, second.Acquired, "a failed key must be claimable again")
	require.Equal(t, 2, second.Record.Attempt, "a failed record remembers its attempts")
	require.NotEqual(t, c.Token, second.Token)
	if second.Record.LastError != "" {
		require.Equal(t, "boom", second.Record.LastError)
	}
	f.requireHeld(t, key, 2)

	f.release(t, key, second.Token, "boom again")
	third := f.claim(t, key)
	require.Equal(t, 3, third.Record.Attempt)
	f.complete(t, key, third.Token, []byte("finally"))
	rec := f.requireCompleted(t, key, []byte("finally"))
	require.Equal(t, 3, rec.Attempt)
}

func testFailedRetention(t *testing.T, f *fixture) {
	key := f.key("failed-retention")
	f.release(t, key, f.claim(t, key).Token, "boom") // kept for 10 ticks
	f.advance(5 * f.tick)
	c := f.claim(t, key)
	require.Equal(t, 2, c.Record.Attempt, "within its retention a failed record keeps its attempts")

	f.release(t, key, c.Token, "boom") // kept until 15 ticks
	f.advance(f.retention() + f.tick)
	c = f.claim(t, key)
	require.Equal(t, 1, c.Record.Attempt, "an expired failed record is forgotten")
}

func testCompletedRetention(t *testing.T, f *fixture) {
	key := f.key("retention")
	c := f.claim(t, key)
	f.complete(t, key, c.Token, []byte("kept")) // kept for 10 ticks
	f.advance(5 * f.tick)
	f.requireCompleted(t, key, []byte("kept"))

	f.advance(5*f.tick + f.tick)
	again := f.acquire(t, key, "")
	require.True(t, again.Acquired, "a completed record must be forgotten after its retention")
	require.Equal(t, 1, again.Record.Attempt)
	require.Empty(t, again.Record.Result)
	requireLeaseLost(t, f.store.Complete(f.ctx, key, c.Token, []byte("stale"), f.retention()), "Complete with the first claim's token")
}
