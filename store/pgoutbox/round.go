package pgoutbox

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/dedup-go/dedup/outbox"
)

// pending is a message a pump read.
type pending struct {
	seq  int64
	msg  outbox.Message
	age  time.Duration // since it was written, when it was read
	read time.Time

	call    *call // the AckPublisher's call that carries it
	settled bool  // acknowledged, dead or failed: a later report is ignored
}

// roundError is a round that failed: which step, and how many messages
// were not acknowledged.
type roundError struct {
	op       string
	err      error
	messages int
}

// marks is what a pump has to mark: the messages the broker
// acknowledged (deleted from the outbox) and those it refused for good
// (moved to the dead table).
type marks struct {
	acked    []int64
	dead     []int64
	deadIDs  []string
	deadErrs []string
	errs     []error
	oldest   time.Duration // the largest age at acknowledgement
	start    time.Time     // when the first of them was read
}

func (m *marks) empty() bool { return m == nil || len(m.acked)+len(m.dead) == 0 }

func (m *marks) count() int {
	if m == nil {
		return 0
	}
	return len(m.acked) + len(m.dead)
}

// markAndFetch marks m's messages and reads the next batch, in one
// statement batch (one round trip, one transaction): the first limit
// unsent messages by seq of the buckets the relay holds, less those of
// exclude (read before and not settled), up to a batch.
func (r *Relay) markAndFetch(ctx context.Context, m *marks, limit int, exclude map[int64]bool) ([]*pending, error) {
	b := &pgx.Batch{}
	marks := r.queueMarks(b, m)
	b.Queue(r.o.sql.fetch, r.heldList32(), limit, r.id)
	if marks > 0 {
		// The marks are carried out even when the relay is being
		// stopped hard: what the broker acknowledged and is not marked
		// is published again.
		ctx = context.WithoutCancel(ctx)
	}
	cctx, cancel := r.bounded(ctx)
	defer cancel()
	br := r.o.pool.SendBatch(cctx, b)
	batch, err := r.readFetch(br, marks, exclude)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	return batch, nil
}

// queueMarks queues the statements that mark m's messages, and returns
// how many.
//
// The transaction that marks does not wait for its commit to be flushed
// to disk (synchronous_commit off, for it alone): a database crash may
// lose the marks of its last moments, whose messages are then published
// again: the copies a relay's crash leaves, no loss. Waiting would cost a
// disk flush (a millisecond or more) per fetch.
func (r *Relay) queueMarks(b *pgx.Batch, m *marks) int {
	if m.empty() {
		return 0
	}
	b.Queue("SET LOCAL synchronous_commit = off")
	n := 1
	if len(m.dead) > 0 {
		b.Queue(r.o.sql.bury, m.dead, m.deadErrs)
		n++
	}
	if len(m.acked) > 0 {
		b.Queue(r.o.sql.mark, m.acked)
		n++
	}
	return n
}

// readFetch reads the results of the marks statements, then the batch,
// less the messages of exclude, up to a batch.
func (r *Relay) readFetch(br pgx.BatchResults, marks int, exclude map[int64]bool) ([]*pending, error) {
	for range marks {
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	now := time.Now()
	var (
		out []*pending
		age pgtype.Interval
	)
	for rows.Next() {
		var p pending
		if err := rows.Scan(&p.seq, &p.msg.ID, &p.msg.Destination, &p.msg.OrderingKey, &p.msg.Body, &p.msg.Header, &age); err != nil {
			return nil, err
		}
		if exclude[p.seq] || len(out) == r.cfg.batch {
			continue
		}
		p.age = intervalDuration(age)
		p.read = now
		out = append(out, &p)
	}
	return out, rows.Err()
}

// intervalDuration is the duration of an interval that a difference of
// two timestamps gives: days of 24 hours and microseconds (no months).
func intervalDuration(i pgtype.Interval) time.Duration {
	return time.Duration(i.Days)*24*time.Hour + time.Duration(i.Microseconds)*time.Microsecond
}

// mark marks m alone (no fetch), and waits for its commit: before the
// relay waits, changes its leases or stops. It runs even when the relay
// is being stopped hard (bounded by the statement timeout): what the
// broker acknowledged and is not marked is published again.
func (r *Relay) mark(ctx context.Context, m *marks) *roundError {
	if m.empty() {
		return nil
	}
	b := &pgx.Batch{}
	r.queueMarks(b, m)
	cctx, cancel := r.bounded(context.WithoutCancel(ctx))
	defer cancel()
	if err := r.o.pool.SendBatch(cctx, b).Close(); err != nil {
		return &roundError{op: "mark", err: err, messages: m.count()}
	}
	r.marked(ctx, m)
	return nil
}

// marked reports m's messages marked: published, and dead.
func (r *Relay) marked(ctx context.Context, m *marks) {
	if m.empty() {
		return
	}
	d := time.Since(m.start)
	if len(m.acked) > 0 {
		r.stats.published.Add(uint64(len(m.acked)))
		r.stats.rounds.Add(1)
		r.observe(ctx, outbox.Event{Kind: outbox.EventPublished, Messages: len(m.acked), Duration: d, Lag: m.oldest})
	}
	if len(m.dead) > 0 {
		r.stats.dead.Add(uint64(len(m.dead)))
		err := errors.Join(m.errs...)
		r.cfg.logger.ErrorContext(ctx, "pgoutbox: messages refused for good, set aside as dead", slog.String("relay", r.hex),
			slog.Any("ids", m.deadIDs), slog.Any("error", err))
		r.observe(ctx, outbox.Event{Kind: outbox.EventDead, Messages: len(m.dead), IDs: m.deadIDs, Err: err, Duration: d})
	}
}
