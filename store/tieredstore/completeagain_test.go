package tieredstore_test

import (
	"context"
	"fmt"
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
// after the call and its error, if any, replaces the answer.
type faultyRemote struct {
	store.Store
	afterComplete func(ctx context.Context, req store.CompleteRequest) error
}

func (r *faultyRemote) Complete(ctx context.Context, req store.CompleteRequest) error {
	if err := r.Store.Complete(ctx, req); err != nil {
		return err
	}
	if r.afterComplete != nil {
		return r.afterComplete(ctx, req)
	}
	return nil
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
// remote record.
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
		for name, run := range cases {
			t.Run(remoteName+"/"+name, func(t *testing.T) {
				t.Parallel()
				sr := newRemote(t)
				remote := &faultyRemote{Store: sr.remote}
				a, b := sr.tiered(t, remote), sr.tiered(t, remote)
				c := acquire(t, a, key, "")
				sr.wait(20 * time.Millisecond) // the completions start later than the claim
				run(t, sr, remote, a, b, c.Token)

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
			})
		}
	}
}

func withToken(req store.CompleteRequest, token store.Token) store.CompleteRequest {
	req.Token = token
	return req
}
