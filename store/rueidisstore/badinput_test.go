package rueidisstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/rueidisstore"
)

// TestBadOptions: New refuses a nil client and negative durations with
// store.ErrInvalidConfig.
func TestBadOptions(t *testing.T) {
	c, _ := shared(t)
	_, err := rueidisstore.New(t.Context(), nil, nil)
	require.ErrorIs(t, err, store.ErrInvalidConfig)
	_, err = rueidisstore.New(t.Context(), c, &rueidisstore.Options{Timeout: -time.Second})
	require.ErrorIs(t, err, store.ErrInvalidConfig)
	_, err = rueidisstore.New(t.Context(), c, &rueidisstore.Options{AbandonedTTL: -time.Second})
	require.ErrorIs(t, err, store.ErrInvalidConfig)
}

// TestBadRequests: a request the contract rules out fails with its
// contract error, before any round trip, in single calls and batches
// alike (a batch's bad request fails alone).
func TestBadRequests(t *testing.T) {
	c, gc := shared(t)
	s := newStore(t, c, gc, nil)
	ctx := t.Context()
	tok := store.NewToken()

	_, err := s.Acquire(ctx, store.AcquireRequest{Lease: time.Minute})
	require.ErrorIs(t, err, store.ErrInvalidKey)
	_, err = s.Acquire(ctx, store.AcquireRequest{Key: "k:1"})
	require.ErrorIs(t, err, store.ErrInvalidConfig)
	_, err = s.Acquire(ctx, store.AcquireRequest{Key: "k:1", Lease: -time.Second})
	require.ErrorIs(t, err, store.ErrInvalidConfig)

	require.ErrorIs(t, s.Complete(ctx, store.CompleteRequest{Token: tok, Retention: time.Hour}), store.ErrInvalidKey)
	require.ErrorIs(t, s.Complete(ctx, store.CompleteRequest{Key: "k:1", Token: tok}), store.ErrInvalidConfig)
	require.ErrorIs(t, s.Complete(ctx, store.CompleteRequest{Key: "k:1", Retention: time.Hour}), store.ErrLeaseLost)
	require.ErrorIs(t, s.Release(ctx, store.ReleaseRequest{Key: "k:1", Token: tok}), store.ErrInvalidConfig)
	require.ErrorIs(t, s.Release(ctx, store.ReleaseRequest{Key: "k:1", Retention: time.Hour}), store.ErrLeaseLost)
	require.ErrorIs(t, s.Extend(ctx, store.ExtendRequest{Key: "k:1", Token: tok}), store.ErrInvalidConfig)
	require.ErrorIs(t, s.Extend(ctx, store.ExtendRequest{Key: "k:1", Lease: time.Minute}), store.ErrLeaseLost)
	require.ErrorIs(t, s.Extend(ctx, store.ExtendRequest{Token: tok, Lease: time.Minute}), store.ErrInvalidKey)

	_, err = s.Get(ctx, "")
	require.ErrorIs(t, err, store.ErrInvalidKey)
	require.ErrorIs(t, s.Delete(ctx, ""), store.ErrInvalidKey)
	_, _, err = s.DeleteIf(ctx, store.DeleteRequest{})
	require.ErrorIs(t, err, store.ErrInvalidKey)

	out := s.AcquireBatch(ctx, []store.AcquireRequest{{Key: "", Lease: time.Minute}, {Key: "k:2", Lease: time.Minute}, {Key: "k:3"}})
	require.ErrorIs(t, out[0].Err, store.ErrInvalidKey)
	require.NoError(t, out[1].Err)
	require.True(t, out[1].Claim.Acquired)
	require.ErrorIs(t, out[2].Err, store.ErrInvalidConfig)
	errs := s.CompleteBatch(ctx, []store.CompleteRequest{{Key: "k:2", Retention: time.Hour}, {Key: "k:2", Token: out[1].Claim.Token, Retention: time.Hour}})
	require.ErrorIs(t, errs[0], store.ErrLeaseLost)
	require.NoError(t, errs[1])
	require.Empty(t, s.AcquireBatch(ctx, nil))
	require.Empty(t, s.CompleteBatch(ctx, nil))
	require.Empty(t, s.ExtendBatch(ctx, nil))
}

// TestForeignValues: what another program left under the store's keys (a
// string that is no record, a record cut short, a hash) is never read as
// a record and never panics the store: an Acquire or a Get fails as
// unavailable, a token cannot complete it, and Scan skips it.
func TestForeignValues(t *testing.T) {
	c, gc := shared(t)
	s := newStore(t, c, gc, nil)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	strs := map[string]string{
		"x:short":     "hello",
		"x:header":    "p" + strings.Repeat("\x00", 28) + ",1,9,0,", // a long form whose fingerprint runs off the end
		"x:state":     "z" + strings.Repeat("\x00", 28),
		"x:bigq":      "q" + strings.Repeat("\x00", 40),
		"x:truncated": "C" + strings.Repeat("\x00", 29),
	}
	for k, v := range strs {
		require.NoError(t, gc.Set(ctx, s.RedisKey(k), v, time.Hour).Err())
	}
	require.NoError(t, gc.HSet(ctx, s.RedisKey("x:hash"), "f", "v").Err())
	require.NoError(t, gc.Expire(ctx, s.RedisKey("x:hash"), time.Hour).Err())

	for k := range strs {
		_, err := s.Acquire(ctx, store.AcquireRequest{Key: k, Lease: time.Minute})
		require.ErrorIs(t, err, store.ErrUnavailable, k)
		_, err = s.Get(ctx, k)
		require.ErrorIs(t, err, store.ErrUnavailable, k)
		require.ErrorIs(t, s.Complete(ctx, store.CompleteRequest{Key: k, Token: store.NewToken(), Retention: time.Hour}), store.ErrLeaseLost, k)
		require.ErrorIs(t, s.Extend(ctx, store.ExtendRequest{Key: k, Token: store.NewToken(), Lease: time.Minute}), store.ErrLeaseLost, k)
	}
	_, err := s.Acquire(ctx, store.AcquireRequest{Key: "x:hash", Lease: time.Minute})
	require.ErrorIs(t, err, store.ErrUnavailable, "a hash: WRONGTYPE")
	_, err = s.Get(ctx, "x:hash")
	require.ErrorIs(t, err, store.ErrUnavailable)
	err = s.Complete(ctx, store.CompleteRequest{Key: "x:hash", Token: store.NewToken(), Retention: time.Hour})
	require.ErrorIs(t, err, store.ErrUnavailable, "a script's GET on a hash fails")

	// A key with pattern characters scans as itself, beside the foreign
	// values, which are skipped.
	odd := "x:*?[odd]\\"
	claim, err := s.Acquire(ctx, store.AcquireRequest{Key: odd, Lease: time.Minute})
	require.NoError(t, err)
	require.True(t, claim.Acquired)
	var seen []string
	for rec, err := range s.Scan(ctx, "x:") {
		require.NoError(t, err)
		seen = append(seen, rec.Key)
	}
	require.Equal(t, []string{odd}, seen)
	seen = nil
	for rec, err := range s.Scan(ctx, "x:*") {
		require.NoError(t, err)
		seen = append(seen, rec.Key)
	}
	require.Equal(t, []string{odd}, seen, "the prefix's * is a character, not a pattern")
}
