package redisstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/redisstore"
)

// TestRecordSize compares, in the same run, what Redis spends on a
// completed record of this layout and on one of version 2 (written by
// hand, as that version packed it), under keys of one length: with no
// fingerprint and an empty result, a short one and one of 40 bytes. The
// record of this layout must cost no more than version 2's, and the one
// with an empty result must stay an embstr (one allocation). Run with -v
// to see the numbers.
func TestRecordSize(t *testing.T) {
	c := redistest.Client(t)
	s, err := redisstore.New(t.Context(), c, nil) // the default prefix, as in production
	require.NoError(t, err)
	ctx := t.Context()
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms.
	id := hex.EncodeToString(b[:])
	for _, result := range []string{"", `{"ok":true}`, `{"id":"order-42","status":"shipped","n":1}`} {
		key := "billing:" + id + fmt.Sprint(len(result))
		v2 := redisstore.DefaultPrefix + ":v2:" + key
		v3 := s.RedisKey(key)
		t.Cleanup(func() { c.Del(context.Background(), v2, v3) })

		claim, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
		require.NoError(t, err)
		require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: key, Token: claim.Token, Result: []byte(result), Retention: time.Hour}))
		last := time.Now().Add(time.Hour).UnixMilli()
		old := "c" + string(claim.Token[:]) + fmt.Sprintf("%013d1,0,0,", last) + result
		require.NoError(t, c.Set(ctx, v2, old, time.Hour).Err())

		value, err := c.Get(ctx, v3).Result()
		require.NoError(t, err)
		usage2, err := c.MemoryUsage(ctx, v2).Result()
		require.NoError(t, err)
		usage3, err := c.MemoryUsage(ctx, v3).Result()
		require.NoError(t, err)
		enc2, err := c.ObjectEncoding(ctx, v2).Result()
		require.NoError(t, err)
		enc3, err := c.ObjectEncoding(ctx, v3).Result()
		require.NoError(t, err)
		t.Logf("result of %2d bytes, keys of %d: v2 value %d bytes, %s, MEMORY USAGE %d; v3 value %d bytes, %s, MEMORY USAGE %d",
			len(result), len(v3), len(old), enc2, usage2, len(value), enc3, usage3)
		require.LessOrEqual(t, usage3, usage2, "a completed record of layout v3 with a result of %d bytes costs more than one of v2", len(result))
		if result == "" {
			require.Equal(t, "embstr", enc3, "a completed record with an empty result must stay an embstr")
		}
	}
}
