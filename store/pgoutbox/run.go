package pgoutbox

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/dedup-go/dedup/outbox"
)

// run is the relay's loop: it keeps its leases, pumps while
// there is work, backs off after a failure, cleans up now and then, and
// waits for a notification, its poll interval or its next deadline. On
// Stop it gives its buckets back and leaves.
func (r *Relay) run(ctx context.Context) {
	var carry *marks // what the last pump left to mark
	defer func() {
		if rerr := r.mark(ctx, carry); rerr != nil {
			r.failed(ctx, rerr.op, rerr.err, rerr.messages, 0)
		}
		r.leave(ctx)
	}()
	var (
		now         = time.Now()
		nextLease   = now
		nextCleanup = now.Add(r.cfg.cleanupInterval)
		retryAt     time.Time
		failures    int
	)
	fail := func(rerr *roundError) {
		if rerr == nil || ctx.Err() != nil {
			return
		}
		failures++
		backoff := r.backoff(failures)
		retryAt = time.Now().Add(backoff)
		r.failed(ctx, rerr.op, rerr.err, rerr.messages, backoff)
	}
	// flush marks what is left before the relay waits, changes its
	// leases (a bucket given back has nothing acknowledged and unmarked)
	// or cleans up.
	flush := func() {
		fail(r.mark(ctx, carry))
		carry = nil
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-r.quit:
			return
		case <-ctx.Done():
			return
		default:
		}
		now = time.Now()
		if !now.Before(nextLease) {
			flush()
			if err := r.keepLeases(ctx); err != nil && ctx.Err() == nil {
				r.failed(ctx, "lease", err, 0, 0)
			}
			nextLease = now.Add(r.cfg.lease / 3)
		}
		more := false
		if !now.Before(retryAt) && r.holdsAny() {
			until := nextLease
			if nextCleanup.Before(until) {
				until = nextCleanup
			}
			n, tried, left, rerr := r.pump(ctx, carry, until)
			carry = left
			if rerr != nil {
				fail(rerr)
			} else {
				if tried || n == 0 {
					// A pump that read messages but stopped (at the
					// renewal, or the cleanup) before it handed any over
					// tried nothing: no success, so the backoff goes on
					// doubling over the failures around it.
					failures = 0
				}
				// The next pump marks this one's messages with its first
				// fetch and reads on; the relay waits once a pump finds
				// nothing.
				more = n > 0
			}
		}
		if !now.Before(nextCleanup) {
			flush()
			r.cleanup(ctx)
			nextCleanup = time.Now().Add(r.cfg.cleanupInterval)
		}
		if more {
			continue
		}
		flush()
		wait := min(r.cfg.poll, time.Until(nextLease), time.Until(nextCleanup))
		if d := time.Until(retryAt); d > 0 {
			wait = min(wait, d)
		}
		timer.Reset(max(wait, 0)) // no stale tick survives a Reset (Go 1.23 timers)
		select {
		case <-r.quit:
			return
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-timer.C:
		}
	}
}

// backoff is the wait after the n-th failure in a row: doubling from
// MinBackoff up to MaxBackoff, less a jitter of up to a fifth.
func (r *Relay) backoff(n int) time.Duration {
	d := r.cfg.minBackoff
	for i := 1; i < n && d < r.cfg.maxBackoff; i++ {
		d *= 2
	}
	d = min(d, r.cfg.maxBackoff)
	return d - time.Duration(rand.Int64N(int64(d)/5+1))
}

// failed reports a failed step.
func (r *Relay) failed(ctx context.Context, op string, err error, messages int, backoff time.Duration) {
	r.cfg.logger.WarnContext(ctx, "pgoutbox: relay "+op+" failed", slog.String("relay", r.hex),
		slog.Int("messages", messages), slog.Duration("backoff", backoff), slog.Any("error", err))
	r.observe(ctx, outbox.Event{Kind: outbox.EventFailed, Op: op, Err: err, Messages: messages, Backoff: backoff})
}

// holdsAny reports whether the relay holds a bucket.
func (r *Relay) holdsAny() bool { return r.stats.buckets.Load() > 0 }
