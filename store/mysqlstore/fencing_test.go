package mysqlstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/store"
)

// TestStaleTokenFenced: once another claim took a key over, the token of
// the claim it took over changes nothing: Complete, Release and Extend
// with it (alone, in a batch, or inside a transaction) fail with
// ErrLeaseLost and leave the new holder's record as it is; the new holder
// completes it.
func TestStaleTokenFenced(t *testing.T) {
	t.Parallel()
	d := newDB(t, 4)
	s := d.store(t, nil)
	ctx := t.Context()
	key := "pay:p1"
	stale, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: 50 * time.Millisecond})
	require.NoError(t, err)
	require.True(t, stale.Acquired)
	waitDBTime(t, d.db, stale.Record.LeaseUntil)
	holder, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
	require.NoError(t, err)
	require.True(t, holder.Acquired)
	require.Equal(t, 2, holder.Record.Attempt)

	require.ErrorIs(t, s.Complete(ctx, store.CompleteRequest{Key: key, Token: stale.Token, Result: []byte("stale"), Retention: time.Hour}), store.ErrLeaseLost)
	require.ErrorIs(t, s.Release(ctx, store.ReleaseRequest{Key: key, Token: stale.Token, Error: "stale", Retention: time.Hour}), store.ErrLeaseLost)
	require.ErrorIs(t, s.Extend(ctx, store.ExtendRequest{Key: key, Token: stale.Token, Lease: time.Hour}), store.ErrLeaseLost)
	require.ErrorIs(t, s.CompleteBatch(ctx, []store.CompleteRequest{{Key: key, Token: stale.Token, Result: []byte("stale"), Retention: time.Hour}})[0], store.ErrLeaseLost)
	require.ErrorIs(t, s.ExtendBatch(ctx, []store.ExtendRequest{{Key: key, Token: stale.Token, Lease: time.Hour}})[0], store.ErrLeaseLost)
	tx, err := d.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	hctx := store.ContextWithClaim(ctx, &store.HeldClaim{Key: key, Token: stale.Token, Attempt: 1, Retention: time.Hour})
	require.ErrorIs(t, s.CompleteTx(hctx, tx, []byte("stale")), store.ErrLeaseLost)
	require.NoError(t, tx.Rollback())

	rec, err := s.Get(ctx, key)
	require.NoError(t, err)
	require.Equal(t, store.StateProcessing, rec.State, "the stale token changed the holder's record")
	require.Equal(t, 2, rec.Attempt)
	require.True(t, rec.LeaseUntil.Equal(holder.Record.LeaseUntil), "the stale token's Extend moved the holder's lease")
	require.Empty(t, rec.LastError)

	require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: key, Token: holder.Token, Result: []byte("mine"), Retention: time.Hour}))
	rec, err = s.Get(ctx, key)
	require.NoError(t, err)
	require.Equal(t, store.StateCompleted, rec.State)
	require.Equal(t, "mine", string(rec.Result))
}
