package redisstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/redisstore"
)

// TestRecordSize compares, in the same run and under keys of one length,
// what Redis spends (MEMORY USAGE) on a completed record of this layout,
// on one of the same message in a first draft of it (times of 8 digits of
// base 64 and the long form, written by hand), on one of version 2 (written by hand, as
// that version packed it), and on a bare SET of a 4-byte value: for
// results of 0, 2, 11, 12 and 42 bytes, under a key of 28 bytes and one of
// 36 (whose bare SET costs 104 bytes). A record must cost no more than in
// either earlier layout, and one whose result is up to 12 bytes must stay
// an embstr (one allocation). Run with -v to see the numbers.
func TestRecordSize(t *testing.T) {
	c := redistest.Client(t)
	s, err := redisstore.New(t.Context(), c, nil) // the default prefix, as in production
	require.NoError(t, err)
	ctx := t.Context()
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms.
	id := hex.EncodeToString(b[:])
	results := []string{"", "{}", `{"ok":true}`, `{"ok":false}`, `{"id":"order-42","status":"shipped","n":1}`}
	for _, ns := range []string{"billing", "billing-eu-west"} {
		for _, result := range results {
			key := ns + ":" + id + fmt.Sprintf("%02d", len(result))
			v3 := s.RedisKey(key)
			// Keys of the same length as v3's, for the other values.
			v2 := strings.Replace(v3, ":v3:", ":v2:", 1)
			before := strings.Replace(v3, ":v3:", ":b3:", 1)
			bare := strings.Replace(v3, ":v3:", ":bb:", 1)
			t.Cleanup(func() { c.Del(context.Background(), v3, v2, before, bare) })

			created := time.Now().UnixMilli()
			claim, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
			require.NoError(t, err)
			require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: key, Token: claim.Token, Result: []byte(result), Retention: time.Hour}))
			last := time.Now().Add(time.Hour).UnixMilli()
			tok := string(claim.Token[:])
			require.NoError(t, c.Set(ctx, v2, "c"+tok+fmt.Sprintf("%013d1,0,0,", last)+result, time.Hour).Err())
			require.NoError(t, c.Set(ctx, before, "c"+tok+base64Time(last)+base64Time(created)+"3,1,0,0,"+result, time.Hour).Err())
			require.NoError(t, c.Set(ctx, bare, "done", time.Hour).Err())

			value, err := c.Get(ctx, v3).Result()
			require.NoError(t, err)
			usage := map[string]int64{}
			for name, k := range map[string]string{"v3": v3, "v2": v2, "before": before, "bare": bare} {
				usage[name], err = c.MemoryUsage(ctx, k).Result()
				require.NoError(t, err)
			}
			enc, err := c.ObjectEncoding(ctx, v3).Result()
			require.NoError(t, err)
			t.Logf("key of %d bytes, result of %2d: MEMORY USAGE %3d (value of %2d bytes, %s); first draft %3d, v2 %3d, bare SET %3d",
				len(v3), len(result), usage["v3"], len(value), enc, usage["before"], usage["v2"], usage["bare"])
			require.LessOrEqual(t, usage["v3"], usage["before"], "a record with a result of %d bytes costs more than in the first draft", len(result))
			require.LessOrEqual(t, usage["v3"], usage["v2"], "a record with a result of %d bytes costs more than in layout v2", len(result))
			if len(result) <= 12 {
				require.Equal(t, "embstr", enc, "a completed record with a result of %d bytes must stay an embstr", len(result))
			}
		}
	}
}

// base64Time is ms in the 8 digits of base 64 of the first draft of this
// layout's times, written out here apart from the package's own encoding.
func base64Time(ms int64) string {
	const digits = "0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmno"
	b := make([]byte, 8)
	for i := 7; i >= 0; i-- {
		b[i] = digits[ms%64]
		ms /= 64
	}
	return string(b)
}

// TestShortForm: a first attempt with no fingerprint is kept in the short
// form, 'q' while processing and 'C' once completed, with done in 3
// bytes, while done is within 2^23 ms either way of the creation; a
// completion further from it (a handler extended for hours, or a creating
// process's clock far off the server's) takes the long form. Every form
// reads back the same fields, and a fingerprint always takes the long form.
func TestShortForm(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t)
	s := newStore(t, c, nil)
	ctx := t.Context()
	for _, tc := range []struct {
		name    string
		created time.Duration // from now
		form    byte
	}{
		{"a handler of an hour", -time.Hour, 'C'},
		{"a creator an hour ahead", time.Hour, 'C'},
		{"just within", -(1<<23 - 1000) * time.Millisecond, 'C'},
		{"a handler of three hours", -3 * time.Hour, 'c'},
		{"a creator three hours ahead", 3 * time.Hour, 'c'},
	} {
		for _, batch := range []bool{false, true} {
			shortFormCase(t, c, s, tc.name, tc.created, tc.form, batch)
		}
	}

	// A fingerprint takes the long form from the claim on.
	claim, err := s.Acquire(ctx, store.AcquireRequest{Key: "short:fp", Lease: time.Minute, Fingerprint: "fp"})
	require.NoError(t, err)
	v, err := c.Get(ctx, s.RedisKey("short:fp")).Result()
	require.NoError(t, err)
	require.Equal(t, "p", v[:1])
	require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: "short:fp", Token: claim.Token, Retention: time.Hour}))
	v, err = c.Get(ctx, s.RedisKey("short:fp")).Result()
	require.NoError(t, err)
	require.Equal(t, "c", v[:1])
	rec, err := s.Get(ctx, "short:fp")
	require.NoError(t, err)
	require.Equal(t, "fp", rec.Fingerprint)

	// A new key without one takes the short form, 29 bytes.
	_, err = s.Acquire(ctx, store.AcquireRequest{Key: "short:new", Lease: time.Minute})
	require.NoError(t, err)
	v, err = c.Get(ctx, s.RedisKey("short:new")).Result()
	require.NoError(t, err)
	require.Equal(t, "q", v[:1])
	require.Len(t, v, 29)
}

// shortFormCase completes, alone or in a batch, a record in the short form
// created createdIn from now, and checks the form it completes in and the
// fields it reads back.
func shortFormCase(t *testing.T, c redis.UniversalClient, s *redisstore.Store, name string, createdIn time.Duration, form byte, batch bool) {
	t.Helper()
	ctx := t.Context()
	name = fmt.Sprintf("%s (batch %v)", name, batch)
	key := "short:" + name
	token := store.NewToken()
	complete := func(result string) error {
		req := store.CompleteRequest{Key: key, Token: token, Result: []byte(result), Retention: time.Hour}
		if batch {
			return s.CompleteBatch(ctx, []store.CompleteRequest{req})[0]
		}
		return s.Complete(ctx, req)
	}
	created := time.Now().Add(createdIn).UnixMilli()
	require.NoError(t, c.Set(ctx, s.RedisKey(key), "q"+string(token[:])+rawTime(time.Now().Add(time.Minute).UnixMilli())+rawTime(created), time.Minute).Err())
	rec, err := s.Get(ctx, key)
	require.NoError(t, err)
	require.Equal(t, store.Record{Key: key, State: store.StateProcessing, Attempt: 1, Token: token, CreatedAt: time.UnixMilli(created), LeaseUntil: rec.LeaseUntil}, rec, name)

	before, err := serverTime(c)
	require.NoError(t, err)
	require.NoError(t, complete("ok"), name)
	after, err := serverTime(c)
	require.NoError(t, err)
	v, err := c.Get(ctx, s.RedisKey(key)).Result()
	require.NoError(t, err)
	require.Equal(t, string(form), v[:1], "%s: the form of the completed record", name)
	rec, err = s.Get(ctx, key)
	require.NoError(t, err)
	require.Equal(t, store.StateCompleted, rec.State, name)
	require.Equal(t, 1, rec.Attempt, name)
	require.Equal(t, "ok", string(rec.Result), name)
	require.Equal(t, token, rec.Token, name)
	require.Equal(t, time.UnixMilli(created), rec.CreatedAt, name)
	require.False(t, rec.CompletedAt.Before(before.Truncate(time.Millisecond)), "%s: CompletedAt %v before the call %v", name, rec.CompletedAt, before)
	require.False(t, rec.CompletedAt.After(after), "%s: CompletedAt %v after the call %v", name, rec.CompletedAt, after)
	require.Empty(t, rec.Fingerprint, name)
	require.Empty(t, rec.LastError, name)
	require.NoError(t, complete("again"), "%s: completing again", name)
	rec, err = s.Get(ctx, key)
	require.NoError(t, err)
	require.Equal(t, "ok", string(rec.Result), "%s: completing again changed the result", name)
}
