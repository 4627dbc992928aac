package overredis_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/memstore"
	"github.com/dedup-go/dedup/store/redisstore"
	"github.com/dedup-go/dedup/store/tieredstore"
)

// errAnswerLost is what faultyRemote answers for a call it applied but
// whose answer it drops, as a timeout after the write would.
var errAnswerLost = fmt.Errorf("the answer was lost: %w", store.ErrUnavailable)

// faultyRemote is a remote store whose Complete, once the store under it
// applied it, may have its answer lost or held back: afterComplete runs
// after the call and its error, if any, replaces the answer. It cannot
// tell what a Complete wrote (it is no store.CompleteReporter), as pgstore
// cannot.
type faultyRemote struct {
	store.Store
	afterComplete func(ctx context.Context, req store.CompleteRequest) error
	// beforeComplete, when set, runs before a single-key Complete: its
	// error fails the call, which then never reaches the store under it.
	beforeComplete func(ctx context.Context, req store.CompleteRequest) error
}

func (r *faultyRemote) Complete(ctx context.Context, req store.CompleteRequest) error {
	if r.beforeComplete != nil {
		if err := r.beforeComplete(ctx, req); err != nil {
			return err
		}
	}
	if err := r.Store.Complete(ctx, req); err != nil {
		return err
	}
	if r.afterComplete != nil {
		return r.afterComplete(ctx, req)
	}
	return nil
}

// reportingRemote is a faultyRemote that reports what a Complete wrote,
// as the store under it (a store.CompleteReporter) answered it: its
// answers are lost or held back as faultyRemote's are.
type reportingRemote struct {
	*faultyRemote
	reporter store.CompleteReporter
}

func (r *reportingRemote) CompleteReport(ctx context.Context, req store.CompleteRequest) (store.Completion, error) {
	if r.beforeComplete != nil {
		if err := r.beforeComplete(ctx, req); err != nil {
			return store.CompletionUnknown, err
		}
	}
	c, err := r.reporter.CompleteReport(ctx, req)
	if err == nil && r.afterComplete != nil {
		if err = r.afterComplete(ctx, req); err != nil {
			c = store.CompletionUnknown
		}
	}
	return c, err
}

func (r *reportingRemote) CompleteBatchReport(ctx context.Context, reqs []store.CompleteRequest) []store.CompleteOutcome {
	out := r.reporter.CompleteBatchReport(ctx, reqs)
	for i := range out {
		if out[i].Err == nil && r.afterComplete != nil {
			if err := r.afterComplete(ctx, reqs[i]); err != nil {
				out[i] = store.CompleteOutcome{Err: err}
			}
		}
	}
	return out
}

// wrap returns the remote the tiered stores of a test share: f itself, or,
// when report, f reporting what the store under it reports.
func wrap(f *faultyRemote, report bool) store.Store {
	if !report {
		return f
	}
	return &reportingRemote{faultyRemote: f, reporter: f.Store.(store.CompleteReporter)}
}

// sharedRemote is a remote store two tiered stores share, with a way to
// read its records and to move time for both tiers and the remote.
type sharedRemote struct {
	remote  store.Store
	inspect store.Inspector
	// clk is the clock of the tiered stores (and of memstore); wait lets
	// time pass on it.
	clk  clock.Clock
	wait func(time.Duration)
	fake bool
}

// remotes returns the remotes the tests below run over: memstore on a
// fake clock that the tiered stores share, and redisstore on the shared
// Redis under a prefix of the test's own.
func remotes() map[string]func(t *testing.T) sharedRemote {
	return map[string]func(t *testing.T) sharedRemote{
		"memstore": func(t *testing.T) sharedRemote {
			clk := clock.NewFake(epoch)
			m, err := memstore.New(&memstore.Options{Clock: clk})
			require.NoError(t, err)
			return sharedRemote{remote: m, inspect: m, clk: clk, wait: clk.Advance, fake: true}
		},
		"redis": func(t *testing.T) sharedRemote {
			c := redistest.Client(t)
			r, err := redisstore.New(context.Background(), c, &redisstore.Options{Prefix: redistest.Prefix(t, c)})
			require.NoError(t, err)
			return sharedRemote{remote: r, inspect: r, clk: clock.Real(), wait: time.Sleep}
		},
	}
}

// tiered returns a tiered store over remote, on sr's clock.
func (sr sharedRemote) tiered(t *testing.T, remote store.Store) *tieredstore.Store {
	t.Helper()
	s, err := tieredstore.New(remote, &tieredstore.Options{Clock: sr.clk, ClockSkew: 5 * time.Millisecond})
	require.NoError(t, err)
	return s
}

// TestCompleteAgainKeepsTheRemoteRecord: a record completed once, then
// completed again with the same token and another result and retention
// (through another tiered store, as a retry whose first answer was lost,
// or concurrently), is answered by both tiered stores with the first
// result, as the remote store keeps it, and no local copy outlives the
// remote record. Each case runs over a remote store that reports what a
// Complete wrote (store.CompleteReporter) and over one that cannot tell.
func TestCompleteAgainKeepsTheRemoteRecord(t *testing.T) {
	t.Parallel()
	const key = "pay:p1"
	first := store.CompleteRequest{Key: key, Result: []byte("r1"), Retention: time.Hour}
	second := store.CompleteRequest{Key: key, Result: []byte("r2"), Retention: 3 * time.Hour}

	// Each case claims key through a, completes it with first and then
	// with second, both with the claim's token.
	cases := map[string]func(t *testing.T, sr sharedRemote, remote *faultyRemote, a, b *tieredstore.Store, token store.Token){
		"ThroughAnotherStore": func(t *testing.T, sr sharedRemote, _ *faultyRemote, a, b *tieredstore.Store, token store.Token) {
			require.NoError(t, a.Complete(t.Context(), withToken(first, token)))
			sr.wait(20 * time.Millisecond)
			require.NoError(t, b.Complete(t.Context(), withToken(second, token)))
		},
		// The case a Store that cannot learn what a Complete wrote
		// cannot see: the token is completed first through another
		// Store, then through the one that granted it.
		"FirstThroughAnotherStore": func(t *testing.T, sr sharedRemote, _ *faultyRemote, a, b *tieredstore.Store, token store.Token) {
			require.NoError(t, b.Complete(t.Context(), withToken(first, token)))
			sr.wait(20 * time.Millisecond)
			require.NoError(t, a.Complete(t.Context(), withToken(second, token)))
		},
		"FirstThroughAnotherStoreBatch": func(t *testing.T, sr sharedRemote, _ *faultyRemote, a, b *tieredstore.Store, token store.Token) {
			require.NoError(t, b.CompleteBatch(t.Context(), []store.CompleteRequest{withToken(first, token)})[0])
			sr.wait(20 * time.Millisecond)
			require.NoError(t, a.CompleteBatch(t.Context(), []store.CompleteRequest{withToken(second, token)})[0])
		},
		"RetryAfterLostAnswer": func(t *testing.T, sr sharedRemote, remote *faultyRemote, a, _ *tieredstore.Store, token store.Token) {
			remote.afterComplete = func(context.Context, store.CompleteRequest) error { return errAnswerLost }
			require.ErrorIs(t, a.Complete(t.Context(), withToken(first, token)), store.ErrUnavailable)
			remote.afterComplete = nil
			sr.wait(20 * time.Millisecond)
			require.NoError(t, a.Complete(t.Context(), withToken(second, token)), "the retry of a completion that was written")
		},
		"RetryThroughAnotherStoreAfterLostAnswer": func(t *testing.T, sr sharedRemote, remote *faultyRemote, a, b *tieredstore.Store, token store.Token) {
			remote.afterComplete = func(context.Context, store.CompleteRequest) error { return errAnswerLost }
			require.ErrorIs(t, a.Complete(t.Context(), withToken(first, token)), store.ErrUnavailable)
			remote.afterComplete = nil
			sr.wait(20 * time.Millisecond)
			require.NoError(t, b.Complete(t.Context(), withToken(second, token)))
		},
		"Concurrent": func(t *testing.T, _ sharedRemote, remote *faultyRemote, a, _ *tieredstore.Store, token store.Token) {
			// The first call writes, then its answer is held back until
			// the second call (a no-op in the remote store) has returned.
			written, release := make(chan struct{}), make(chan struct{})
			remote.afterComplete = func(ctx context.Context, req store.CompleteRequest) error {
				if string(req.Result) != "r1" {
					return nil
				}
				close(written)
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			var wg sync.WaitGroup
			var firstErr error
			wg.Go(func() { firstErr = a.Complete(t.Context(), withToken(first, token)) })
			select {
			case <-written:
			case <-time.After(10 * time.Second):
				close(release)
				t.Fatal("the first Complete did not reach the remote store")
			}
			secondErr := a.Complete(t.Context(), withToken(second, token))
			close(release)
			testenv.Wait(t, &wg, "the first Complete to return")
			require.NoError(t, firstErr)
			require.NoError(t, secondErr)
		},
	}
	for remoteName, newRemote := range remotes() {
		for _, report := range []bool{true, false} {
			for name, run := range cases {
				kind := map[bool]string{true: "reporting", false: "plain"}[report]
				t.Run(remoteName+"/"+kind+"/"+name, func(t *testing.T) {
					t.Parallel()
					if !report && strings.HasPrefix(name, "FirstThroughAnotherStore") {
						t.Skip("a remote store that cannot tell what a Complete wrote leaves this case open (see the package documentation)")
					}
					testCompleteAgain(t, newRemote(t), report, run)
				})
			}
		}
	}
}

// testCompleteAgain runs one case of TestCompleteAgainKeepsTheRemoteRecord
// over sr, reporting what a Complete wrote or not.
func testCompleteAgain(t *testing.T, sr sharedRemote, report bool, run func(t *testing.T, sr sharedRemote, remote *faultyRemote, a, b *tieredstore.Store, token store.Token)) {
	const key = "pay:p1"
	faulty := &faultyRemote{Store: sr.remote}
	remote := wrap(faulty, report)
	a, b := sr.tiered(t, remote), sr.tiered(t, remote)
	c := acquire(t, a, key, "")
	sr.wait(20 * time.Millisecond) // the completions start later than the claim
	run(t, sr, faulty, a, b, c.Token)

	rec, err := sr.inspect.Get(t.Context(), key)
	require.NoError(t, err)
	require.Equal(t, "r1", string(rec.Result), "the remote store keeps the first result")
	for i, s := range []*tieredstore.Store{a, b} {
		if local := s.Peek("pay:", "p1"); local != nil {
			require.Equal(t, "r1", string(local.Result), "store %d cached a result the remote store did not keep", i)
		}
		dup, err := s.Acquire(t.Context(), store.AcquireRequest{Key: key, Lease: time.Minute})
		require.NoError(t, err)
		require.False(t, dup.Acquired)
		require.Equal(t, "r1", string(dup.Record.Result), "store %d", i)
		local := s.Peek("pay:", "p1")
		require.NotNil(t, local, "store %d: the duplicate is answered from memory after a read", i)
		require.Equal(t, "r1", string(local.Result), "store %d", i)
		require.False(t, local.ExpiresAt.After(rec.ExpiresAt), "store %d: the local copy (%v) outlives the remote record (%v)", i, local.ExpiresAt, rec.ExpiresAt)
	}
	if !sr.fake {
		return
	}
	// At the remote record's expiry no copy answers, and the
	// key is claimed afresh.
	sr.wait(rec.ExpiresAt.Sub(sr.clk.Now()))
	for i, s := range []*tieredstore.Store{a, b} {
		require.Nil(t, s.Peek("pay:", "p1"), "store %d answers a record the remote store dropped", i)
	}
	again := acquire(t, b, key, "")
	require.Equal(t, 1, again.Record.Attempt)
}

// TestReportedWriteIsCached: over a remote store that reports what a
// Complete wrote, the call that wrote the record caches it, alone or in a
// batch, even when an earlier Complete with its token through this Store
// failed before reaching the remote store (a Store that cannot learn what
// a Complete wrote caches no retry).
func TestReportedWriteIsCached(t *testing.T) {
	t.Parallel()
	for remoteName, newRemote := range remotes() {
		t.Run(remoteName, func(t *testing.T) {
			t.Parallel()
			sr := newRemote(t)
			faulty := &faultyRemote{Store: sr.remote}
			a := sr.tiered(t, wrap(faulty, true))
			requireCached := func(t *testing.T, key, result string) {
				t.Helper()
				local := a.Peek(store.SplitKey(key))
				require.NotNil(t, local, "the record of %s is cached on completion", key)
				require.Equal(t, result, string(local.Result))
				rec, err := sr.inspect.Get(t.Context(), key)
				require.NoError(t, err)
				require.Equal(t, result, string(rec.Result), "the remote record of %s", key)
				require.False(t, local.ExpiresAt.After(rec.ExpiresAt), "the local copy (%v) outlives the remote record (%v)", local.ExpiresAt, rec.ExpiresAt)
			}

			c := acquire(t, a, "pay:one", "")
			require.NoError(t, a.Complete(t.Context(), store.CompleteRequest{Key: "pay:one", Token: c.Token, Result: []byte("r1"), Retention: time.Hour}))
			requireCached(t, "pay:one", "r1")

			c = acquire(t, a, "pay:retried", "")
			faulty.beforeComplete = func(context.Context, store.CompleteRequest) error { return errAnswerLost }
			require.ErrorIs(t, a.Complete(t.Context(), store.CompleteRequest{Key: "pay:retried", Token: c.Token, Result: []byte("lost"), Retention: time.Hour}), store.ErrUnavailable)
			faulty.beforeComplete = nil
			require.Nil(t, a.Peek("pay:", "retried"))
			require.NoError(t, a.Complete(t.Context(), store.CompleteRequest{Key: "pay:retried", Token: c.Token, Result: []byte("r2"), Retention: time.Hour}))
			requireCached(t, "pay:retried", "r2")

			c3, c4 := acquire(t, a, "pay:b3", ""), acquire(t, a, "pay:b4", "")
			for _, err := range a.CompleteBatch(t.Context(), []store.CompleteRequest{
				{Key: "pay:b3", Token: c3.Token, Result: []byte("r3"), Retention: time.Hour},
				{Key: "pay:b4", Token: c4.Token, Result: []byte("r4"), Retention: time.Hour},
				{Key: "pay:b3", Token: c3.Token, Result: []byte("again"), Retention: time.Hour},
			}) {
				require.NoError(t, err)
			}
			requireCached(t, "pay:b3", "r3")
			requireCached(t, "pay:b4", "r4")
		})
	}
}

func withToken(req store.CompleteRequest, token store.Token) store.CompleteRequest {
	req.Token = token
	return req
}
