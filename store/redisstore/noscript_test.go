package redisstore_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/redisstore"
)

// TestLostScriptsReloadFails: a server that lost its scripts (NOSCRIPT: a
// restart, SCRIPT FLUSH) and then refuses to load them again fails a
// batch's completion with the cause, the refused load, not with the
// NOSCRIPT of the script cache that the store was recovering from (an
// operator read "connection refused" followed by "NOSCRIPT No matching
// script" and looked at the scripts).
func TestLostScriptsReloadFails(t *testing.T) {
	t.Parallel()
	// Each way a batch reaches the server: one multi-key script on a single
	// server, a pipeline of single-key scripts (a client that is not one
	// *redis.Client: Cluster, or a wrapper of the application's), and
	// MinReplicas' scripts with their WAIT.
	for _, tc := range []struct {
		name string
		open func(t *testing.T) (*redis.Client, redis.UniversalClient, *redisstore.Options)
	}{
		{"OneServer", func(t *testing.T) (*redis.Client, redis.UniversalClient, *redisstore.Options) {
			c := ownServer(t)
			return c, c, nil
		}},
		{"Pipeline", func(t *testing.T) (*redis.Client, redis.UniversalClient, *redisstore.Options) {
			c := ownServer(t)
			return c, wrappedClient{c}, nil
		}},
		{"MinReplicas", func(t *testing.T) (*redis.Client, redis.UniversalClient, *redisstore.Options) {
			master := redistest.StartServer(t, "--repl-diskless-sync-delay", "0")
			redistest.StartReplica(t, master)
			c := redis.NewClient(&redis.Options{Addr: master.Addr()})
			t.Cleanup(func() { _ = c.Close() })
			return c, c, &redisstore.Options{MinReplicas: 1, ReplicaTimeout: healthy}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			admin, c, opts := tc.open(t)
			s := newStore(t, c, opts)
			ctx := t.Context()
			var reqs []store.CompleteRequest
			for _, key := range []string{"noscript:a", "noscript:b"} {
				cl, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
				require.NoError(t, err)
				require.True(t, cl.Acquired)
				reqs = append(reqs, store.CompleteRequest{Key: key, Token: cl.Token, Result: []byte("r"), Retention: time.Hour})
			}
			require.NoError(t, admin.ScriptFlush(ctx).Err())
			require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", "default", "-script|load").Err())

			for i, err := range s.CompleteBatch(ctx, reqs) {
				require.ErrorIs(t, err, store.ErrUnavailable, "completion %d", i)
				require.ErrorContains(t, err, "NOPERM", "completion %d: the cause, the refused load, is reported", i)
				require.NotContains(t, err.Error(), "No matching script", "completion %d: not the script cache's miss it recovered from", i)
			}
		})
	}
}

// ownServer starts a Redis server of the test's own and returns a client
// of it.
func ownServer(t *testing.T) *redis.Client {
	t.Helper()
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// wrappedClient is a single server's client as an application may hand it
// over, wrapped in a type of its own: not a *redis.Client.
type wrappedClient struct{ *redis.Client }
