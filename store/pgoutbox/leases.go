package pgoutbox

import (
	"context"
	"math/rand/v2"
	"slices"

	"github.com/dedup-go/dedup/outbox"
)

// keepLeases is the relay's share-keeping, every third of a lease: it
// says it is alive, renews the leases it holds (finding those another
// relay took), and gives back or takes buckets so that it holds its fair
// share: the bucket count divided by the relays alive, rounded up.
// Between rounds, so no publish of a bucket given back is in flight.
func (r *Relay) keepLeases(ctx context.Context) error {
	lease := r.cfg.lease.Microseconds()
	cctx, cancel := r.bounded(ctx)
	defer cancel()
	var relays int
	if err := r.o.pool.QueryRow(cctx, r.o.sql.alive, r.id, lease).Scan(&relays); err != nil {
		return err
	}
	before := r.heldList()
	now, err := r.buckets(cctx, r.o.sql.renew, r.id, lease)
	if err != nil {
		return err
	}
	var ev outbox.Event
	for _, b := range before {
		if !slices.Contains(now, b) {
			ev.Lost = append(ev.Lost, b)
		}
	}
	share := (r.o.cfg.buckets + relays - 1) / max(relays, 1)
	switch {
	case len(now) > share:
		rand.Shuffle(len(now), func(i, j int) { now[i], now[j] = now[j], now[i] })
		give := now[share:]
		if _, err := r.o.pool.Exec(cctx, r.o.sql.release, r.id, give); err != nil {
			return err
		}
		ev.Released = slices.Clone(give)
		now = now[:share]
	case len(now) < share:
		got, err := r.buckets(cctx, r.o.sql.acquire, r.id, lease, share-len(now))
		if err != nil {
			return err
		}
		ev.Acquired = got
		now = append(now, got...)
	}
	r.setHeld(now)
	if len(ev.Lost)+len(ev.Released)+len(ev.Acquired) > 0 {
		slices.Sort(ev.Acquired)
		slices.Sort(ev.Released)
		slices.Sort(ev.Lost)
		ev.Kind = outbox.EventLeases
		r.observe(ctx, ev)
		if len(ev.Acquired) > 0 {
			r.wakeUp()
		}
	}
	return nil
}

// buckets runs a statement that returns buckets.
func (r *Relay) buckets(ctx context.Context, sql string, args ...any) ([]int, error) {
	rows, err := r.o.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var b int
		if err := rows.Scan(&b); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, rows.Err()
}

// setHeld records the buckets held, for the listener and Stats.
func (r *Relay) setHeld(buckets []int) {
	held := make([]bool, r.o.cfg.buckets)
	for _, b := range buckets {
		if b >= 0 && b < len(held) {
			held[b] = true
		}
	}
	r.held.Store(&held)
	r.stats.buckets.Store(int64(len(buckets)))
}

// heldList returns the buckets held.
func (r *Relay) heldList() []int {
	var out []int
	for b, h := range *r.held.Load() {
		if h {
			out = append(out, b)
		}
	}
	return out
}

// heldList32 returns the buckets held, as the fetch takes them.
func (r *Relay) heldList32() []int32 {
	var out []int32
	for b, h := range *r.held.Load() {
		if h {
			out = append(out, int32(b))
		}
	}
	return out
}

// holds reports whether the relay holds bucket b.
func (r *Relay) holds(b int) bool {
	held := *r.held.Load()
	return b >= 0 && b < len(held) && held[b]
}

// leave gives every bucket back and ends the relay's presence, so the
// others take its buckets at once: on Stop, and after a hard stop too
// (bounded by the statement timeout).
func (r *Relay) leave(ctx context.Context) {
	cctx, cancel := r.bounded(context.WithoutCancel(ctx))
	defer cancel()
	held := r.heldList()
	if len(held) > 0 {
		if _, err := r.o.pool.Exec(cctx, r.o.sql.release, r.id, held); err != nil {
			r.failed(ctx, "lease", err, 0, 0)
		} else {
			r.observe(ctx, outbox.Event{Kind: outbox.EventLeases, Released: held})
		}
	}
	r.setHeld(nil)
	if _, err := r.o.pool.Exec(cctx, r.o.sql.leave, r.id); err != nil && len(held) == 0 {
		r.failed(ctx, "lease", err, 0, 0)
	}
}
