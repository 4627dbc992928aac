package mysqlstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/mysqlstore"
)

// TestClaimStatementDecidesAlone: the claim statement (INSERT ... ON
// DUPLICATE KEY UPDATE) takes a record over only when it may, by itself,
// under its row lock: the read before it may be stale by then (another
// delivery released, completed or re-fingerprinted the record in
// between). Run on its own against each state: a failed record of another
// fingerprint, a live claim and a completed record are left as they are;
// a failed record of the same fingerprint (or none) is taken over with
// the attempt counted; a gone record is claimed afresh, whatever its
// fingerprint.
func TestClaimStatementDecidesAlone(t *testing.T) {
	t.Parallel()
	d := newDB(t, 2)
	s := d.store(t, nil)
	ctx := t.Context()
	claimAs := func(key, fp string) store.Token {
		t.Helper()
		tok := store.NewToken()
		_, err := d.db.ExecContext(ctx, mysqlstore.ClaimSQL(s), key, tok[:], fp, int64(60e6), int64(120e6))
		require.NoError(t, err)
		return tok
	}
	settle := func(key, fp string, complete bool) {
		t.Helper()
		c, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute, Fingerprint: fp})
		require.NoError(t, err)
		require.True(t, c.Acquired)
		if complete {
			require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: key, Token: c.Token, Retention: time.Hour}))
		} else {
			require.NoError(t, s.Release(ctx, store.ReleaseRequest{Key: key, Token: c.Token, Error: "boom", Retention: time.Hour}))
		}
	}
	requireRecord := func(key string, state store.State, attempt int, fp string) {
		t.Helper()
		rec, err := s.Get(ctx, key)
		require.NoError(t, err)
		require.Equal(t, state, rec.State, key)
		require.Equal(t, attempt, rec.Attempt, key)
		require.Equal(t, fp, rec.Fingerprint, key)
	}

	settle("failed-other", "A", false)
	claimAs("failed-other", "B")
	requireRecord("failed-other", store.StateFailed, 1, "A")

	settle("failed-same", "A", false)
	claimAs("failed-same", "A")
	requireRecord("failed-same", store.StateProcessing, 2, "A")

	settle("failed-none", "", false)
	claimAs("failed-none", "B")
	requireRecord("failed-none", store.StateProcessing, 2, "B")

	settle("completed", "A", true)
	claimAs("completed", "A")
	requireRecord("completed", store.StateCompleted, 1, "A")

	live := claimAs("live", "A")
	claimAs("live", "A")
	requireRecord("live", store.StateProcessing, 1, "A")
	var tok []byte
	require.NoError(t, d.db.QueryRow("SELECT token FROM dedup_records WHERE `key` = 'live'").Scan(&tok))
	require.Equal(t, live[:], tok, "a live claim keeps its token")

	settle("gone", "A", false)
	d.exec(t, "UPDATE dedup_records SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE `key` = 'gone'")
	claimAs("gone", "B")
	requireRecord("gone", store.StateProcessing, 1, "B")
	rec, err := s.Get(ctx, "gone")
	require.NoError(t, err)
	require.Empty(t, rec.LastError, "a record claimed afresh has no past")
}

// TestClaimStatementOwnToken: the claim statement run with the token of
// the caller's own claim (store.AcquireRequest.Token) grants that claim
// again while it is processing (lease live or ended), with its attempt
// and a new lease, and leaves every record that token settled, or holds
// under another fingerprint, as it is: a token that matches the row is
// not by itself a claim taken (an Acquire whose read found its claim
// processing, which then completed before the claim statement, must not
// turn the completed record back into a claim).
func TestClaimStatementOwnToken(t *testing.T) {
	t.Parallel()
	d := newDB(t, 2)
	s := d.store(t, nil)
	ctx := t.Context()
	claimWith := func(key, fp string, tok store.Token, lease time.Duration) {
		t.Helper()
		_, err := d.db.ExecContext(ctx, mysqlstore.ClaimSQL(s), key, tok[:], fp, lease.Microseconds(), (lease + time.Hour).Microseconds())
		require.NoError(t, err)
	}
	acquire := func(key, fp string, tok store.Token) store.Claim {
		t.Helper()
		c, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute, Fingerprint: fp, Token: tok})
		require.NoError(t, err)
		require.True(t, c.Acquired)
		return c
	}
	requireRecord := func(key string, state store.State, attempt int, fp string, tok store.Token) store.Record {
		t.Helper()
		rec, err := s.Get(ctx, key)
		require.NoError(t, err)
		require.Equal(t, state, rec.State, key)
		require.Equal(t, attempt, rec.Attempt, key)
		require.Equal(t, fp, rec.Fingerprint, key)
		require.Equal(t, tok, rec.Token, key)
		return rec
	}

	tok := store.NewToken()
	acquire("completed", "A", tok)
	require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: "completed", Token: tok, Result: []byte("r"), Retention: time.Hour}))
	claimWith("completed", "A", tok, time.Minute)
	rec := requireRecord("completed", store.StateCompleted, 1, "A", tok)
	require.Equal(t, "r", string(rec.Result))

	tok = store.NewToken()
	acquire("failed-other", "A", tok)
	require.NoError(t, s.Release(ctx, store.ReleaseRequest{Key: "failed-other", Token: tok, Error: "boom", Retention: time.Hour}))
	claimWith("failed-other", "B", tok, time.Minute)
	requireRecord("failed-other", store.StateFailed, 1, "A", tok)

	tok = store.NewToken()
	acquire("processing-other", "A", tok)
	claimWith("processing-other", "B", tok, time.Minute)
	requireRecord("processing-other", store.StateProcessing, 1, "A", tok)

	tok = store.NewToken()
	first := acquire("processing", "A", tok)
	claimWith("processing", "A", tok, 2*time.Minute)
	rec = requireRecord("processing", store.StateProcessing, 1, "A", tok)
	require.True(t, rec.LeaseUntil.After(first.Record.LeaseUntil), "the claim granted again runs its new lease from now")

	tok = store.NewToken()
	acquire("ended", "A", tok)
	d.exec(t, "UPDATE dedup_records SET lease_until = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE `key` = 'ended'")
	claimWith("ended", "", tok, time.Minute)
	rec = requireRecord("ended", store.StateProcessing, 1, "A", tok)
	require.True(t, rec.LeaseUntil.After(time.Now()), "the ended claim granted again holds a new lease")
}
