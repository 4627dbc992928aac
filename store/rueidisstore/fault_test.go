package rueidisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/rueidisstore"
)

// ownServer starts a redis-server of the test's own (never the shared
// one), persisting every write before answering so that a kill loses no
// record, and returns it with a store on it.
func ownServer(t *testing.T) (*redistest.Server, rueidis.Client, *rueidisstore.Store) {
	t.Helper()
	srv := redistest.StartServer(t, "--appendonly", "yes", "--appendfsync", "always")
	gc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = gc.Close() })
	c := connect(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
	return srv, c, newStore(t, c, gc, &rueidisstore.Options{Prefix: "fault:", Timeout: 300 * time.Millisecond})
}

// unavailable requires err to be a store failure, not the caller's
// context or a contract error.
func unavailable(t *testing.T, err error, what string) {
	t.Helper()
	require.ErrorIs(t, err, store.ErrUnavailable, what)
	var oe *store.OpError
	require.ErrorAs(t, err, &oe, what)
	require.NotErrorIs(t, err, store.ErrLeaseLost, what)
}

// TestServerDown: with its server killed every call fails with an error
// matching store.ErrUnavailable, bounded by Options.Timeout (the test's
// own context would end the call otherwise, and with another error); once
// the server is back the store works again with nothing lost: the record
// completed before the kill is still answered as completed, and a claim
// made before it can still be completed.
func TestServerDown(t *testing.T) {
	srv, _, s := ownServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	lease, keep := 30*time.Second, time.Hour

	done, err := s.Acquire(ctx, store.AcquireRequest{Key: "pay:done", Lease: lease})
	require.NoError(t, err)
	require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: "pay:done", Token: done.Token, Result: []byte("r"), Retention: keep}))
	held, err := s.Acquire(ctx, store.AcquireRequest{Key: "pay:held", Lease: lease})
	require.NoError(t, err)

	srv.Stop()
	_, err = s.Acquire(ctx, store.AcquireRequest{Key: "pay:new", Lease: lease})
	unavailable(t, err, "acquire")
	unavailable(t, s.Complete(ctx, store.CompleteRequest{Key: "pay:held", Token: held.Token, Retention: keep}), "complete")
	unavailable(t, s.Release(ctx, store.ReleaseRequest{Key: "pay:held", Token: held.Token, Retention: keep}), "release")
	unavailable(t, s.Extend(ctx, store.ExtendRequest{Key: "pay:held", Token: held.Token, Lease: lease}), "extend")
	_, err = s.Get(ctx, "pay:done")
	unavailable(t, err, "get")
	unavailable(t, s.Delete(ctx, "pay:nothing"), "delete")
	_, _, err = s.DeleteIf(ctx, store.DeleteRequest{Key: "pay:nothing"})
	unavailable(t, err, "deleteIf")
	for _, err := range s.Scan(ctx, "pay:") {
		unavailable(t, err, "scan")
	}
	for _, o := range s.AcquireBatch(ctx, []store.AcquireRequest{{Key: "pay:b1", Lease: lease}, {Key: "pay:b2", Lease: lease}}) {
		unavailable(t, o.Err, "acquire batch")
	}
	for _, err := range s.CompleteBatch(ctx, []store.CompleteRequest{{Key: "pay:held", Token: held.Token, Retention: keep}}) {
		unavailable(t, err, "complete batch")
	}
	for _, err := range s.ExtendBatch(ctx, []store.ExtendRequest{{Key: "pay:held", Token: held.Token, Lease: lease}}) {
		unavailable(t, err, "extend batch")
	}

	srv.Start()
	// rueidis reconnects on the next call: the first calls after a
	// restart may still fail while it does.
	var again store.Claim
	require.Eventually(t, func() bool {
		again, err = s.Acquire(ctx, store.AcquireRequest{Key: "pay:done", Lease: lease})
		return err == nil
	}, time.Minute, 50*time.Millisecond, "the store works again once Redis is back: %v", err)
	require.False(t, again.Acquired, "the record completed before the outage is kept")
	require.Equal(t, store.StateCompleted, again.Record.State)
	require.Equal(t, "r", string(again.Record.Result))
	require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: "pay:held", Token: held.Token, Retention: keep}),
		"a claim made before the outage is completed after it")
}

// TestServerHangs: a server that takes the connection but never answers
// (SIGSTOP) fails each call as unavailable after Options.Timeout, though
// the caller's context never ends; once it answers again, so does the
// store.
func TestServerHangs(t *testing.T) {
	srv, _, s := ownServer(t)
	srv.Pause()
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	_, err := s.Acquire(context.Background(), store.AcquireRequest{Key: "pay:hang", Lease: time.Minute})
	unavailable(t, err, "acquire on a silent server")
	require.ErrorIs(t, err, context.DeadlineExceeded, "Options.Timeout cut the call")
	err = s.Complete(context.Background(), store.CompleteRequest{Key: "pay:hang", Token: store.NewToken(), Retention: time.Hour})
	unavailable(t, err, "complete on a silent server")

	srv.Resume()
	resumed = true
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	require.Eventually(t, func() bool {
		_, err = s.Get(ctx, "pay:hang")
		return err == nil || errors.Is(err, store.ErrNotFound)
	}, time.Minute, 50*time.Millisecond, "the store answers again: %v", err)
}

// TestNewServerDown: New on a client whose server is gone fails with an
// error matching store.ErrUnavailable instead of hanging.
func TestNewServerDown(t *testing.T) {
	srv := redistest.StartServer(t)
	c := connect(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
	srv.Stop()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, err := rueidisstore.New(ctx, c, &rueidisstore.Options{Timeout: 300 * time.Millisecond})
	require.ErrorIs(t, err, store.ErrUnavailable)
}

// TestContextEnded: a call whose context ended reports the context's
// error, not a store failure, and sends nothing.
func TestContextEnded(t *testing.T) {
	c, gc := shared(t)
	s := newStore(t, c, gc, nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := s.Acquire(ctx, store.AcquireRequest{Key: "k:1", Lease: time.Minute})
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, store.ErrUnavailable)
	err = s.Complete(ctx, store.CompleteRequest{Key: "k:1", Token: store.NewToken(), Retention: time.Hour})
	require.ErrorIs(t, err, context.Canceled)
	for _, o := range s.AcquireBatch(ctx, []store.AcquireRequest{{Key: "k:2", Lease: time.Minute}}) {
		require.ErrorIs(t, o.Err, context.Canceled)
	}
	_, err = s.Get(t.Context(), "k:2")
	require.ErrorIs(t, err, store.ErrNotFound, "nothing was sent")
}

// TestScriptsFlushed: a server that lost the store's scripts (a restart
// without persistence of its script cache, SCRIPT FLUSH) gets them again
// on the next call, single and batch: rueidis sends EVAL on NOSCRIPT.
func TestScriptsFlushed(t *testing.T) {
	_, c, s := ownServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	flush := func() { require.NoError(t, c.Do(ctx, c.B().ScriptFlush().Build()).Error()) }
	lease, keep := 30*time.Second, time.Hour

	first, err := s.Acquire(ctx, store.AcquireRequest{Key: "f:1", Lease: lease})
	require.NoError(t, err)
	flush()
	require.NoError(t, s.Release(ctx, store.ReleaseRequest{Key: "f:1", Token: first.Token, Error: "e", Retention: keep}))
	flush()
	retry, err := s.Acquire(ctx, store.AcquireRequest{Key: "f:1", Lease: lease})
	require.NoError(t, err)
	require.True(t, retry.Acquired, "the takeover script ran")
	flush()
	require.NoError(t, s.Extend(ctx, store.ExtendRequest{Key: "f:1", Token: retry.Token, Lease: lease}))
	flush()
	require.NoError(t, s.ExtendBatch(ctx, []store.ExtendRequest{{Key: "f:1", Token: retry.Token, Lease: lease}})[0])
	flush()
	require.NoError(t, s.CompleteBatch(ctx, []store.CompleteRequest{{Key: "f:1", Token: retry.Token, Result: []byte("r"), Retention: keep}})[0])
	flush()
	deleted, _, err := s.DeleteIf(ctx, store.DeleteRequest{Key: "f:1"})
	require.NoError(t, err)
	require.True(t, deleted)
}
