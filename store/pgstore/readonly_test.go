package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/pgstore"
)

// TestStandbyIsUnavailable: a client that lands on a standby (a
// connection string with target_session_attrs=any, PostgreSQL's default,
// during a failover; or a DNS name that still points at a replica) gets
// read-only errors (SQLSTATE 25006) from every write. Each call fails
// with an error matching store.ErrUnavailable, never ErrMisconfigured: the
// receiver refuses the delivery and retries it, fail-closed, rather than
// treating the database as misconfigured. Once the standby is promoted,
// the same store and pool write, without a new connection.
func TestStandbyIsUnavailable(t *testing.T) {
	t.Parallel()
	pair := startPair(t, asynchronous, 0)
	ctx := t.Context()
	newStore(t, connect(t, pair.primary.DSN(), 1), "dedup_records", nil)
	onStandby := connect(t, pair.standby.DSN(), 1)
	waitForTable(t, onStandby)
	// New only reads: it checks the table on a standby as on a primary.
	s, err := pgstore.New(ctx, onStandby, nil)
	require.NoError(t, err)

	lease, keep := time.Minute, time.Hour
	token := store.NewToken()
	for op, call := range map[string]func() error{
		"acquire": func() error {
			_, err := s.Acquire(ctx, store.AcquireRequest{Key: "k", Lease: lease})
			return err
		},
		"complete": func() error {
			return s.Complete(ctx, store.CompleteRequest{Key: "k", Token: token, Result: []byte("r"), Retention: keep})
		},
		"release": func() error {
			return s.Release(ctx, store.ReleaseRequest{Key: "k", Token: token, Error: "e", Retention: keep})
		},
		"extend": func() error {
			return s.Extend(ctx, store.ExtendRequest{Key: "k", Token: token, Lease: lease})
		},
	} {
		err := call()
		require.ErrorIs(t, err, store.ErrUnavailable, "%s on a standby", op)
		require.NotErrorIs(t, err, pgstore.ErrMisconfigured, "%s on a standby", op)
		require.ErrorContains(t, err, "read-only", "%s on a standby", op)
	}

	pair.primary.Kill()
	pair.standby.Promote()
	claim, err := s.Acquire(ctx, store.AcquireRequest{Key: "k", Lease: lease})
	require.NoError(t, err, "acquire on the promoted standby")
	require.True(t, claim.Acquired)
	require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: "k", Token: claim.Token, Result: []byte("r"), Retention: keep}))
}

// waitForTable waits until the store's table has reached the server of
// pool: a standby replays it some time after the primary created it.
func waitForTable(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		var found bool
		err := pool.QueryRow(ctx, "SELECT to_regclass('dedup_records') IS NOT NULL").Scan(&found)
		if err == nil && found {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the table did not reach the standby within 30s (%v)", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
