package pgoutbox

import (
	"context"
	"fmt"
	"time"

	"github.com/dedup-go/dedup/outbox"
)

// pending is a message read for a round.
type pending struct {
	seq int64
	msg outbox.Message
	age time.Duration // since it was written, when it was read
}

// roundError is a round that failed: which step, and how many messages
// were not acknowledged.
type roundError struct {
	op       string
	err      error
	messages int
}

// round reads up to a batch of the unsent messages of the buckets the
// relay holds, publishes them and marks sent those the broker
// acknowledged. It returns how many it read.
//
// A message goes out only once every earlier message of its ordering key
// was acknowledged: the batch is published in waves, each holding at
// most one message per key (the first not yet sent), so a wave can be in
// flight all at once. A message the broker did not acknowledge holds its
// key's later messages back until the next round, which starts from it
// again. Messages are marked sent only after their acknowledgement, so a
// crash between the two publishes them again, with the same ids.
func (r *Relay) round(ctx context.Context) (int, *roundError) {
	batch, err := r.fetch(ctx)
	if err != nil {
		return 0, &roundError{op: "fetch", err: err}
	}
	if len(batch) == 0 {
		return 0, nil
	}
	start := time.Now()
	var (
		acked   []int64
		oldest  time.Duration
		lastErr error
		blocked = map[string]bool{} // keys whose message failed this round
	)
	rest := batch
	for len(rest) > 0 && ctx.Err() == nil {
		var wave, later []pending
		inWave := map[string]bool{}
		for _, p := range rest {
			k := p.msg.OrderingKey
			switch {
			case k != "" && blocked[k]:
				// Not tried: an earlier message of its key failed.
			case k != "" && inWave[k]:
				later = append(later, p)
			default:
				wave = append(wave, p)
				if k != "" {
					inWave[k] = true
				}
			}
		}
		rest = later
		if len(wave) == 0 {
			break
		}
		err := r.publish(ctx, wave)
		ok := outbox.Acknowledged(err, len(wave))
		n := 0
		for i, p := range wave {
			if ok[i] {
				acked = append(acked, p.seq)
				oldest = max(oldest, p.age)
				n++
				continue
			}
			if p.msg.OrderingKey != "" {
				blocked[p.msg.OrderingKey] = true
			}
		}
		if err != nil {
			lastErr = err
		}
		if n == 0 {
			// Nothing went through (the broker is down): the rest would
			// fail alike. Back off.
			break
		}
	}
	if len(acked) > 0 {
		if err := r.mark(ctx, acked); err != nil {
			return len(batch), &roundError{op: "mark", err: err, messages: len(acked)}
		}
		r.stats.published.Add(uint64(len(acked)))
		r.stats.rounds.Add(1)
		r.observe(ctx, outbox.Event{Kind: outbox.EventPublished, Messages: len(acked), Duration: time.Since(start), Lag: oldest + time.Since(start)})
	}
	if failed := len(batch) - len(acked); failed > 0 {
		r.stats.failed.Add(uint64(failed))
		if lastErr == nil {
			lastErr = ctx.Err()
		}
		return len(batch), &roundError{op: "publish", err: lastErr, messages: failed}
	}
	return len(batch), nil
}

// publish calls the publisher, bounded by PublishTimeout, recovering a
// panic as an error.
func (r *Relay) publish(ctx context.Context, wave []pending) (err error) {
	msgs := make([]outbox.Message, len(wave))
	for i, p := range wave {
		msgs[i] = p.msg
	}
	pctx, cancel := context.WithTimeout(ctx, r.cfg.publishTimeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("pgoutbox: the publisher panicked: %v", p)
		}
	}()
	return r.pub.Publish(pctx, msgs)
}

// fetch reads the next batch.
func (r *Relay) fetch(ctx context.Context) ([]pending, error) {
	cctx, cancel := r.bounded(ctx)
	defer cancel()
	rows, err := r.o.pool.Query(cctx, r.o.sql.fetch, r.id, r.cfg.batch)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []pending
	for rows.Next() {
		var (
			p   pending
			age int64
		)
		if err := rows.Scan(&p.seq, &p.msg.ID, &p.msg.Destination, &p.msg.OrderingKey, &p.msg.Body, &p.msg.Header, &age); err != nil {
			return nil, err
		}
		p.age = time.Duration(age) * time.Microsecond
		out = append(out, p)
	}
	return out, rows.Err()
}

// mark marks seqs sent. It runs even when the relay is being stopped
// hard (bounded by the statement timeout): what the broker acknowledged
// and is not marked is published again.
func (r *Relay) mark(ctx context.Context, seqs []int64) error {
	cctx, cancel := r.bounded(context.WithoutCancel(ctx))
	defer cancel()
	_, err := r.o.pool.Exec(cctx, r.o.sql.mark, seqs)
	return err
}
