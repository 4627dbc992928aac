package redisstore_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/redisstore"
)

func TestNewRefusesBadOptions(t *testing.T) {
	t.Parallel()
	_, err := redisstore.New(t.Context(), nil, nil)
	require.ErrorIs(t, err, dedup.ErrInvalidConfig)

	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, o := range []redisstore.Options{{Timeout: -time.Second}, {AbandonedTTL: -time.Second}} {
		_, err := redisstore.New(t.Context(), c, &o)
		require.ErrorIs(t, err, dedup.ErrInvalidConfig, "%+v", o)
	}
}

// TestNewRedisDown: a Redis that refuses connections at start-up is a
// clear error naming its address, matching ErrStoreUnavailable.
func TestNewRedisDown(t *testing.T) {
	t.Parallel()
	addr := "127.0.0.1:" + itoa(testenv.FreePort(t)) // nothing listens there
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	_, err := redisstore.New(t.Context(), c, &redisstore.Options{Timeout: 500 * time.Millisecond})
	require.ErrorIs(t, err, dedup.ErrStoreUnavailable)
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
		require.ErrorIs(t, err, dedup.ErrStoreUnavailable)
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
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return l.Addr().String()
}

// TestTTLFollowsState: the Redis TTL of a record is its lease plus the
// abandoned-claim grace while processing, and its retention once settled.
func TestTTLFollowsState(t *testing.T) {
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
	ttl := func(key string) time.Duration {
		d, err := c.PTTL(ctx, s.Prefix()+key).Result()
		require.NoError(t, err)
		return d
	}
	requireTTL := func(want time.Duration, key, what string) {
		t.Helper()
		require.InDelta(t, want.Seconds(), ttl(key).Seconds(), 0.5, "TTL of a %s record", what)
	}

	claim, err := s.Acquire(ctx, "done", dedup.AcquireRequest{Lease: lease})
	require.NoError(t, err)
	requireTTL(lease+abandoned, "done", "processing")
	require.NoError(t, s.Extend(ctx, "done", claim.Token, 3*lease))
	requireTTL(3*lease+abandoned, "done", "extended")
	require.NoError(t, s.Complete(ctx, "done", claim.Token, []byte("ok"), retention))
	requireTTL(retention, "done", "completed")

	claim, err = s.Acquire(ctx, "failed", dedup.AcquireRequest{Lease: lease})
	require.NoError(t, err)
	require.NoError(t, s.Release(ctx, "failed", claim.Token, dedup.Failure{Error: "boom", Retention: failed}))
	requireTTL(failed, "failed", "failed")
}

// TestAbandonedClaimKeepsAttempts: a claim whose worker died is taken over
// as the next attempt, so a message that kills its worker every time runs
// out of attempts.
func TestAbandonedClaimKeepsAttempts(t *testing.T) {
	t.Parallel()
	s := newStore(t, redistest.Client(t), nil)
	ctx := t.Context()
	for want := 1; want <= 3; want++ {
		c, err := s.Acquire(ctx, "crashy", dedup.AcquireRequest{Lease: 30 * time.Millisecond})
		require.NoError(t, err)
		require.True(t, c.Acquired)
		require.Equal(t, want, c.Record.Attempt)
		time.Sleep(40 * time.Millisecond) // the worker "crashes": its lease runs out
	}
}

// TestScriptsReloaded: a server that lost its scripts (a restart, SCRIPT
// FLUSH) gets them again, for single calls and for pipelined batches.
func TestScriptsReloaded(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	s := newStore(t, c, nil)
	ctx := t.Context()
	lease := dedup.AcquireRequest{Lease: time.Minute}

	require.NoError(t, c.ScriptFlush(ctx).Err())
	claim, err := s.Acquire(ctx, "single", lease)
	require.NoError(t, err)
	require.True(t, claim.Acquired)

	require.NoError(t, c.ScriptFlush(ctx).Err())
	out := s.AcquireBatch(ctx, []dedup.AcquireItem{{Key: "a", Request: lease}, {Key: "b", Request: lease}})
	for _, o := range out {
		require.NoError(t, o.Err)
		require.True(t, o.Claim.Acquired)
	}
	require.NoError(t, c.ScriptFlush(ctx).Err())
	errs := s.CompleteBatch(ctx, []dedup.CompleteItem{
		{Key: "a", Token: out[0].Claim.Token, Result: []byte("A"), Retention: time.Minute},
		{Key: "b", Token: out[1].Claim.Token, Result: []byte("B"), Retention: time.Minute},
	})
	require.Equal(t, []error{nil, nil}, errs)
	rec, err := s.Get(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, "B", string(rec.Result))
}

// TestForeignKey: a key under the prefix that another program wrote is an
// error, not a panic or a silent overwrite.
func TestForeignKey(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t)
	s := newStore(t, c, nil)
	ctx := t.Context()
	require.NoError(t, c.Set(ctx, s.Prefix()+"foreign", "not a record", time.Minute).Err())
	_, err := s.Acquire(ctx, "foreign", dedup.AcquireRequest{Lease: time.Second})
	require.ErrorIs(t, err, dedup.ErrStoreUnavailable)
	require.ErrorContains(t, err, "WRONGTYPE")
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
		c, err := s.Acquire(ctx, key, dedup.AcquireRequest{Lease: time.Minute})
		require.NoError(t, err)
		require.True(t, c.Acquired)
	}
	for _, prefix := range []string{"a*", "a?", "a[b]"} {
		var keys []string
		require.NoError(t, s.Scan(ctx, prefix, func(r dedup.Record) bool {
			keys = append(keys, r.Key)
			return true
		}))
		require.Equal(t, []string{prefix + ":1"}, keys, "Scan(%q)", prefix)
	}
}

// TestStoreDownCallsFail: every operation on a store whose Redis stopped
// fails with an error matching ErrStoreUnavailable within the timeout, and
// a cancelled context is reported as such.
func TestStoreDownCallsFail(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	s := newStore(t, c, &redisstore.Options{Timeout: 500 * time.Millisecond})
	ctx := t.Context()
	claim, err := s.Acquire(ctx, "k", dedup.AcquireRequest{Lease: time.Minute})
	require.NoError(t, err)
	srv.Stop()

	_, err = s.Acquire(ctx, "k2", dedup.AcquireRequest{Lease: time.Minute})
	require.ErrorIs(t, err, dedup.ErrStoreUnavailable)
	var serr *dedup.StoreError
	require.ErrorAs(t, err, &serr)
	require.Equal(t, "acquire", serr.Op)
	require.ErrorIs(t, s.Complete(ctx, "k", claim.Token, nil, time.Minute), dedup.ErrStoreUnavailable)
	require.ErrorIs(t, s.Release(ctx, "k", claim.Token, dedup.Failure{Retention: time.Minute}), dedup.ErrStoreUnavailable)
	require.ErrorIs(t, s.Extend(ctx, "k", claim.Token, time.Minute), dedup.ErrStoreUnavailable)
	for _, o := range s.AcquireBatch(ctx, []dedup.AcquireItem{{Key: "x", Request: dedup.AcquireRequest{Lease: time.Minute}}}) {
		require.ErrorIs(t, o.Err, dedup.ErrStoreUnavailable)
	}
	_, err = s.Get(ctx, "k")
	require.ErrorIs(t, err, dedup.ErrStoreUnavailable)
	require.ErrorIs(t, s.Scan(ctx, "", func(dedup.Record) bool { return true }), dedup.ErrStoreUnavailable)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = s.Acquire(cancelled, "k3", dedup.AcquireRequest{Lease: time.Minute})
	require.ErrorIs(t, err, context.Canceled)
	require.False(t, errors.Is(err, dedup.ErrStoreUnavailable), "a cancelled call is the caller's doing: %v", err)
}
