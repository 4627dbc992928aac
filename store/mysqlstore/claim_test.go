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
