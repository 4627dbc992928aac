package mysqlstore_test

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
	"github.com/dedup-go/dedup/store/mysqlstore"
)

// insertGone inserts n records under prefix that are gone already:
// completed and failed ones past their retention, claims past their lease
// and AbandonedTTL; one statement.
func insertGone(t testing.TB, d *testDB, prefix string, n int) {
	t.Helper()
	d.exec(t, "INSERT INTO dedup_records (`key`, state, token, attempt, fingerprint, result, last_error, lease_until, expires_at)"+`
SELECT CONCAT(?, seq), ELT(seq % 3 + 1, 'completed', 'failed', 'processing'), UNHEX(MD5(seq)), 1, '',
	IF(seq % 3 = 0, '{}', NULL), '', IF(seq % 3 = 2, UTC_TIMESTAMP(6) - INTERVAL 1 DAY, NULL),
	UTC_TIMESTAMP(6) - INTERVAL 1 SECOND
FROM seq_1_to_`+fmt.Sprint(n), prefix)
}

// TestCleanup: 30,000 gone records are deleted in statements of at most
// CleanupBatchSize rows while claims go on, some of them claiming gone
// keys afresh; those, and the live records, stay. The statements InnoDB
// broke as deadlocks with a claim, which the store ran again, are logged.
func TestCleanup(t *testing.T) {
	t.Parallel()
	d := newDB(t, 12)
	// A Timeout of 30 s, not the default 2: what is pinned is what the
	// cleanup deletes beside concurrent claims, not how fast; in CI one
	// batch of 1,000 deletions on a busy MariaDB took over 2 s.
	s := d.store(t, &mysqlstore.Options{CleanupBatchSize: 1000, Timeout: 30 * time.Second})
	ctx := t.Context()
	const gone = 30_000
	insertGone(t, d, "old:", gone)
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
					key = fmt.Sprintf("old:%d", gone-w*2000-i) // gone, maybe deleted already
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
	t.Logf("deleted %d rows while %d claims went on; statements run again after a deadlock: %d", deleted, during.Load(), mysqlstore.Retried(s))

	var claimedAfresh int
	reclaimed.Range(func(any, any) bool { claimedAfresh++; return true })
	require.Positive(t, claimedAfresh)
	// A gone record claimed before the cleanup reached it is live again and
	// stays; one the cleanup deleted first was inserted afresh.
	require.LessOrEqual(t, deleted, int64(gone-1000))
	require.GreaterOrEqual(t, deleted, int64(gone-1000-claimedAfresh))
	require.Zero(t, d.count(t, "SELECT COUNT(*) FROM dedup_records WHERE expires_at <= UTC_TIMESTAMP(6)"), "gone records left")
	require.Equal(t, claimedAfresh, d.count(t, "SELECT COUNT(*) FROM dedup_records WHERE `key` LIKE 'old:%'"), "only the keys claimed afresh stay")
	require.Equal(t, 100, d.count(t, "SELECT COUNT(*) FROM dedup_records WHERE `key` LIKE 'live:%' AND state = 'completed'"))

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
	d := newDB(t, 4)
	var logs syncBuffer
	s := d.store(t, &mysqlstore.Options{CleanupBatchSize: 100, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.ErrorIs(t, s.RunCleanup(t.Context(), 0), store.ErrInvalidConfig)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.RunCleanup(ctx, 20*time.Millisecond) }()
	for round := range 2 {
		insertGone(t, d, fmt.Sprintf("round%d:", round), 250)
		deadline := time.Now().Add(testenv.WaitTimeout)
		for d.count(t, "SELECT COUNT(*) FROM dedup_records") > 0 {
			require.True(t, time.Now().Before(deadline), "RunCleanup did not delete the gone records; its log:\n%s", logs.String())
			time.Sleep(10 * time.Millisecond)
		}
	}
	cancel()
	require.ErrorIs(t, testenv.Recv(t, done, "RunCleanup to return"), context.Canceled)
	require.Contains(t, logs.String(), "deleted=250")

	// A loop waiting for its next run stops with its context too, not at
	// the end of its interval.
	ctx, cancel = context.WithCancel(t.Context())
	insertGone(t, d, "late:", 10)
	before := len(logs.String())
	go func() { done <- s.RunCleanup(ctx, time.Hour) }()
	deadline := time.Now().Add(testenv.WaitTimeout)
	// The first run is at once. On a busy machine its statement may fail
	// (a lock wait or its timeout, logged; the next run would be in an
	// hour): that is a run too.
	ran := func() bool {
		l := logs.String()[before:]
		return strings.Contains(l, "deleted=10") || strings.Contains(l, "cleanup failed")
	}
	for !ran() {
		require.True(t, time.Now().Before(deadline), "the first run of RunCleanup did not happen; its log:\n%s", logs.String())
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	require.ErrorIs(t, testenv.Recv(t, done, "RunCleanup to return during its interval"), context.Canceled)
}
