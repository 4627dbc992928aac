package pgoutbox

import (
	"context"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// listen holds a connection of its own (not the pool's: a LISTEN outlives
// any statement) that LISTENs on the outbox's channel, and wakes the run
// loop when a message of a bucket the relay holds was committed. When the
// connection fails it connects again, after a backoff; meanwhile the
// loop's polling finds the messages. After each LISTEN it wakes the loop
// once, since a notification sent while nobody listened is lost.
func (r *Relay) listen(ctx context.Context) {
	if !r.o.cfg.notify {
		return
	}
	failures := 0
	for ctx.Err() == nil {
		err := r.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		failures++
		backoff := r.backoff(failures)
		r.failed(ctx, "listen", err, 0, backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// listenOnce connects, listens and waits for notifications until the
// connection fails or ctx ends.
func (r *Relay) listenOnce(ctx context.Context) error {
	cctx, cancel := r.bounded(ctx)
	conn, err := pgx.ConnectConfig(cctx, r.o.pool.Config().ConnConfig.Copy())
	cancel()
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := r.bounded(context.WithoutCancel(ctx))
		defer cancel()
		_ = conn.Close(cctx)
	}()
	cctx, cancel = r.bounded(ctx)
	_, err = conn.Exec(cctx, "LISTEN "+pgx.Identifier{r.o.cfg.names.plain}.Sanitize())
	cancel()
	if err != nil {
		return err
	}
	r.wakeUp()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if b, err := strconv.Atoi(n.Payload); err != nil || r.holds(b) {
			r.wakeUp()
		}
	}
}
