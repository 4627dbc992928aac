package pgoutbox

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dedup-go/dedup/outbox"
)

// pending is a message read for a round.
type pending struct {
	seq  int64
	msg  outbox.Message
	age  time.Duration // since it was written, when it was read
	read time.Time
}

// roundError is a round that failed: which step, and how many messages
// were not acknowledged.
type roundError struct {
	op       string
	err      error
	messages int
}

// marks is what a round leaves to mark: the messages the broker
// acknowledged (deleted from the outbox) and those it refused for good
// (moved to the dead table).
type marks struct {
	acked    []int64
	dead     []int64
	deadIDs  []string
	deadErrs []string
	errs     []error
	oldest   time.Duration // the largest age at acknowledgement
	start    time.Time     // when the round's batch was read
}

func (m *marks) empty() bool { return m == nil || len(m.acked)+len(m.dead) == 0 }

// marking is the statement that marks a round's messages, sent with the
// next fetch: its commit, the last step, completes in the background
// while the next round publishes.
type marking struct {
	m    *marks
	done chan error
}

// round marks what the previous round left (m) and reads the next batch
// in one statement batch, one round trip, then publishes the batch and
// returns what it leaves to mark, and how many messages it read.
//
// The mark and the fetch run in one transaction: the fetch sees the
// marked rows gone, so it never reads them again, and the transaction's
// commit (the mark's durability) completes while this round publishes.
// One mark is in flight at a time: the next round waits for it first. A
// mark that fails leaves its messages unsent, to be published again, the
// same copies a crash leaves.
//
// A message goes out only once every earlier message of its ordering key
// was acknowledged; a message the broker did not acknowledge holds its
// key's later messages back until a later round (see publishBatch).
// Messages are marked sent only after their acknowledgement, so a crash
// between the two publishes them again, with the same ids.
func (r *Relay) round(ctx context.Context, m *marks) (int, *marks, *roundError) {
	if rerr := r.settle(ctx); rerr != nil {
		return 0, m, rerr
	}
	batch, err := r.markAndFetch(ctx, m)
	if err != nil {
		if m.empty() {
			return 0, nil, &roundError{op: "fetch", err: err}
		}
		// The marks were in the failed transaction: their messages are
		// published again.
		return 0, nil, &roundError{op: "mark", err: err, messages: m.count()}
	}
	if len(batch) == 0 {
		return 0, nil, nil
	}
	out := r.publishBatch(ctx, batch)
	out.marks.start = batch[0].read
	if out.failed > 0 {
		r.stats.failed.Add(uint64(out.failed))
		err := out.lastErr
		if err == nil {
			err = ctx.Err()
		}
		return len(batch), out.marks, &roundError{op: "publish", err: err, messages: out.failed}
	}
	return len(batch), out.marks, nil
}

func (m *marks) count() int {
	if m == nil {
		return 0
	}
	return len(m.acked) + len(m.dead)
}

// markAndFetch sends, in one statement batch (one transaction), the
// marks of m, then the fetch of the next batch, and reads the batch; the
// transaction's commit is awaited in the background (r.inflight), or at
// once when the batch is empty.
func (r *Relay) markAndFetch(ctx context.Context, m *marks) ([]pending, error) {
	b := &pgx.Batch{}
	marks := r.queueMarks(b, m)
	b.Queue(r.o.sql.fetch, r.heldList32(), r.cfg.batch, r.id)
	if !m.empty() {
		// The marks are carried out even when the relay is being
		// stopped hard: what the broker acknowledged and is not marked
		// is published again.
		ctx = context.WithoutCancel(ctx)
	}
	cctx, cancel := r.bounded(ctx)
	br := r.o.pool.SendBatch(cctx, b)
	batch, err := r.readFetch(br, marks)
	if err != nil || len(batch) == 0 {
		cerr := br.Close()
		cancel()
		if err == nil && cerr != nil {
			err = cerr
		}
		if err == nil {
			r.marked(ctx, m)
		}
		return nil, err
	}
	// The commit comes after the rows: await it while the batch is
	// published. The statement context stays live until then.
	inflight := &marking{m: m, done: make(chan error, 1)}
	go func() {
		defer cancel()
		inflight.done <- br.Close()
	}()
	r.inflight = inflight
	return batch, nil
}

// queueMarks queues the statements that mark m's messages, and returns
// how many.
//
// The transaction that marks does not wait for its commit to be flushed
// to disk (synchronous_commit off, for it alone): a database crash may
// lose the marks of its last moments, whose messages are then published
// again: the copies a relay's crash leaves, no loss. Waiting would cost a
// disk flush (a millisecond or more) per round.
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

// readFetch reads the results of the marks statements, then the batch.
func (r *Relay) readFetch(br pgx.BatchResults, marks int) ([]pending, error) {
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
		p.read = now
		out = append(out, p)
	}
	return out, rows.Err()
}

// settle waits for the mark in flight, and reports it: published (and
// dead), or failed. It returns the failure, whose messages are published
// again later.
func (r *Relay) settle(ctx context.Context) *roundError {
	f := r.inflight
	if f == nil {
		return nil
	}
	r.inflight = nil
	// The commit runs on a context of its own, bounded by the statement
	// timeout: a hard stop does not abandon it.
	if err := <-f.done; err != nil {
		return &roundError{op: "mark", err: err, messages: f.m.count()}
	}
	r.marked(ctx, f.m)
	return nil
}

// mark marks m alone (no fetch), and waits for its commit: before the
// relay waits, changes its leases or stops. It runs even when the relay
// is being stopped hard (bounded by the statement timeout): what the
// broker acknowledged and is not marked is published again.
func (r *Relay) mark(ctx context.Context, m *marks) *roundError {
	if rerr := r.settle(ctx); rerr != nil {
		return rerr
	}
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
