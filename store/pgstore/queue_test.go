package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/delivery"
)

// queue is an at-least-once broker in a table of the test's schema, which
// consumers in several processes share: a delivery taken by a consumer
// becomes visible again after the visibility timeout unless it is acked,
// so a consumer killed mid-delivery loses nothing and duplicates happen.
type queue struct {
	pool       *pgxpool.Pool
	table      string // deliveries
	dead       string // dead letters
	visibility time.Duration
}

func newQueue(t testing.TB, db *testDB, visibility time.Duration) *queue {
	t.Helper()
	q := &queue{pool: db.pool, table: db.table("deliveries"), dead: db.table("dead_letters"), visibility: visibility}
	db.exec(t, "CREATE TABLE "+q.table+" (id bigserial PRIMARY KEY, payment_id text NOT NULL, visible_at timestamptz NOT NULL DEFAULT clock_timestamp())")
	db.exec(t, "CREATE TABLE "+q.dead+" (payment_id text NOT NULL, reason text NOT NULL)")
	return q
}

// attach returns the queue's tables on another pool (another process).
func attach(pool *pgxpool.Pool, schema string, visibility time.Duration) *queue {
	return &queue{pool: pool, table: schema + ".deliveries", dead: schema + ".dead_letters", visibility: visibility}
}

// publish enqueues one delivery per id, in one statement.
func (q *queue) publish(ctx context.Context, ids []string) error {
	_, err := q.pool.Exec(ctx, "INSERT INTO "+q.table+" (payment_id) SELECT unnest($1::text[])", ids)
	return err
}

// take returns a visible delivery, hidden for the visibility timeout, or
// ok false when there is none.
func (q *queue) take(ctx context.Context) (id int64, payment string, ok bool, err error) {
	err = q.pool.QueryRow(ctx, `UPDATE `+q.table+` SET visible_at = clock_timestamp() + $1::bigint * interval '1 millisecond'
WHERE id = (SELECT id FROM `+q.table+` WHERE visible_at <= clock_timestamp() ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id, payment_id`, q.visibility.Milliseconds()).Scan(&id, &payment)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, "", false, nil
	}
	return id, payment, err == nil, err
}

// settle carries out a decision for a delivery.
func (q *queue) settle(ctx context.Context, id int64, payment string, d delivery.Decision) error {
	var err error
	switch d.Action {
	case delivery.Ack:
		_, err = q.pool.Exec(ctx, "DELETE FROM "+q.table+" WHERE id = $1", id)
	case delivery.Retry:
		// Delays are capped so that a test's retries come quickly.
		delay := min(d.Delay, 500*time.Millisecond)
		_, err = q.pool.Exec(ctx, "UPDATE "+q.table+" SET visible_at = clock_timestamp() + $2::bigint * interval '1 millisecond' WHERE id = $1", id, delay.Milliseconds())
	case delivery.DeadLetter:
		_, err = q.pool.Exec(ctx, "WITH d AS (DELETE FROM "+q.table+" WHERE id = $1) INSERT INTO "+q.dead+" (payment_id, reason) VALUES ($2, $3)", id, payment, string(d.Reason))
	}
	return err
}

// pending counts the deliveries not acked yet.
func (q *queue) pending(ctx context.Context) (int, error) {
	var n int
	err := q.pool.QueryRow(ctx, "SELECT count(*) FROM "+q.table).Scan(&n)
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
