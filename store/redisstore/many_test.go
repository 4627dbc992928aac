package redisstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/redisstore"
)

// TestBatchExpiry: the batches set each key's expiry from its own request
// although they send a lease or a retention once for a run of requests
// that repeat it: AcquireBatch gives every key its lease plus the grace
// from the server's clock, and CompleteBatch stamps every record with its
// own retention, its key expiring the millisecond before its ExpiresAt
// (read with PEXPIRETIME: no tolerance).
func TestBatchExpiry(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t)
	const abandoned = 5 * time.Second
	s := newStore(t, c, &redisstore.Options{AbandonedTTL: abandoned})
	ctx := t.Context()
	expiry := func(key string) time.Time { return expiryOf(t, c, s, key) }
	within := func(key string, got time.Time, ttl time.Duration, before, after time.Time) {
		t.Helper()
		require.False(t, got.Before(before.Truncate(time.Millisecond).Add(ttl)) || got.After(after.Add(ttl)),
			"%s expires at %v, not %v after the server's clock during the call (%v to %v)", key, got, ttl, before, after)
	}
	keys := []string{"a", "b", "c", "d", "e"}
	leases := []time.Duration{2 * time.Second, 2 * time.Second, 3 * time.Second, 2 * time.Second, 4 * time.Second}
	retentions := []time.Duration{7 * time.Second, 7 * time.Second, 11 * time.Second, 7 * time.Second, 13 * time.Second}

	reqs := make([]store.AcquireRequest, len(keys))
	for i, key := range keys {
		reqs[i] = store.AcquireRequest{Key: key, Lease: leases[i]}
	}
	before, err := serverTime(c)
	require.NoError(t, err)
	outs := s.AcquireBatch(ctx, reqs)
	after, err := serverTime(c)
	require.NoError(t, err)
	comps := make([]store.CompleteRequest, len(keys))
	for i, o := range outs {
		require.NoError(t, o.Err)
		require.True(t, o.Claim.Acquired)
		within(keys[i], expiry(keys[i]), leases[i]+abandoned, before, after)
		comps[i] = store.CompleteRequest{Key: keys[i], Token: o.Claim.Token, Result: []byte("r" + keys[i]), Retention: retentions[i]}
	}

	before, err = serverTime(c)
	require.NoError(t, err)
	require.Equal(t, make([]error, len(keys)), s.CompleteBatch(ctx, comps))
	after, err = serverTime(c)
	require.NoError(t, err)
	for i, key := range keys {
		rec, err := s.Get(ctx, key)
		require.NoError(t, err)
		require.Equal(t, store.StateCompleted, rec.State)
		require.Equal(t, "r"+key, string(rec.Result))
		require.Equal(t, rec.ExpiresAt.Add(-time.Millisecond), expiry(key), key)
		within(key, rec.ExpiresAt, retentions[i], before, after)
	}
}

// TestBatchBeyondOneRun: a batch of more keys than one script run takes
// is split into runs, every request answered at its own index; a key
// repeated in two runs is completed by the first and found completed by
// the second.
func TestBatchBeyondOneRun(t *testing.T) {
	t.Parallel()
	s := newStore(t, redistest.Client(t), nil)
	ctx := t.Context()
	const n = 2500
	acq := make([]store.AcquireRequest, n)
	for i := range acq {
		acq[i] = store.AcquireRequest{Key: "k" + itoa(i), Lease: time.Minute}
	}
	outs := s.AcquireBatch(ctx, acq)
	ext := make([]store.ExtendRequest, n)
	comp := make([]store.CompleteRequest, 0, n+1)
	for i, o := range outs {
		require.NoError(t, o.Err)
		require.True(t, o.Claim.Acquired, i)
		ext[i] = store.ExtendRequest{Key: acq[i].Key, Token: o.Claim.Token, Lease: 2 * time.Minute}
		comp = append(comp, store.CompleteRequest{Key: acq[i].Key, Token: o.Claim.Token, Result: []byte("r" + itoa(i)), Retention: time.Minute})
	}
	for i, err := range s.ExtendBatch(ctx, ext) {
		require.NoError(t, err, i)
	}
	// k0 again, in the second run, with another result.
	comp = append(comp[:1500], append([]store.CompleteRequest{{Key: "k0", Token: outs[0].Claim.Token, Result: []byte("again"), Retention: time.Minute}}, comp[1500:]...)...)
	for i, err := range s.CompleteBatch(ctx, comp) {
		require.NoError(t, err, i)
	}
	for i := range n {
		rec, err := s.Get(ctx, "k"+itoa(i))
		require.NoError(t, err)
		require.Equal(t, store.StateCompleted, rec.State, i)
		require.Equal(t, "r"+itoa(i), string(rec.Result), i)
	}
}

// TestForeignKeyBatch: CompleteBatch and ExtendBatch over a key that
// another program wrote as a hash fail it as the single calls do
// (WRONGTYPE, matching store.ErrUnavailable), and an absent key is a lost
// lease, as alone.
func TestForeignKeyBatch(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t)
	s := newStore(t, c, nil)
	ctx := t.Context()
	require.NoError(t, c.HSet(ctx, s.RedisKey("hash"), "s", "c").Err())
	require.NoError(t, c.Expire(ctx, s.RedisKey("hash"), time.Minute).Err())
	token := store.NewToken()
	errs := s.CompleteBatch(ctx, []store.CompleteRequest{{Key: "hash", Token: token, Result: []byte("x"), Retention: time.Minute}})
	require.ErrorIs(t, errs[0], store.ErrUnavailable)
	require.ErrorContains(t, errs[0], "WRONGTYPE")
	errs = s.ExtendBatch(ctx, []store.ExtendRequest{{Key: "hash", Token: token, Lease: time.Minute}})
	require.ErrorIs(t, errs[0], store.ErrUnavailable)
	require.ErrorContains(t, errs[0], "WRONGTYPE")
	errs = s.CompleteBatch(ctx, []store.CompleteRequest{
		{Key: "absent", Token: token, Result: []byte("x"), Retention: time.Minute},
		{Key: "absent2", Token: token, Result: []byte("x"), Retention: time.Minute},
	})
	require.ErrorIs(t, errs[0], store.ErrLeaseLost)
	require.ErrorIs(t, errs[1], store.ErrLeaseLost)
}
