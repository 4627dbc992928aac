package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/store"
)

// deadlineCases pin where a lease and a retention end: at the deadline
// exactly, the deadline being set by the last call that set it. On a fake
// clock they test the boundary; on real time Advance sleeps at least as
// long, so the same checks hold.
var deadlineCases = []testCase{
	{"LeaseEndsAtDeadline", testLeaseEndsAtDeadline},
	{"ExtendSetsEarlierDeadline", testExtendEarlier},
	{"CompletedGoneAtExpiry", testCompletedGoneAtExpiry},
	{"FailedGoneAtExpiry", testFailedGoneAtExpiry},
}

func testLeaseEndsAtDeadline(t *testing.T, f *fixture) {
	key := f.key("lease-deadline")
	old := f.claim(t, key)
	f.advance(f.lease() - f.tick)
	f.requireHeld(t, key, 1) // before the deadline the lease holds

	f.advance(f.tick) // the deadline exactly
	c := f.acquire(t, key, "")
	require.True(t, c.Acquired, "a lease has expired at its deadline exactly: the next Acquire takes over")
	requireClaimed(t, c)
	require.Equal(t, 2, c.Record.Attempt, "a takeover counts an attempt")
	require.NotEqual(t, old.Token, c.Token, "a takeover needs a new token")
}

func testExtendEarlier(t *testing.T, f *fixture) {
	key := f.key("extend-earlier")
	c := f.claim(t, key) // until 10 ticks
	w := f.extend(t, key, c.Token, 2*f.tick)
	rec := f.requireHeld(t, key, 1)
	w.requireAt(t, 2*f.tick, rec.LeaseUntil, "LeaseUntil after an Extend to an earlier deadline")
	// Earlier, unless the Extend ran 8 ticks after the claim.
	f.expect(t, rec.LeaseUntil.Before(c.Record.LeaseUntil), c.Record.LeaseUntil.Add(-8*f.tick),
		"Extend sets the deadline to now + lease even when that is earlier: LeaseUntil %v, the claim's %v", rec.LeaseUntil, c.Record.LeaseUntil)

	f.advance(2 * f.tick)
	taken := f.acquire(t, key, "")
	require.True(t, taken.Acquired, "the shortened lease ended: the next Acquire takes over")
	require.Equal(t, 2, taken.Record.Attempt)
}

// requireGone requires that key has no record: Peek finds nothing, Get
// reports ErrNotFound (for stores with those abilities), and Acquire
// claims the key afresh.
func (f *fixture) requireGone(t *testing.T, key, why string) {
	t.Helper()
	if p, ok := f.store.(store.Peeker); ok {
		requireNoPeek(t, p, key, why)
	}
	if in, ok := f.store.(store.Inspector); ok {
		_, err := in.Get(f.ctx, key)
		require.ErrorIs(t, err, store.ErrNotFound, "Get(%q): %s", key, why)
	}
	c := f.acquire(t, key, "")
	require.True(t, c.Acquired, "Acquire(%q) must claim the key afresh: %s", key, why)
	require.Equal(t, 1, c.Record.Attempt, "Acquire(%q) must claim the key afresh: %s", key, why)
	require.Empty(t, c.Record.Result)
	require.Empty(t, c.Record.LastError, "a record claimed afresh has no past")
}

func testCompletedGoneAtExpiry(t *testing.T, f *fixture) {
	key := f.key("completed-expiry")
	f.complete(t, key, f.claim(t, key).Token, []byte("kept"))
	f.advance(f.retention() - f.tick)
	f.requireCompleted(t, key, []byte("kept")) // before ExpiresAt it is kept

	f.advance(f.tick) // ExpiresAt exactly
	f.requireGone(t, key, "a completed record is gone at its ExpiresAt")
}

func testFailedGoneAtExpiry(t *testing.T, f *fixture) {
	key := f.key("failed-expiry")
	f.release(t, key, f.claim(t, key).Token, "boom")
	deadline := f.deadlines[key]
	f.advance(f.retention() - f.tick)
	if in, ok := f.store.(store.Inspector); ok {
		rec, err := in.Get(f.ctx, key)
		if err != nil || rec.State != store.StateFailed {
			f.failOnTime(t, deadline, "before its ExpiresAt a failed record is kept; Get(%q) gave a %s record, error %v", key, rec.State, err)
		}
	}

	f.advance(f.tick) // ExpiresAt exactly
	f.requireGone(t, key, "a failed record is gone at its ExpiresAt")
}
