package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/store"
)

// ownTokenCases pin the claim a caller makes with a token of its own
// (AcquireRequest.Token): asked again after its answer was lost, the store
// grants the same claim instead of finding the key held by a stranger, and
// counts no attempt for it; any other token still finds the key held.
var ownTokenCases = []testCase{
	{"Again", testOwnTokenAgain},
	{"AfterLeaseEnded", testOwnTokenAfterLease},
	{"AfterTakeover", testOwnTokenAfterTakeover},
	{"Retried", testOwnTokenRetried},
	{"Fingerprint", testOwnTokenFingerprint},
	{"Completed", testOwnTokenCompleted},
	{"Batch", testOwnTokenBatch},
}

// claimWith claims key with the caller's token and requires that the
// store granted it under that very token.
func (f *fixture) claimWith(t *testing.T, key string, token store.Token) store.Claim {
	t.Helper()
	c := f.acquireWith(t, key, "", token, f.lease())
	require.True(t, c.Acquired, "Acquire(%q) with a token of the caller's should claim the key; got a %s record", key, c.Record.State)
	requireClaimed(t, c)
	require.Equal(t, token, c.Token, "an Acquire with a token of the caller's claims with that token")
	return c
}

// testOwnTokenAgain: the answer of a claim was lost, and the caller asks
// again while its lease is live.
func testOwnTokenAgain(t *testing.T, f *fixture) {
	key := f.key("again")
	token := store.NewToken()
	first := f.claimWith(t, key, token)
	require.Equal(t, 1, first.Record.Attempt)
	f.advance(3 * f.tick)

	// acquireWith checks that the lease runs from this call, not the first.
	again := f.acquireWith(t, key, "", token, f.lease())
	f.expectKept(t, key, again.Acquired, "Acquire(%q) with the token that holds it must grant the same claim again; got acquired=%v, a %s record", key, again.Acquired, again.Record.State)
	require.Equal(t, token, again.Token)
	require.Equal(t, 1, again.Record.Attempt, "asking again for one's own claim counts no attempt")
	require.Falsef(t, again.Record.LeaseUntil.Before(first.Record.LeaseUntil),
		"the lease granted again ends at %v, before the first answer's %v", again.Record.LeaseUntil, first.Record.LeaseUntil)

	// A stranger, with a token of its own or none, still finds it held.
	stranger := f.acquireWith(t, key, "", store.NewToken(), f.lease())
	f.expectKept(t, key, !stranger.Acquired && stranger.Record.State == store.StateProcessing,
		"Acquire(%q) with another token must find the key held; got acquired=%v, a %s record", key, stranger.Acquired, stranger.Record.State)
	require.True(t, stranger.Token.IsZero(), "a claim that is not acquired has no token")
	f.requireHeld(t, key, 1)

	f.complete(t, key, token, []byte("once"))
	f.requireCompleted(t, key, []byte("once"))
}

// testOwnTokenAfterLease: the caller asks again after its lease ended and
// before anyone took the key over: the claim is still its own.
func testOwnTokenAfterLease(t *testing.T, f *fixture) {
	key := f.key("after-lease")
	token := store.NewToken()
	f.claimWith(t, key, token)
	f.advance(f.lease())

	again := f.acquireWith(t, key, "", token, f.lease())
	require.True(t, again.Acquired, "Acquire(%q) with the token of its ended, untaken claim must grant it again", key)
	require.Equal(t, token, again.Token)
	require.Equal(t, 1, again.Record.Attempt, "a claim taken up again by its own token is no takeover: no attempt counted")
	f.requireHeld(t, key, 1)
	f.extend(t, key, token, f.lease())
	f.complete(t, key, token, []byte("mine"))
	f.requireCompleted(t, key, []byte("mine"))
}

// testOwnTokenAfterTakeover: the caller's claim ended and another caller
// took the key over; asking again with the old token is a stranger's
// Acquire.
func testOwnTokenAfterTakeover(t *testing.T, f *fixture) {
	key := f.key("after-takeover")
	old := store.NewToken()
	f.claimWith(t, key, old)
	f.advance(f.lease())
	newer := f.claimWith(t, key, store.NewToken())
	f.requireAttempt(t, key, newer, 2)

	c := f.acquireWith(t, key, "", old, f.lease())
	f.expectKept(t, key, !c.Acquired && c.Record.State == store.StateProcessing,
		"Acquire(%q) with the token of a claim taken over must find the key held; got acquired=%v, a %s record", key, c.Acquired, c.Record.State)
	require.Equal(t, 2, c.Record.Attempt)
	requireLeaseLost(t, f.store.Complete(f.ctx, f.completeRequest(key, old, "stale")), "Complete with a taken-over token")
	f.complete(t, key, newer.Token, []byte("newer"))
	f.requireCompleted(t, key, []byte("newer"))
}

// testOwnTokenRetried: a failed record retried by a claim with the
// caller's token counts its attempt as any retry does, and asking again
// with that token counts no more.
func testOwnTokenRetried(t *testing.T, f *fixture) {
	key := f.key("retried")
	first := f.claim(t, key)
	f.release(t, key, first.Token, "boom")

	token := store.NewToken()
	c := f.claimWith(t, key, token)
	f.requireAttempt(t, key, c, 2)
	again := f.acquireWith(t, key, "", token, f.lease())
	f.expectKept(t, key, again.Acquired, "Acquire(%q) with the token of its retry must grant it again", key)
	require.Equal(t, 2, again.Record.Attempt, "asking again for one's own retry counts no attempt")
	require.Equal(t, "boom", again.Record.LastError)
	f.requireHeld(t, key, 2)
}

// testOwnTokenFingerprint: the token does not excuse another payload.
func testOwnTokenFingerprint(t *testing.T, f *fixture) {
	key := f.key("fingerprint")
	token := store.NewToken()
	c := f.acquireWith(t, key, "fp-a", token, f.lease())
	require.True(t, c.Acquired)
	_, err := f.store.Acquire(f.ctx, store.AcquireRequest{Key: key, Lease: f.lease(), Fingerprint: "fp-b", Token: token})
	require.ErrorIs(t, err, store.ErrKeyReused, "a fingerprint mismatch wins over the caller's own token")
	f.requireHeld(t, key, 1)
}

// testOwnTokenCompleted: once the claim completed, its token asks for a
// duplicate's answer like any other.
func testOwnTokenCompleted(t *testing.T, f *fixture) {
	key := f.key("completed")
	token := store.NewToken()
	f.claimWith(t, key, token)
	f.complete(t, key, token, []byte("done"))

	c := f.acquireWith(t, key, "", token, f.lease())
	require.False(t, c.Acquired, "Acquire(%q) of a completed record must not claim it, whatever its token", key)
	require.Equal(t, store.StateCompleted, c.Record.State)
	requireBytes(t, []byte("done"), c.Record.Result)
	require.Equal(t, 1, c.Record.Attempt)
}

// testOwnTokenBatch: AcquireBatch recognises the callers' own tokens as
// Acquire does, key by key.
func testOwnTokenBatch(t *testing.T, f *fixture) {
	b := f.batchStore(t)
	mine, theirs, fresh := f.key("batch-mine"), f.key("batch-theirs"), f.key("batch-fresh")
	token, other := store.NewToken(), store.NewToken()
	f.claimWith(t, mine, token)
	f.claimWith(t, theirs, other)

	freshToken := store.NewToken()
	outs := b.AcquireBatch(f.ctx, []store.AcquireRequest{
		{Key: mine, Lease: f.lease(), Token: token},
		{Key: theirs, Lease: f.lease(), Token: store.NewToken()},
		{Key: fresh, Lease: f.lease(), Token: freshToken},
	})
	require.Len(t, outs, 3)
	for i, o := range outs {
		require.NoError(t, o.Err, "AcquireBatch, request %d", i)
	}
	f.expectKept(t, mine, outs[0].Claim.Acquired, "AcquireBatch: the caller's own claim must be granted again")
	require.Equal(t, token, outs[0].Claim.Token)
	require.Equal(t, 1, outs[0].Claim.Record.Attempt)
	f.expectKept(t, theirs, !outs[1].Claim.Acquired && outs[1].Claim.Record.State == store.StateProcessing,
		"AcquireBatch: another caller's claim must be held; got acquired=%v", outs[1].Claim.Acquired)
	require.True(t, outs[2].Claim.Acquired, "AcquireBatch: a new key is claimed")
	require.Equal(t, freshToken, outs[2].Claim.Token, "AcquireBatch claims a new key with the caller's token")
	f.note(mine, outs[0].Claim.Record.LeaseUntil)
	f.note(fresh, outs[2].Claim.Record.LeaseUntil)
	f.complete(t, mine, token, []byte("a"))
	f.complete(t, fresh, freshToken, []byte("c"))
}
