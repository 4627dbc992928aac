package rueidisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/redisstore"
	"github.com/dedup-go/dedup/store/rueidisstore"
)

// interop returns a redisstore and a rueidisstore on the shared Redis
// under one prefix: the same records.
func interop(t *testing.T) (*redisstore.Store, *rueidisstore.Store) {
	t.Helper()
	c, gc := shared(t)
	prefix := redistest.Prefix(t, gc)
	rs, err := redisstore.New(t.Context(), gc, &redisstore.Options{Prefix: prefix})
	require.NoError(t, err)
	us := newStore(t, c, gc, &rueidisstore.Options{Prefix: prefix})
	require.Equal(t, rs.RedisKey("n:1"), us.RedisKey("n:1"), "one key for one record")
	return rs, us
}

// TestInterop: a record claimed, completed, released or extended through
// one store is read and carried on by the other, both ways, so a user
// switches clients with no migration.
func TestInterop(t *testing.T) {
	rs, us := interop(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	lease, keep := time.Minute, time.Hour
	type side struct {
		name string
		s    interface {
			store.BatchStore
			store.Inspector
			store.CompleteReporter
		}
	}
	sides := []side{{"redisstore", rs}, {"rueidisstore", us}}
	for i, first := range sides {
		other := sides[1-i]
		t.Run(first.name+" then "+other.name, func(t *testing.T) {
			key := "pay:" + first.name
			claim, err := first.s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: lease, Fingerprint: "fp"})
			require.NoError(t, err)
			require.True(t, claim.Acquired)

			// The other store sees the claim in flight, refuses it, and
			// fences it by its token.
			dup, err := other.s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: lease, Fingerprint: "fp"})
			require.NoError(t, err)
			require.False(t, dup.Acquired)
			require.Equal(t, store.StateProcessing, dup.Record.State)
			_, err = other.s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: lease, Fingerprint: "other"})
			require.ErrorIs(t, err, store.ErrKeyReused)
			require.ErrorIs(t, other.s.Complete(ctx, store.CompleteRequest{Key: key, Token: store.NewToken(), Retention: keep}), store.ErrLeaseLost)

			// The other store extends and releases the first's claim.
			require.NoError(t, other.s.Extend(ctx, store.ExtendRequest{Key: key, Token: claim.Token, Lease: lease}))
			require.NoError(t, other.s.Release(ctx, store.ReleaseRequest{Key: key, Token: claim.Token, Error: "boom", Retention: keep}))

			// The first takes the failed record over (attempt 2), the
			// other completes it, and both read one record.
			retry, err := first.s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: lease, Fingerprint: "fp"})
			require.NoError(t, err)
			require.True(t, retry.Acquired)
			require.Equal(t, 2, retry.Record.Attempt)
			require.Equal(t, "boom", retry.Record.LastError)
			done, err := other.s.CompleteReport(ctx, store.CompleteRequest{Key: key, Token: retry.Token, Result: []byte("receipt"), Retention: keep})
			require.NoError(t, err)
			require.Equal(t, store.CompletionWrote, done)
			again, err := first.s.CompleteReport(ctx, store.CompleteRequest{Key: key, Token: retry.Token, Result: []byte("other"), Retention: keep})
			require.NoError(t, err)
			require.Equal(t, store.CompletionUnchanged, again, "completed by the same token through the other client")

			a, err := first.s.Get(ctx, key)
			require.NoError(t, err)
			b, err := other.s.Get(ctx, key)
			require.NoError(t, err)
			require.Equal(t, a, b)
			require.Equal(t, store.StateCompleted, a.State)
			require.Equal(t, "receipt", string(a.Result))
			require.Equal(t, 2, a.Attempt)
			require.Equal(t, "fp", a.Fingerprint)
			require.Equal(t, "boom", a.LastError)
			require.Equal(t, retry.Token, a.Token)

			dup, err = other.s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: lease})
			require.NoError(t, err)
			require.False(t, dup.Acquired)
			require.Equal(t, "receipt", string(dup.Record.Result))
		})
	}

	t.Run("batches and inspection", func(t *testing.T) {
		reqs := []store.AcquireRequest{{Key: "b:1", Lease: lease}, {Key: "b:2", Lease: lease}, {Key: "b:3", Lease: lease}}
		claims := rs.AcquireBatch(ctx, reqs)
		var done []store.CompleteRequest
		for i, o := range claims {
			require.NoError(t, o.Err)
			require.True(t, o.Claim.Acquired)
			done = append(done, store.CompleteRequest{Key: reqs[i].Key, Token: o.Claim.Token, Result: []byte{byte('a' + i)}, Retention: keep})
		}
		require.NoError(t, us.ExtendBatch(ctx, []store.ExtendRequest{{Key: "b:1", Token: claims[0].Claim.Token, Lease: lease}})[0])
		for _, o := range us.CompleteBatchReport(ctx, done) {
			require.NoError(t, o.Err)
			require.Equal(t, store.CompletionWrote, o.Completion)
		}
		for _, o := range rs.CompleteBatchReport(ctx, done) {
			require.NoError(t, o.Err)
			require.Equal(t, store.CompletionUnchanged, o.Completion)
		}
		for _, o := range us.AcquireBatch(ctx, reqs) {
			require.NoError(t, o.Err)
			require.False(t, o.Claim.Acquired)
			require.Equal(t, store.StateCompleted, o.Claim.Record.State)
		}
		scan := func(s store.Inspector) map[string]store.Record {
			got := map[string]store.Record{}
			for rec, err := range s.Scan(ctx, "b:") {
				require.NoError(t, err)
				got[rec.Key] = rec
			}
			return got
		}
		require.Len(t, scan(us), 3)
		require.Equal(t, scan(rs), scan(us))

		deleted, rec, err := us.DeleteIf(ctx, store.DeleteRequest{Key: "b:1"})
		require.NoError(t, err)
		require.True(t, deleted)
		require.Equal(t, "a", string(rec.Result))
		_, err = rs.Get(ctx, "b:1")
		require.ErrorIs(t, err, store.ErrNotFound)
		require.NoError(t, rs.Delete(ctx, "b:2"))
		_, err = us.Get(ctx, "b:2")
		require.ErrorIs(t, err, store.ErrNotFound)
	})
}
