package mysqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/delivery"
)

// queue is an at-least-once broker in a table of the test's database,
// which consumers in several processes share: a delivery taken by a
// consumer becomes visible again after the visibility timeout unless it is
// acked, so a consumer killed mid-delivery loses nothing and duplicates
// happen. Taking a delivery runs under READ COMMITTED (its transaction's
// own level, whatever the pool's), so that it locks no gap: under
// REPEATABLE READ, InnoDB's default, the next-key locks of 32 consumers
// polling the index of visible_at kept an INSERT of 1,000 deliveries
// waiting for minutes (each of its rows waits behind a gap lock, released
// and taken again by the next poll).
type queue struct {
	db         *sql.DB
	visibility time.Duration
}

// newQueue creates the queue's tables in the test's database.
func newQueue(t testing.TB, d *testDB, db *sql.DB, visibility time.Duration) *queue {
	t.Helper()
	d.exec(t, "CREATE TABLE deliveries (id BIGINT AUTO_INCREMENT PRIMARY KEY, payment_id VARCHAR(64) NOT NULL, visible_at DATETIME(6) NOT NULL, KEY (visible_at)) ENGINE=InnoDB")
	d.exec(t, "CREATE TABLE dead_letters (payment_id VARCHAR(64) NOT NULL, reason VARCHAR(64) NOT NULL) ENGINE=InnoDB")
	return &queue{db: db, visibility: visibility}
}

// publish enqueues one delivery per id, in one statement.
func (q *queue) publish(ctx context.Context, ids []string) error {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	_, err := q.db.ExecContext(ctx, "INSERT INTO deliveries (payment_id, visible_at) VALUES "+
		strings.TrimSuffix(strings.Repeat("(?, UTC_TIMESTAMP(6)), ", len(ids)), ", "), args...)
	return err
}

// take returns a visible delivery, hidden for the visibility timeout, or
// ok false when there is none.
func (q *queue) take(ctx context.Context) (id int64, payment string, ok bool, err error) {
	tx, err := q.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, "", false, err
	}
	defer func() { _ = tx.Rollback() }()
	err = tx.QueryRowContext(ctx, "SELECT id, payment_id FROM deliveries WHERE visible_at <= UTC_TIMESTAMP(6) ORDER BY visible_at, id LIMIT 1 FOR UPDATE SKIP LOCKED").Scan(&id, &payment)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, "", false, tx.Commit()
	}
	if err != nil {
		return 0, "", false, err
	}
	if _, err := tx.ExecContext(ctx, "UPDATE deliveries SET visible_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND WHERE id = ?", q.visibility.Microseconds(), id); err != nil {
		return 0, "", false, err
	}
	return id, payment, true, tx.Commit()
}

// settle carries out a decision for a delivery.
func (q *queue) settle(ctx context.Context, id int64, payment string, d delivery.Decision) error {
	var err error
	switch d.Action {
	case delivery.Ack:
		_, err = q.db.ExecContext(ctx, "DELETE FROM deliveries WHERE id = ?", id)
	case delivery.Retry:
		// Delays are capped so that a test's retries come quickly.
		delay := min(d.Delay, 500*time.Millisecond)
		_, err = q.db.ExecContext(ctx, "UPDATE deliveries SET visible_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND WHERE id = ?", delay.Microseconds(), id)
	case delivery.DeadLetter:
		if _, err = q.db.ExecContext(ctx, "INSERT INTO dead_letters (payment_id, reason) VALUES (?, ?)", payment, string(d.Reason)); err == nil {
			_, err = q.db.ExecContext(ctx, "DELETE FROM deliveries WHERE id = ?", id)
		}
	}
	return err
}

// pending counts the deliveries not acked yet.
func (q *queue) pending(ctx context.Context) (int, error) {
	var n int
	err := q.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM deliveries").Scan(&n)
	return n, err
}

// consume runs workers goroutines that take deliveries and hand them to
// rcv until ctx ends. Errors of the queue itself are retried after a
// pause; the first one is returned.
func (q *queue) consume(ctx context.Context, workers int, rcv *dedup.Receiver[payment, receipt]) error {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				if err := q.consumeOne(ctx, rcv); err != nil && ctx.Err() == nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					pause(ctx, 5*time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}

func (q *queue) consumeOne(ctx context.Context, rcv *dedup.Receiver[payment, receipt]) error {
	id, p, ok, err := q.take(ctx)
	if err != nil {
		return fmt.Errorf("take: %w", err)
	}
	if !ok {
		pause(ctx, 5*time.Millisecond+rand.N(5*time.Millisecond))
		return nil
	}
	res, herr := rcv.Handle(ctx, payment{ID: p, Amount: 1})
	if ctx.Err() != nil {
		return nil // shutdown: the delivery comes back after its visibility timeout
	}
	if err := q.settle(ctx, id, p, adapter.Bind(rcv).Decide(res, herr)); err != nil {
		return fmt.Errorf("settle: %w", err)
	}
	return nil
}

// pause sleeps d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
