package redisstore_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/redisstore"
)

func TestNewRefusesBadOptions(t *testing.T) {
	t.Parallel()
	_, err := redisstore.New(t.Context(), nil, nil)
	require.ErrorIs(t, err, store.ErrInvalidConfig)

	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, o := range []redisstore.Options{{Timeout: -time.Second}, {AbandonedTTL: -time.Second}} {
		_, err := redisstore.New(t.Context(), c, &o)
		require.ErrorIs(t, err, store.ErrInvalidConfig, "%+v", o)
	}
}

// TestNewRedisDown: a Redis that refuses connections at start-up is a
// clear error naming its address, matching store.ErrUnavailable.
func TestNewRedisDown(t *testing.T) {
	t.Parallel()
	addr := "127.0.0.1:" + itoa(testenv.FreePort(t)) // nothing listens there
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	_, err := redisstore.New(t.Context(), c, &redisstore.Options{Timeout: 500 * time.Millisecond})
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.ErrorContains(t, err, addr)
	require.ErrorContains(t, err, "did not answer within 500ms")
}

// TestNewRedisSilent: a server that accepts connections and never answers
// (a hung Redis, a black-holing proxy) fails New with a timeout instead of
// hanging it, and a store whose Redis goes silent later fails each call the
// same way.
func TestNewRedisSilent(t *testing.T) {
	t.Parallel()
	addr := testenv.SilentServer(t)
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer c.Close()

	done := make(chan error, 1)
	go func() {
		_, err := redisstore.New(t.Context(), c, &redisstore.Options{Timeout: 300 * time.Millisecond})
		done <- err
	}()
	select {
	case err := <-done:
		require.ErrorIs(t, err, store.ErrUnavailable)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorContains(t, err, addr)
	case <-time.After(30 * time.Second):
		t.Fatal("New hangs on a Redis that does not answer")
	}
}

// TestExpiryFollowsState: the Redis expiry of a record is its lease plus
// the abandoned-claim grace while processing (from the server's clock
// during the call), and once settled the millisecond before its ExpiresAt,
// so that Redis, which keeps a key while its clock reads the key's expiry,
// drops it at ExpiresAt exactly (read with PEXPIRETIME: no tolerance).
func TestExpiryFollowsState(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t)
	const (
		lease     = 2 * time.Second
		abandoned = 5 * time.Second
		retention = 7 * time.Second
		failed    = 11 * time.Second
	)
	s := newStore(t, c, &redisstore.Options{AbandonedTTL: abandoned})
	ctx := t.Context()
	expiry := func(key string) time.Time { return expiryOf(t, c, s, key) }
	get := func(key string) store.Record {
		t.Helper()
		rec, err := s.Get(ctx, key)
		require.NoError(t, err)
		return rec
	}
	// during requires that the call sets the key's expiry to ttl after the
	// server's clock during it.
	during := func(key string, ttl time.Duration, call func()) {
		t.Helper()
		before, err := serverTime(c)
		require.NoError(t, err)
		call()
		after, err := serverTime(c)
		require.NoError(t, err)
		got := expiry(key)
		require.False(t, got.Before(before.Truncate(time.Millisecond).Add(ttl)) || got.After(after.Add(ttl)),
			"%s expires at %v, not %v after the server's clock during the call (%v to %v)", key, got, ttl, before, after)
	}

	var claim store.Claim
	during("done", lease+abandoned, func() {
		var err error
		claim, err = s.Acquire(ctx, store.AcquireRequest{Key: "done", Lease: lease})
		require.NoError(t, err)
	})
	during("done", 3*lease+abandoned, func() {
		require.NoError(t, s.Extend(ctx, store.ExtendRequest{Key: "done", Token: claim.Token, Lease: 3 * lease}))
	})
	require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: "done", Token: claim.Token, Result: []byte("ok"), Retention: retention}))
	require.Equal(t, get("done").ExpiresAt.Add(-time.Millisecond), expiry("done"), "completed")

	claim, err := s.Acquire(ctx, store.AcquireRequest{Key: "failed", Lease: lease})
	require.NoError(t, err)
	require.NoError(t, s.Release(ctx, store.ReleaseRequest{Key: "failed", Token: claim.Token, Error: "boom", Retention: failed}))
	require.Equal(t, get("failed").ExpiresAt.Add(-time.Millisecond), expiry("failed"), "failed")
	during("failed", lease+abandoned, func() {
		claim, err = s.Acquire(ctx, store.AcquireRequest{Key: "failed", Lease: lease})
		require.NoError(t, err)
		require.True(t, claim.Acquired)
	})
}

// rawRecord packs a record in the long form as the store does (see
// record.go), so that a test can write one by hand: this pins the layout,
// which records written by other versions of the package share. done is
// empty for a processing record.
func rawRecord(state byte, token store.Token, at, created int64, done string, attempt int, fp, lastErr, result string) string {
	return string(state) + string(token[:]) + rawTime(at) + rawTime(created) +
		fmt.Sprintf("%s,%d,%d,%d,", done, attempt, len(fp), len(lastErr)) + fp + lastErr + result
}

// rawTime is ms in the 6 bytes, big-endian, of a record's times, written
// out here apart from the package's own encoding.
func rawTime(ms int64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(ms))
	return string(b[2:])
}

// TestOldLayoutNeverMet: a record of the earlier layout (a hash under the
// prefix and the key) and a record of this one never share a Redis key, so
// neither version ever meets the other's type: a rolling upgrade gets no
// WRONGTYPE. The new store claims the key afresh beside the old record,
// leaves the old record alone, and its Get and Scan do not see it.
func TestOldLayoutNeverMet(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t)
	s := newStore(t, c, nil)
	ctx := t.Context()
	old := s.Prefix() + "pay:1"
	fields := map[string]string{"s": "c", "t": "0123456789abcdef", "a": "1", "r": "old result", "x": "99999999999999"}
	require.NoError(t, c.HSet(ctx, old, fields).Err())
	require.NoError(t, c.Expire(ctx, old, time.Minute).Err())

	_, err := s.Get(ctx, "pay:1")
	require.ErrorIs(t, err, store.ErrNotFound)
	for rec, err := range s.Scan(ctx, "") {
		require.NoError(t, err)
		t.Errorf("Scan yields %+v", rec)
	}
	claim, err := s.Acquire(ctx, store.AcquireRequest{Key: "pay:1", Lease: time.Minute})
	require.NoError(t, err)
	require.True(t, claim.Acquired)
	require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: "pay:1", Token: claim.Token, Result: []byte("new"), Retention: time.Minute}))
	require.NotEqual(t, old, s.RedisKey("pay:1"))
	got, err := c.HGetAll(ctx, old).Result()
	require.NoError(t, err)
	require.Equal(t, fields, got, "the old record was touched")

	// Nor can a receiver's key (a namespace, then ':') name a Redis key
	// that the old layout used for another receiver's key.
	require.True(t, strings.HasPrefix(strings.TrimPrefix(s.RedisKey("pay:1"), s.Prefix()), ":"))
}

// TestVersion2NeverMet: a record of layout version 2, under ":v2:", is
// never read by this version, whose records are under ":v3:": a rolling
// upgrade's old and new processes keep apart records, and a key completed
// by an old process is claimed afresh by a new one.
func TestVersion2NeverMet(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t)
	s := newStore(t, c, nil)
	ctx := t.Context()
	token := store.NewToken()
	old := s.Prefix() + ":v2:pay:1"
	v2 := "c" + string(token[:]) + fmt.Sprintf("%013d1,0,0,", time.Now().Add(time.Minute).UnixMilli()) + "old result"
	require.NoError(t, c.Set(ctx, old, v2, time.Minute).Err())

	_, err := s.Get(ctx, "pay:1")
	require.ErrorIs(t, err, store.ErrNotFound)
	for rec, err := range s.Scan(ctx, "") {
		require.NoError(t, err)
		t.Errorf("Scan yields %+v", rec)
	}
	claim, err := s.Acquire(ctx, store.AcquireRequest{Key: "pay:1", Lease: time.Minute})
	require.NoError(t, err)
	require.True(t, claim.Acquired, "a key completed under layout v2 is claimed afresh")
	require.Equal(t, 1, claim.Record.Attempt)
	require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: "pay:1", Token: claim.Token, Result: []byte("new"), Retention: time.Minute}))
	got, err := c.Get(ctx, old).Result()
	require.NoError(t, err)
	require.Equal(t, v2, got, "the v2 record was touched")
}

// TestLeaseEndsToTheMillisecond: a lease has ended when the clock of the
// process that acquires reads its deadline exactly. Each round writes a
// processing record whose deadline is this process's current millisecond
// and acquires it at once; the claim's LeaseUntil minus its lease is the
// clock the decision read, so the rounds that ran in that very millisecond
// are known and checked, and the test requires that some did.
func TestLeaseEndsToTheMillisecond(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t)
	s := newStore(t, c, nil)
	ctx := t.Context()
	const lease = time.Minute
	exact := 0
	deadline := time.Now().Add(10 * time.Second)
	for round := 0; exact < 5; round++ {
		require.True(t, time.Now().Before(deadline), "only %d of %d rounds ran within the deadline's millisecond", exact, round)
		key := "p-" + strconv.Itoa(round)
		at := time.Now().UnixMilli()
		require.NoError(t, c.Set(ctx, s.RedisKey(key), rawRecord('p', store.NewToken(), at, at-5000, "", 3, "", "old", ""), time.Minute).Err())

		claim, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: lease})
		require.NoError(t, err)
		require.True(t, claim.Acquired, "the record was held at or after its deadline")
		require.Equal(t, 4, claim.Record.Attempt, "a lease ended at its deadline is taken over as the next attempt")
		require.Equal(t, "old", claim.Record.LastError)
		require.Equal(t, time.UnixMilli(at-5000), claim.Record.CreatedAt, "a takeover keeps the creation time")
		if claim.Record.LeaseUntil.Add(-lease).UnixMilli() == at {
			exact++
		}
	}
}

// TestLeaseHeldToTheLastMillisecond: a record whose deadline is the next
// millisecond is held, answered by SET NX GET without a script, and the
// record SET NX GET answers is the one stored, unchanged.
func TestLeaseHeldToTheLastMillisecond(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t)
	s := newStore(t, c, nil)
	ctx := t.Context()
	exact := 0
	deadline := time.Now().Add(10 * time.Second)
	for round := 0; exact < 5; round++ {
		require.True(t, time.Now().Before(deadline), "only %d of %d rounds ran before the deadline's millisecond", exact, round)
		key := "h-" + strconv.Itoa(round)
		at := time.Now().UnixMilli() + 1
		raw := rawRecord('p', store.NewToken(), at, at-5000, "", 2, "fp", "old", "")
		require.NoError(t, c.Set(ctx, s.RedisKey(key), raw, time.Minute).Err())
		claim, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute, Fingerprint: "fp"})
		after := time.Now().UnixMilli()
		require.NoError(t, err)
		if after >= at {
			continue // the decision may have run at the deadline
		}
		exact++
		require.False(t, claim.Acquired, "a lease was taken over before its deadline")
		require.Equal(t, store.Record{Key: key, State: store.StateProcessing, Attempt: 2, Fingerprint: "fp", LastError: "old", LeaseUntil: time.UnixMilli(at), CreatedAt: time.UnixMilli(at - 5000)}, claim.Record,
			"the holder's record, but for its token")
		v, err := c.Get(ctx, s.RedisKey(key)).Result()
		require.NoError(t, err)
		require.Equal(t, raw, v)
	}
}

// TestCompleteAgain: completing again with the token that completed the
// record succeeds and changes nothing, alone and in a batch; any other
// settlement with that token is refused.
func TestCompleteAgain(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t)
	s := newStore(t, c, nil)
	ctx := t.Context()
	claim, err := s.Acquire(ctx, store.AcquireRequest{Key: "k", Lease: time.Minute})
	require.NoError(t, err)
	done := store.CompleteRequest{Key: "k", Token: claim.Token, Result: []byte("first"), Retention: time.Minute}
	require.NoError(t, s.Complete(ctx, done))
	before, err := s.Get(ctx, "k")
	require.NoError(t, err)

	again := store.CompleteRequest{Key: "k", Token: claim.Token, Result: []byte("second"), Retention: time.Hour}
	require.NoError(t, s.Complete(ctx, again))
	require.Equal(t, []error{nil}, s.CompleteBatch(ctx, []store.CompleteRequest{again}))
	after, err := s.Get(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, before, after)

	require.ErrorIs(t, s.Release(ctx, store.ReleaseRequest{Key: "k", Token: claim.Token, Error: "x", Retention: time.Minute}), store.ErrLeaseLost)
	require.ErrorIs(t, s.Extend(ctx, store.ExtendRequest{Key: "k", Token: claim.Token, Lease: time.Minute}), store.ErrLeaseLost)
	other := again
	other.Token = store.NewToken()
	require.ErrorIs(t, s.Complete(ctx, other), store.ErrLeaseLost)
}

// TestAbandonedClaimKeepsAttempts: a claim whose worker died is taken over
// as the next attempt, so a message that kills its worker every time runs
// out of attempts.
func TestAbandonedClaimKeepsAttempts(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t)
	s := newStore(t, c, nil)
	ctx := t.Context()
	for want := 1; want <= 3; want++ {
		claim, err := s.Acquire(ctx, store.AcquireRequest{Key: "crashy", Lease: 30 * time.Millisecond})
		require.NoError(t, err)
		require.True(t, claim.Acquired)
		require.Equal(t, want, claim.Record.Attempt)
		// The worker "crashes": its lease runs out, on this process's
		// clock, which leases are measured by.
		time.Sleep(time.Until(claim.Record.LeaseUntil))
	}
	// The key outlived every lease: it lives AbandonedTTL past the last.
	ttl, err := c.PTTL(ctx, s.RedisKey("crashy")).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, redisstore.DefaultAbandonedTTL-time.Minute)
}

// scriptsReloaded: a server that lost its scripts (a restart, SCRIPT
// FLUSH) gets them again, for single calls and for every kind of batch.
// flush empties the script cache of every server of s.
func scriptsReloaded(t *testing.T, s *redisstore.Store, flush func()) {
	ctx := t.Context()
	req := func(key string) store.AcquireRequest {
		return store.AcquireRequest{Key: key, Lease: time.Minute}
	}

	flush()
	claim, err := s.Acquire(ctx, req("single"))
	require.NoError(t, err)
	require.True(t, claim.Acquired)
	flush()
	require.NoError(t, s.Extend(ctx, store.ExtendRequest{Key: "single", Token: claim.Token, Lease: time.Minute}))
	flush()
	require.NoError(t, s.Release(ctx, store.ReleaseRequest{Key: "single", Token: claim.Token, Error: "boom", Retention: time.Minute}))
	flush()
	claim, err = s.Acquire(ctx, req("single")) // the takeover script
	require.NoError(t, err)
	require.True(t, claim.Acquired)
	require.Equal(t, 2, claim.Record.Attempt)
	flush()
	require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: "single", Token: claim.Token, Result: []byte("S"), Retention: time.Minute}))
	rec, err := s.Get(ctx, "single")
	require.NoError(t, err)
	require.Equal(t, "S", string(rec.Result))

	flush()
	out := s.AcquireBatch(ctx, []store.AcquireRequest{req("a"), req("b"), req("c")})
	for _, o := range out {
		require.NoError(t, o.Err)
		require.True(t, o.Claim.Acquired)
	}
	flush()
	errs := s.ExtendBatch(ctx, []store.ExtendRequest{
		{Key: "a", Token: out[0].Claim.Token, Lease: 2 * time.Minute},
		{Key: "b", Token: out[1].Claim.Token, Lease: 2 * time.Minute},
		{Key: "c", Token: out[2].Claim.Token, Lease: 2 * time.Minute},
	})
	require.Equal(t, []error{nil, nil, nil}, errs)
	flush()
	errs = s.CompleteBatch(ctx, []store.CompleteRequest{
		{Key: "a", Token: out[0].Claim.Token, Result: []byte("A"), Retention: time.Minute},
		{Key: "b", Token: out[1].Claim.Token, Result: []byte("B"), Retention: time.Minute},
		{Key: "c", Token: out[2].Claim.Token, Result: []byte("C"), Retention: time.Minute},
	})
	require.Equal(t, []error{nil, nil, nil}, errs)
	rec, err = s.Get(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, "B", string(rec.Result))

	// A batch's takeovers run the script too.
	for _, key := range []string{"d", "e"} {
		c, err := s.Acquire(ctx, req(key))
		require.NoError(t, err)
		require.NoError(t, s.Release(ctx, store.ReleaseRequest{Key: key, Token: c.Token, Error: "boom", Retention: time.Minute}))
	}
	flush()
	out = s.AcquireBatch(ctx, []store.AcquireRequest{req("d"), req("e")})
	for _, o := range out {
		require.NoError(t, o.Err)
		require.True(t, o.Claim.Acquired)
		require.Equal(t, 2, o.Claim.Record.Attempt)
	}
}

func TestScriptsReloaded(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	scriptsReloaded(t, newStore(t, c, nil), func() {
		require.NoError(t, c.ScriptFlush(t.Context()).Err())
	})
}

// TestForeignKey: a key under the store's prefix that another program
// wrote (a string that is no record, a hash) is an error matching
// store.ErrUnavailable, not a panic or a silent overwrite; Scan skips it.
func TestForeignKey(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t)
	s := newStore(t, c, nil)
	ctx := t.Context()
	require.NoError(t, c.Set(ctx, s.RedisKey("string"), "not a record", time.Minute).Err())
	require.NoError(t, c.HSet(ctx, s.RedisKey("hash"), "s", "c").Err())
	require.NoError(t, c.Expire(ctx, s.RedisKey("hash"), time.Minute).Err())
	for key, why := range map[string]string{"string": "not a record", "hash": "WRONGTYPE"} {
		_, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Second})
		require.ErrorIs(t, err, store.ErrUnavailable, key)
		require.ErrorContains(t, err, why)
		_, err = s.Get(ctx, key)
		require.ErrorIs(t, err, store.ErrUnavailable, key)
		require.ErrorContains(t, err, why)
		for _, o := range s.AcquireBatch(ctx, []store.AcquireRequest{{Key: key, Lease: time.Second}}) {
			require.ErrorIs(t, o.Err, store.ErrUnavailable, key)
		}
	}
	for rec, err := range s.Scan(ctx, "") {
		require.NoError(t, err)
		t.Errorf("Scan yields %+v", rec)
	}
	val, err := c.Get(ctx, s.RedisKey("string")).Result()
	require.NoError(t, err)
	require.Equal(t, "not a record", val)
}

// TestScanEscapesPattern: a scanned prefix holding glob characters matches
// itself only.
func TestScanEscapesPattern(t *testing.T) {
	t.Parallel()
	s := newStore(t, redistest.Client(t), nil)
	ctx := t.Context()
	for _, key := range []string{"a*:1", "ab:1", "a?:1", "a[b]:1"} {
		c, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
		require.NoError(t, err)
		require.True(t, c.Acquired)
	}
	for _, prefix := range []string{"a*", "a?", "a[b]"} {
		var keys []string
		for rec, err := range s.Scan(ctx, prefix) {
			require.NoError(t, err)
			keys = append(keys, rec.Key)
		}
		require.Equal(t, []string{prefix + ":1"}, keys, "Scan(%q)", prefix)
	}
}

// TestScanStops: breaking out of a Scan ends it, across pages of SCAN.
func TestScanStops(t *testing.T) {
	t.Parallel()
	s := newStore(t, redistest.Client(t), nil)
	ctx := t.Context()
	reqs := make([]store.AcquireRequest, 1200) // more than one SCAN page
	for i := range reqs {
		reqs[i] = store.AcquireRequest{Key: "k" + strconv.Itoa(i), Lease: time.Minute}
	}
	for _, o := range s.AcquireBatch(ctx, reqs) {
		require.NoError(t, o.Err)
	}
	seen := 0
	for _, err := range s.Scan(ctx, "") {
		require.NoError(t, err)
		if seen++; seen == 3 {
			break
		}
	}
	require.Equal(t, 3, seen)
	all := 0
	for _, err := range s.Scan(ctx, "") {
		require.NoError(t, err)
		all++
	}
	require.Equal(t, len(reqs), all)
}

// TestCancelledContext: a cancelled context is the context's error for
// every call, batches included, and sends nothing.
func TestCancelledContext(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t)
	s := newStore(t, c, nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	token := store.NewToken()

	_, err := s.Acquire(ctx, store.AcquireRequest{Key: "k", Lease: time.Minute})
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, store.ErrUnavailable)
	require.ErrorIs(t, s.Complete(ctx, store.CompleteRequest{Key: "k", Token: token, Retention: time.Minute}), context.Canceled)
	require.ErrorIs(t, s.Release(ctx, store.ReleaseRequest{Key: "k", Token: token, Retention: time.Minute}), context.Canceled)
	require.ErrorIs(t, s.Extend(ctx, store.ExtendRequest{Key: "k", Token: token, Lease: time.Minute}), context.Canceled)
	for _, o := range s.AcquireBatch(ctx, []store.AcquireRequest{{Key: "a", Lease: time.Minute}, {Key: "b", Lease: time.Minute}}) {
		require.ErrorIs(t, o.Err, context.Canceled)
	}
	for _, err := range s.CompleteBatch(ctx, []store.CompleteRequest{{Key: "a", Token: token, Retention: time.Minute}}) {
		require.ErrorIs(t, err, context.Canceled)
	}
	for _, err := range s.ExtendBatch(ctx, []store.ExtendRequest{{Key: "a", Token: token, Lease: time.Minute}}) {
		require.ErrorIs(t, err, context.Canceled)
	}
	_, err = s.Get(ctx, "k")
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, s.Delete(ctx, "k"), context.Canceled)
	n := 0
	for _, err := range s.Scan(ctx, "") {
		require.ErrorIs(t, err, context.Canceled)
		n++
	}
	require.Equal(t, 1, n, "the error is yielded once")

	n64, err := c.Exists(t.Context(), s.RedisKey("k"), s.RedisKey("a"), s.RedisKey("b")).Result()
	require.NoError(t, err)
	require.Zero(t, n64, "a cancelled call wrote to Redis")
}

// TestStoreDownCallsFail: every operation on a store whose Redis stopped
// fails with a *store.OpError matching store.ErrUnavailable within the
// timeout.
func TestStoreDownCallsFail(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	s := newStore(t, c, &redisstore.Options{Timeout: 500 * time.Millisecond})
	ctx := t.Context()
	claim, err := s.Acquire(ctx, store.AcquireRequest{Key: "k", Lease: time.Minute})
	require.NoError(t, err)
	srv.Stop()

	requireDown := func(err error, op string) {
		t.Helper()
		require.ErrorIs(t, err, store.ErrUnavailable, op)
		var oerr *store.OpError
		require.ErrorAs(t, err, &oerr, op)
		require.Equal(t, op, oerr.Op)
	}
	_, err = s.Acquire(ctx, store.AcquireRequest{Key: "k2", Lease: time.Minute})
	requireDown(err, "acquire")
	requireDown(s.Complete(ctx, store.CompleteRequest{Key: "k", Token: claim.Token, Retention: time.Minute}), "complete")
	requireDown(s.Release(ctx, store.ReleaseRequest{Key: "k", Token: claim.Token, Retention: time.Minute}), "release")
	requireDown(s.Extend(ctx, store.ExtendRequest{Key: "k", Token: claim.Token, Lease: time.Minute}), "extend")
	for _, o := range s.AcquireBatch(ctx, []store.AcquireRequest{{Key: "x", Lease: time.Minute}, {Key: "y", Lease: time.Minute}}) {
		requireDown(o.Err, "acquire")
	}
	for _, err := range s.CompleteBatch(ctx, []store.CompleteRequest{{Key: "k", Token: claim.Token, Retention: time.Minute}}) {
		requireDown(err, "complete")
	}
	for _, err := range s.ExtendBatch(ctx, []store.ExtendRequest{{Key: "k", Token: claim.Token, Lease: time.Minute}}) {
		requireDown(err, "extend")
	}
	_, err = s.Get(ctx, "k")
	requireDown(err, "get")
	requireDown(s.Delete(ctx, "k"), "delete")
	n := 0
	for rec, err := range s.Scan(ctx, "") {
		require.Zero(t, rec)
		requireDown(err, "scan")
		n++
	}
	require.Equal(t, 1, n, "a failed scan yields its error once")
}

// batchRules checks the batches item by item against the contract's new
// rules: ExtendBatch sets each lease to now plus its own (earlier than it
// was, here) and refuses a stale, zero or missing claim at its own index;
// a fingerprint mismatch with a failed record is ErrKeyReused in
// AcquireBatch, before the same key's retry; completing twice in one
// CompleteBatch with the same token succeeds and keeps the first result and
// the LastError of the failure before it; a fingerprint that a batch's own
// takeover stored is checked by the later requests for the key.
func batchRules(t *testing.T, s *redisstore.Store) {
	ctx := t.Context()
	long := func(key, fp string) store.AcquireRequest {
		return store.AcquireRequest{Key: key, Lease: time.Hour, Fingerprint: fp}
	}
	out := s.AcquireBatch(ctx, []store.AcquireRequest{long("a", ""), long("b", ""), long("c", "fp1")})
	for _, o := range out {
		require.NoError(t, o.Err)
		require.True(t, o.Claim.Acquired)
	}
	a, b, c := out[0].Claim, out[1].Claim, out[2].Claim
	require.NoError(t, s.Release(ctx, store.ReleaseRequest{Key: "c", Token: c.Token, Error: "boom", Retention: time.Hour}))

	errs := s.ExtendBatch(ctx, []store.ExtendRequest{
		{Key: "a", Token: a.Token, Lease: time.Minute},
		{Key: "b", Token: a.Token, Lease: time.Minute},
		{Key: "", Token: a.Token, Lease: time.Minute},
		{Key: "a", Lease: time.Minute},
		{Key: "absent", Token: a.Token, Lease: time.Minute},
		{Key: "b", Token: b.Token, Lease: 0},
		{Key: "c", Token: c.Token, Lease: time.Minute},
	})
	require.Len(t, errs, 7)
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], store.ErrLeaseLost, "another claim's token")
	require.ErrorIs(t, errs[2], store.ErrInvalidKey)
	require.ErrorIs(t, errs[3], store.ErrLeaseLost, "a zero token")
	require.ErrorIs(t, errs[4], store.ErrLeaseLost, "an absent key")
	require.ErrorIs(t, errs[5], store.ErrInvalidConfig)
	require.ErrorIs(t, errs[6], store.ErrLeaseLost, "a released claim")
	rec, err := s.Get(ctx, "a")
	require.NoError(t, err)
	require.True(t, rec.LeaseUntil.Before(a.Record.LeaseUntil), "ExtendBatch did not shorten the lease: %v, was %v", rec.LeaseUntil, a.Record.LeaseUntil)
	require.False(t, rec.LeaseUntil.Before(a.Record.LeaseUntil.Add(-time.Hour+time.Minute)), "the lease is now + lease, not less")
	rec, err = s.Get(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, b.Record.LeaseUntil, rec.LeaseUntil, "a refused item changed the lease")

	out = s.AcquireBatch(ctx, []store.AcquireRequest{long("c", "fp2"), long("c", "fp1"), long("c", "")})
	require.ErrorIs(t, out[0].Err, store.ErrKeyReused, "another fingerprint over a failed record")
	require.NoError(t, out[1].Err)
	require.True(t, out[1].Claim.Acquired, "the failed record is retried")
	require.Equal(t, 2, out[1].Claim.Record.Attempt)
	require.NoError(t, out[2].Err)
	require.False(t, out[2].Claim.Acquired, "the key is claimed by its first successful request only")
	c = out[1].Claim

	errs = s.CompleteBatch(ctx, []store.CompleteRequest{
		{Key: "c", Token: c.Token, Result: []byte("first"), Retention: time.Hour},
		{Key: "c", Token: c.Token, Result: []byte("second"), Retention: time.Minute},
	})
	require.Equal(t, []error{nil, nil}, errs)
	rec, err = s.Get(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, store.StateCompleted, rec.State)
	require.Equal(t, "first", string(rec.Result))
	require.Equal(t, "boom", rec.LastError)
	require.Equal(t, 2, rec.Attempt)
	require.Equal(t, "fp1", rec.Fingerprint)

	// Over a failed record without a fingerprint, both requests pass the
	// pipeline's check; the first claims the key and keeps its
	// fingerprint, so the takeover script finds the second's mismatch.
	d, err := s.Acquire(ctx, long("d", ""))
	require.NoError(t, err)
	require.NoError(t, s.Release(ctx, store.ReleaseRequest{Key: "d", Token: d.Token, Error: "boom", Retention: time.Hour}))
	out = s.AcquireBatch(ctx, []store.AcquireRequest{long("d", "fpA"), long("d", "fpB")})
	require.NoError(t, out[0].Err)
	require.True(t, out[0].Claim.Acquired)
	require.Equal(t, "fpA", out[0].Claim.Record.Fingerprint)
	require.ErrorIs(t, out[1].Err, store.ErrKeyReused, "a processing record of another fingerprint")
}

func TestBatchRules(t *testing.T) {
	t.Parallel()
	batchRules(t, newStore(t, redistest.Client(t), nil))
}

// TestCallTimeoutBoundsAHungRedis: the store bounds its own calls by
// Options.Timeout (its CallTimeout, which lets the receiver spend no timer
// of its own on completions): a Redis that stops answering, without
// closing its connections, fails a completion and a release given a
// context without any deadline with store.ErrUnavailable, rather than
// leaving them waiting.
func TestCallTimeoutBoundsAHungRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	// No timeout of the client's own: only the store's deadline can end a
	// read that waits.
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, ReadTimeout: -1, WriteTimeout: -1})
	defer c.Close()
	s := newStore(t, c, &redisstore.Options{Timeout: 300 * time.Millisecond})
	require.Equal(t, 300*time.Millisecond, s.CallTimeout())
	claim, err := s.Acquire(t.Context(), store.AcquireRequest{Key: "k", Lease: time.Minute})
	require.NoError(t, err)

	srv.Pause()
	defer srv.Resume() // so that the server can be stopped at cleanup
	done := make(chan error, 2)
	go func() {
		done <- s.Complete(context.Background(), store.CompleteRequest{Key: "k", Token: claim.Token, Retention: time.Minute})
		done <- s.Release(context.Background(), store.ReleaseRequest{Key: "k", Token: claim.Token, Retention: time.Minute})
	}()
	require.ErrorIs(t, testenv.Recv(t, done, "Complete on a hung Redis to fail"), store.ErrUnavailable)
	require.ErrorIs(t, testenv.Recv(t, done, "Release on a hung Redis to fail"), store.ErrUnavailable)
}
