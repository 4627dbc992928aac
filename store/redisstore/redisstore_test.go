package redisstore_test

import (
	"context"
	"net"
	"strconv"
	"sync"
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
	addr := silentServer(t)
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

// silentServer listens on a free port and accepts connections without ever
// answering; it closes them when t ends.
func silentServer(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		_ = l.Close()
		testenv.Wait(t, &wg, "the deliveries to return")
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return l.Addr().String()
}

// TestTTLFollowsState: the Redis TTL of a record is its lease plus the

// TestExpiryFollowsState: the Redis expiry of a record is its lease
// deadline plus the abandoned-claim grace while processing, and exactly its
// ExpiresAt once settled (read with PEXPIRETIME, so no tolerance).
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
	expiry := func(key string) time.Time {
		t.Helper()
		ms, err := c.Do(ctx, "PEXPIRETIME", s.Prefix()+key).Int64()
		require.NoError(t, err)
		require.Positive(t, ms, "%s has no expiry", key)
		return time.UnixMilli(ms)
	}
	get := func(key string) store.Record {
		t.Helper()
		rec, err := s.Get(ctx, key)
		require.NoError(t, err)
		return rec
	}

	claim, err := s.Acquire(ctx, store.AcquireRequest{Key: "done", Lease: lease})
	require.NoError(t, err)
	require.Equal(t, claim.Record.LeaseUntil.Add(abandoned), expiry("done"), "processing")
	require.NoError(t, s.Extend(ctx, store.ExtendRequest{Key: "done", Token: claim.Token, Lease: 3 * lease}))
	require.Equal(t, get("done").LeaseUntil.Add(abandoned), expiry("done"), "extended")
	require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: "done", Token: claim.Token, Result: []byte("ok"), Retention: retention}))
	require.Equal(t, get("done").ExpiresAt, expiry("done"), "completed")

	claim, err = s.Acquire(ctx, store.AcquireRequest{Key: "failed", Lease: lease})
	require.NoError(t, err)
	require.NoError(t, s.Release(ctx, store.ReleaseRequest{Key: "failed", Token: claim.Token, Error: "boom", Retention: failed}))
	require.Equal(t, get("failed").ExpiresAt, expiry("failed"), "failed")
}

// TestExpiredRecordIsAbsent: between a record's ExpiresAt and the moment
// Redis drops its key (Redis keeps a key while its clock reads the expiry
// itself), the record is absent to every operation. The hash is written
// by hand, with an expiry that has come and a Redis TTL still far away, so
// that the window is as wide as the test needs.
func TestExpiredRecordIsAbsent(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t)
	s := newStore(t, c, nil)
	ctx := t.Context()
	token := store.NewToken()
	write := func(key, state string) {
		t.Helper()
		now, err := c.Time(ctx).Result()
		require.NoError(t, err)
		rk := s.Prefix() + key
		require.NoError(t, c.HSet(ctx, rk, "s", state, "t", string(token[:]), "a", 3, "f", "fp-old",
			"r", "old result", "e", "old error", "x", strconv.FormatInt(now.UnixMilli(), 10)).Err())
		require.NoError(t, c.Expire(ctx, rk, time.Minute).Err())
	}

	for _, state := range []string{"c", "f"} {
		key := "expired-" + state
		write(key, state)
		_, err := s.Get(ctx, key)
		require.ErrorIs(t, err, store.ErrNotFound, "Get of an expired %s record", state)
		for rec, err := range s.Scan(ctx, key) {
			require.NoError(t, err)
			t.Errorf("Scan yields the expired %s record %+v", state, rec)
		}
		require.ErrorIs(t, s.Complete(ctx, store.CompleteRequest{Key: key, Token: token, Retention: time.Minute}), store.ErrLeaseLost,
			"Complete with the token of an expired %s record", state)

		// A new fingerprint is no reuse of a forgotten record, and nothing
		// of it leaks into the new claim.
		claim, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute, Fingerprint: "fp-new"})
		require.NoError(t, err, "Acquire over an expired %s record", state)
		require.True(t, claim.Acquired)
		require.Equal(t, 1, claim.Record.Attempt)
		require.Equal(t, "fp-new", claim.Record.Fingerprint)
		require.Empty(t, claim.Record.LastError)
		fields, err := c.HGetAll(ctx, s.Prefix()+key).Result()
		require.NoError(t, err)
		require.NotContains(t, fields, "r", "the old result is left in the new record")
		require.NotContains(t, fields, "e", "the old error is left in the new record")
	}
}

// TestDeadlinesToTheMillisecond: a lease has ended, and a failed record is
// gone, when the server's clock reads their deadline exactly. Each round
// writes a record whose deadline is the server's current millisecond and
// acquires it at once; the claim's LeaseUntil minus its lease is the
// script's clock, so the rounds that ran in that very millisecond are known
// and checked, and the test requires that some did.
func TestDeadlinesToTheMillisecond(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t)
	s := newStore(t, c, nil)
	ctx := t.Context()
	const lease = time.Minute
	for _, state := range []string{"p", "f"} {
		exact := 0
		deadline := time.Now().Add(10 * time.Second)
		for round := 0; exact < 5; round++ {
			require.True(t, time.Now().Before(deadline), "state %s: only %d of %d rounds ran within the deadline's millisecond", state, exact, round)
			key := state + "-" + strconv.Itoa(round)
			now, err := c.Time(ctx).Result()
			require.NoError(t, err)
			at := strconv.FormatInt(now.UnixMilli(), 10)
			field := map[string]string{"p": "l", "f": "x"}[state]
			rk := s.Prefix() + key
			require.NoError(t, c.HSet(ctx, rk, "s", state, "a", 3, "e", "old", field, at).Err())
			require.NoError(t, c.Expire(ctx, rk, time.Minute).Err())

			claim, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: lease})
			require.NoError(t, err)
			require.True(t, claim.Acquired, "state %s: the record was held at or after its deadline", state)
			if claim.Record.LeaseUntil.Add(-lease).UnixMilli() != now.UnixMilli() {
				continue // the script ran in a later millisecond
			}
			exact++
			if state == "p" {
				require.Equal(t, 4, claim.Record.Attempt, "a lease ended at its deadline is taken over as the next attempt")
			} else {
				require.Equal(t, 1, claim.Record.Attempt, "a failed record at its expiry is gone: the claim is afresh")
				require.Empty(t, claim.Record.LastError)
			}
		}
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
		waitServerTime(t, c, claim.Record.LeaseUntil) // the worker "crashes": its lease runs out
	}
}

// waitServerTime waits until Redis's clock reads until or later.
func waitServerTime(t *testing.T, c redis.UniversalClient, until time.Time) {
	t.Helper()
	require.Eventually(t, func() bool {
		now, err := serverTime(c)
		return err == nil && !now.Before(until)
	}, 10*time.Second, time.Millisecond, "Redis's clock does not reach %v", until)
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
	_, err = s.Get(ctx, "single")
	require.NoError(t, err)

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
	rec, err := s.Get(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, "B", string(rec.Result))
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

// TestForeignKey: a key under the prefix that another program wrote is an
// error, not a panic or a silent overwrite.
func TestForeignKey(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t)
	s := newStore(t, c, nil)
	ctx := t.Context()
	require.NoError(t, c.Set(ctx, s.Prefix()+"foreign", "not a record", time.Minute).Err())
	_, err := s.Acquire(ctx, store.AcquireRequest{Key: "foreign", Lease: time.Second})
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.ErrorContains(t, err, "WRONGTYPE")
	_, err = s.Get(ctx, "foreign")
	require.ErrorIs(t, err, store.ErrUnavailable)
	val, err := c.Get(ctx, s.Prefix()+"foreign").Result()
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

	n64, err := c.Exists(t.Context(), s.Prefix()+"k", s.Prefix()+"a", s.Prefix()+"b").Result()
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
// the LastError of the failure before it.
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
}

func TestBatchRules(t *testing.T) {
	t.Parallel()
	batchRules(t, newStore(t, redistest.Client(t), nil))
}
