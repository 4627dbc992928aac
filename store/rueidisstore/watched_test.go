package rueidisstore_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/rueidisstore"
)

// watchedWorld is a batch of completions of keys in every state a
// completion meets: new claims in the short form, claims with a
// fingerprint (the long form), a first claim created hours ago (done
// too far for the short form), a key completed already by the token,
// and a key held by another token.
func watchedWorld(t *testing.T, s *rueidisstore.Store, gc redis.UniversalClient, name string) []store.CompleteRequest {
	t.Helper()
	ctx := t.Context()
	var reqs []store.CompleteRequest
	claim := func(key, fp string) store.Token {
		c, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute, Fingerprint: fp})
		require.NoError(t, err)
		require.True(t, c.Acquired)
		return c.Token
	}
	for i := range 6 {
		key := fmt.Sprintf("%s:new%d", name, i)
		reqs = append(reqs, store.CompleteRequest{Key: key, Token: claim(key, ""), Result: []byte(fmt.Sprint("ok", i)), Retention: time.Hour})
	}
	for i := range 3 {
		key := fmt.Sprintf("%s:fp%d", name, i)
		reqs = append(reqs, store.CompleteRequest{Key: key, Token: claim(key, "fp"), Result: []byte("fp"), Retention: 2 * time.Hour})
	}
	old := name + ":old"
	token := store.NewToken()
	created := time.Now().Add(-3 * time.Hour).UnixMilli()
	require.NoError(t, gc.Set(ctx, s.RedisKey(old), "q"+string(token[:])+rawTime(time.Now().Add(time.Minute).UnixMilli())+rawTime(created), time.Minute).Err())
	reqs = append(reqs, store.CompleteRequest{Key: old, Token: token, Result: []byte("late"), Retention: time.Hour})
	done := name + ":done"
	token = claim(done, "")
	require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: done, Token: token, Result: []byte("first"), Retention: time.Hour}))
	reqs = append(reqs, store.CompleteRequest{Key: done, Token: token, Result: []byte("second"), Retention: time.Hour})
	taken := name + ":taken"
	claim(taken, "")
	reqs = append(reqs, store.CompleteRequest{Key: taken, Token: store.NewToken(), Result: []byte("no"), Retention: time.Hour})
	return reqs
}

func rawTime(ms int64) string {
	return string([]byte{byte(ms >> 40), byte(ms >> 32), byte(ms >> 24), byte(ms >> 16), byte(ms >> 8), byte(ms)})
}

// TestCompleteBatchTransaction: a batch of completions large enough to be
// sent as a transaction (WATCH, MULTI, EXEC) answers and writes what the
// completion script does for each key alone: the same outcomes, the same
// records, the same expiry; and a batch with an absent key, which the
// transaction leaves to the script, too.
func TestCompleteBatchTransaction(t *testing.T) {
	t.Parallel()
	c, gc := shared(t)
	s := newStore(t, c, gc, nil)
	ctx := t.Context()
	for _, absent := range []bool{false, true} {
		name := fmt.Sprintf("tx%v", absent)
		batch := watchedWorld(t, s, gc, name+"b")
		alone := watchedWorld(t, s, gc, name+"a")
		if absent {
			batch = append(batch, store.CompleteRequest{Key: name + "b:absent", Token: store.NewToken(), Retention: time.Hour})
			alone = append(alone, store.CompleteRequest{Key: name + "a:absent", Token: store.NewToken(), Retention: time.Hour})
		}
		got := s.CompleteBatchReport(ctx, batch)
		for i, req := range alone {
			completion, err := s.CompleteReport(ctx, req)
			require.Equal(t, completion, got[i].Completion, "%s: %s", name, req.Key)
			require.Equal(t, err == nil, got[i].Err == nil, "%s: %s: %v, %v", name, req.Key, err, got[i].Err)
			if err != nil {
				require.ErrorIs(t, got[i].Err, store.ErrLeaseLost, req.Key)
				continue
			}
			want, err := s.Get(ctx, req.Key)
			require.NoError(t, err)
			rec, err := s.Get(ctx, batch[i].Key)
			require.NoError(t, err)
			require.WithinDuration(t, want.CompletedAt, rec.CompletedAt, 5*time.Second, req.Key)
			require.WithinDuration(t, want.ExpiresAt, rec.ExpiresAt, 5*time.Second, req.Key)
			pttl, err := gc.PTTL(ctx, s.RedisKey(batch[i].Key)).Result()
			require.NoError(t, err)
			require.WithinDuration(t, rec.ExpiresAt, time.Now().Add(pttl), time.Second, "%s: the record's expiry is its key's", req.Key)
			want.Key, want.CompletedAt, want.ExpiresAt, want.Token = rec.Key, rec.CompletedAt, rec.ExpiresAt, rec.Token
			want.CreatedAt = rec.CreatedAt
			require.Equal(t, want, rec, req.Key)
			require.Equal(t, batch[i].Token, rec.Token, req.Key)
		}
	}
}

// TestCompleteBatchTransactionContended completes batches while other
// goroutines take some of their keys over: a transaction that a takeover
// overtakes is aborted and left to the script, so a batch's completion
// wins a key only where its token still held it, and every key ends as
// exactly one of them wrote it.
func TestCompleteBatchTransactionContended(t *testing.T) {
	t.Parallel()
	c, gc := shared(t)
	s := newStore(t, c, gc, nil)
	ctx := t.Context()
	for round := range 20 {
		var reqs []store.CompleteRequest
		for i := range 16 {
			key := fmt.Sprintf("contended%d:%d", round, i)
			cl, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Millisecond})
			require.NoError(t, err)
			reqs = append(reqs, store.CompleteRequest{Key: key, Token: cl.Token, Result: []byte("batch"), Retention: time.Hour})
		}
		time.Sleep(2 * time.Millisecond) // every lease has ended: a takeover may win
		taken := make([]store.Token, len(reqs))
		var wg sync.WaitGroup
		for i := range reqs {
			if i%2 == 1 {
				continue
			}
			wg.Go(func() {
				cl, err := s.Acquire(ctx, store.AcquireRequest{Key: reqs[i].Key, Lease: time.Minute})
				if err == nil && cl.Acquired {
					taken[i] = cl.Token
				}
			})
		}
		out := s.CompleteBatchReport(ctx, reqs)
		wg.Wait()
		for i, o := range out {
			rec, err := s.Get(ctx, reqs[i].Key)
			require.NoError(t, err)
			if o.Err == nil {
				require.Equal(t, store.CompletionWrote, o.Completion, reqs[i].Key)
				require.Equal(t, store.StateCompleted, rec.State, reqs[i].Key)
				require.Equal(t, reqs[i].Token, rec.Token, reqs[i].Key)
				require.True(t, taken[i].IsZero(), "%s: completed and taken over both", reqs[i].Key)
				continue
			}
			require.ErrorIs(t, o.Err, store.ErrLeaseLost, reqs[i].Key)
			require.False(t, taken[i].IsZero(), "%s: lease lost with no takeover", reqs[i].Key)
			require.Equal(t, store.StateProcessing, rec.State, reqs[i].Key)
			require.Equal(t, taken[i], rec.Token, reqs[i].Key)
		}
	}
}

// TestCompleteBatchTransactionRefused: a user whose ACL allows the scripts
// but not the commands of a transaction (WATCH, MULTI, EXEC) completes its
// batches as before, through the script; no SET runs outside a
// transaction, and the connection goes back to the pool with no WATCH or
// MULTI open.
func TestCompleteBatchTransactionRefused(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = admin.Close() })
	ctx := t.Context()
	for _, denied := range []string{"-watch", "-multi", "-exec"} {
		user := "u" + denied[1:]
		require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", user, "on", ">pw", "~*", "+@all", denied).Err())
		c := connect(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}, Username: user, Password: "pw"})
		s, err := rueidisstore.New(ctx, c, &rueidisstore.Options{Prefix: "refused:"})
		require.NoError(t, err)
		for round := range 3 {
			var reqs []store.CompleteRequest
			for i := range 10 {
				key := fmt.Sprintf("%s:%d:%d", user, round, i)
				cl, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
				require.NoError(t, err)
				reqs = append(reqs, store.CompleteRequest{Key: key, Token: cl.Token, Result: []byte("ok"), Retention: time.Hour})
			}
			for i, o := range s.CompleteBatchReport(ctx, reqs) {
				require.NoError(t, o.Err, "%s: %s", denied, reqs[i].Key)
				require.Equal(t, store.CompletionWrote, o.Completion, "%s: %s", denied, reqs[i].Key)
			}
		}
	}
}
