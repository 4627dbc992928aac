package mysqlstore

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/dedup-go/dedup/store"
)

// Cleanup deletes the records that are gone (completed and failed ones
// past their retention, claims past their lease plus AbandonedTTL) and
// returns how many it deleted. It works in statements of at most
// Options.CleanupBatchSize rows (DELETE ... ORDER BY expires_at LIMIT),
// each its own short autocommit statement through the expiry index, so
// claims go on meanwhile: a claim that takes a gone record over waits for
// the statement that holds its row, at most, and the statement never
// deletes a record a claim took over before it (one no longer gone when
// its lock is granted). It returns once a statement finds fewer rows than
// that, or ctx ends (with the rows deleted so far). Each statement is
// bounded by Options.Timeout; a deadlock with a claim (the statement locks
// the expiry index first, a claim the primary key) runs it again.
//
// Gone records are already invisible to every other call: Cleanup only
// gives their space back. Run it from one process, now and then
// (RunCleanup), or from a scheduler of your own.
func (s *Store) Cleanup(ctx context.Context) (int64, error) {
	var total int64
	for {
		n, err := s.cleanupBatch(ctx)
		total += n
		if err != nil || n < int64(s.cfg.batchSize) {
			return total, err
		}
	}
}

// cleanupBatch runs one statement of Cleanup.
func (s *Store) cleanupBatch(ctx context.Context) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, errContext("cleanup", "", err)
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	defer cancel()
	res, err := s.exec(cctx, s.sql.cleanup, s.cfg.batchSize)
	for s.again(cctx, err) {
		res, err = s.exec(cctx, s.sql.cleanup, s.cfg.batchSize)
	}
	if err != nil {
		return 0, s.fail(ctx, "cleanup", "", err)
	}
	return res.RowsAffected()
}

// RunCleanup runs Cleanup every interval until ctx ends, and then returns
// ctx's error. Nothing runs behind the caller's back: RunCleanup is the
// loop, in the caller's goroutine (go s.RunCleanup(ctx, time.Minute)),
// and its context stops it. Each run that deleted rows is logged at Info
// with their count, a failed run at Warn (the next run tries again).
// interval must be positive.
func (s *Store) RunCleanup(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		return fmt.Errorf("mysqlstore: %w: the cleanup interval is %v, it must be positive", store.ErrInvalidConfig, interval)
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		deleted, err := s.Cleanup(ctx)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			s.cfg.logger.WarnContext(ctx, "mysqlstore: cleanup failed; the next run tries again",
				slog.String("table", s.cfg.table.plain), slog.Int64("deleted", deleted), slog.Any("error", err))
		case deleted > 0:
			s.cfg.logger.InfoContext(ctx, "mysqlstore: cleanup deleted expired records",
				slog.String("table", s.cfg.table.plain), slog.Int64("deleted", deleted))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
		}
	}
}
