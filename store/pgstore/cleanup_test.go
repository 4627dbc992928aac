package pgstore_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/pgstore"
)

// insertGone inserts n records under prefix that are gone already:
// completed and failed ones past their retention, claims past their
// lease and AbandonedTTL; one statement.
func insertGone(t testing.TB, db *testDB, table, prefix string, n int) {
	t.Helper()
	db.exec(t, `INSERT INTO `+table+` (key, state, token, attempt, result, lease_until, expires_at)
SELECT $1 || g, (ARRAY['completed', 'failed', 'processing'])[g % 3 + 1], gen_random_uuid(), 1,
	CASE WHEN g % 3 = 0 THEN '\x7b7d'::bytea END,
	CASE WHEN g % 3 = 2 THEN clock_timestamp() - interval '1 day' END,
	clock_timestamp() - interval '1 second'
FROM generate_series(1, $2::int) g`, prefix, n)
}

// TestCleanup: 100,000 gone records are deleted in statements of at most
// CleanupBatchSize rows while claims go on, some of them claiming gone
// keys afresh; those, and the live records, stay.
func TestCleanup(t *testing.T) {
	t.Parallel()
	db := newDB(t, 12)
	s := db.store(t, &pgstore.Options{CleanupBatchSize: 1000})
	table := db.table("dedup_records")
	ctx := t.Context()
	const gone = 100_000
	insertGone(t, db, table, "old:", gone)
	for i := range 100 {
		key := fmt.Sprintf("live:%d", i)
		c, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
		require.NoError(t, err)
		require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: key, Token: c.Token, Result: []byte("kept"), Retention: time.Hour}))
	}

	// One statement deletes one batch, no more.
	n, err := s.CleanupBatch(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1000, n)

	var (
		running, stopped atomic.Bool
		during           atomic.Int64
		reclaimed        sync.Map // keys of gone records claimed afresh
		wg               sync.WaitGroup
		errs             = make(chan error, 8)
	)
	running.Store(true)
	for w := range 8 {
		wg.Go(func() {
			for i := 0; !stopped.Load(); i++ {
				key := fmt.Sprintf("new:%d:%d", w, i)
				if i%2 == 1 {
					key = fmt.Sprintf("old:%d", gone-w*5000-i) // gone, maybe deleted already
				}
				c, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
				if err == nil && (!c.Acquired || c.Record.Attempt != 1) {
					err = fmt.Errorf("Acquire(%q) must claim it afresh: %+v", key, c)
				}
				if err == nil {
					err = s.Complete(ctx, store.CompleteRequest{Key: key, Token: c.Token, Retention: time.Hour})
				}
				if err != nil {
					errs <- err
					return
				}
				if i%2 == 1 {
					reclaimed.Store(key, true)
				}
				if running.Load() {
					during.Add(1)
				}
			}
		})
	}
	deleted, err := s.Cleanup(ctx)
	running.Store(false)
	stopped.Store(true)
	testenv.Wait(t, &wg, "the claims to stop")
	close(errs)
	for err := range errs {
		require.NoError(t, err, "a claim during the cleanup")
	}
	require.NoError(t, err)
	require.Positive(t, during.Load(), "claims went on during the cleanup")

	var claimedAfresh int
	reclaimed.Range(func(any, any) bool { claimedAfresh++; return true })
	require.Positive(t, claimedAfresh)
	// A gone record claimed before the cleanup reached it is live again and
	// stays; one the cleanup deleted first was inserted afresh.
	require.LessOrEqual(t, deleted, int64(gone-1000))
	require.GreaterOrEqual(t, deleted, int64(gone-1000-claimedAfresh))
	require.Zero(t, db.count(t, "SELECT count(*) FROM "+table+" WHERE expires_at <= clock_timestamp()"), "gone records left")
	require.Equal(t, claimedAfresh, db.count(t, "SELECT count(*) FROM "+table+" WHERE key LIKE 'old:%'"), "only the keys claimed afresh stay")
	require.Equal(t, 100, db.count(t, "SELECT count(*) FROM "+table+" WHERE key LIKE 'live:%' AND state = 'completed'"))

	again, err := s.Cleanup(ctx)
	require.NoError(t, err)
	require.Zero(t, again)
}

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestRunCleanup: the loop deletes what is gone on every run, logs how
// many rows it deleted, and returns its context's error when the context
// ends.
func TestRunCleanup(t *testing.T) {
	t.Parallel()
	db := newDB(t, 4)
	var logs syncBuffer
	s := db.store(t, &pgstore.Options{CleanupBatchSize: 100, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	table := db.table("dedup_records")
	require.ErrorIs(t, s.RunCleanup(t.Context(), 0), store.ErrInvalidConfig)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.RunCleanup(ctx, 20*time.Millisecond) }()
	for round := range 2 {
		insertGone(t, db, table, fmt.Sprintf("round%d:", round), 250)
		deadline := time.Now().Add(testenv.WaitTimeout)
		for db.count(t, "SELECT count(*) FROM "+table) > 0 {
			require.True(t, time.Now().Before(deadline), "RunCleanup did not delete the gone records")
			time.Sleep(10 * time.Millisecond)
		}
	}
	cancel()
	require.ErrorIs(t, testenv.Recv(t, done, "RunCleanup to return"), context.Canceled)
	require.Contains(t, logs.String(), "deleted=250")

	// A loop waiting for its next run stops with its context too, not at
	// the end of its interval.
	ctx, cancel = context.WithCancel(t.Context())
	insertGone(t, db, table, "late:", 10)
	go func() { done <- s.RunCleanup(ctx, time.Hour) }()
	deadline := time.Now().Add(testenv.WaitTimeout)
	for !strings.Contains(logs.String(), "deleted=10") {
		require.True(t, time.Now().Before(deadline), "the first run of RunCleanup did not happen")
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	require.ErrorIs(t, testenv.Recv(t, done, "RunCleanup to return during its interval"), context.Canceled)
}
