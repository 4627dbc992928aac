package pgoutbox

import (
	"context"

	"github.com/dedup-go/dedup/outbox"
)

// maxCleanupStatements bounds one cleanup's statements, so that a large
// backlog is deleted over several intervals rather than in one long stop
// of the relay's loop.
const maxCleanupStatements = 10

// cleanup deletes the ids of sent messages past the retention (and the
// rows a relay of version 1 marked sent), in statements of at most
// CleanupBatch rows, and the rows of relays long gone.
func (r *Relay) cleanup(ctx context.Context) {
	deleted := 0
	for _, sql := range []string{r.o.sql.cleanup, r.o.sql.cleanV1} {
		for range maxCleanupStatements {
			cctx, cancel := r.bounded(ctx)
			tag, err := r.o.pool.Exec(cctx, sql, r.cfg.retention.Microseconds(), r.cfg.cleanupBatch)
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					r.failed(ctx, "cleanup", err, 0, 0)
				}
				return
			}
			if sql == r.o.sql.cleanup {
				deleted += int(tag.RowsAffected())
			}
			if tag.RowsAffected() < int64(r.cfg.cleanupBatch) {
				break
			}
		}
	}
	cctx, cancel := r.bounded(ctx)
	_, _ = r.o.pool.Exec(cctx, r.o.sql.prune) // the presence rows are read with their time: a stale one is harmless
	cancel()
	if deleted > 0 {
		r.stats.cleaned.Add(uint64(deleted))
		r.observe(ctx, outbox.Event{Kind: outbox.EventCleaned, Messages: deleted})
	}
}
