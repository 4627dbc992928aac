package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/deduptest"
	"github.com/dedup-go/dedup/internal/pgtest"
	"github.com/dedup-go/dedup/outbox"
	"github.com/dedup-go/dedup/store/memstore"
	"github.com/dedup-go/dedup/store/pgoutbox"
	"github.com/dedup-go/dedup/store/pgoutbox/internal/relaytest"
	"github.com/dedup-go/dedup/store/pgstore"
)

// e2eBroker is a broker of the end-to-end tests (runE2E), from the
// test's side; its e2eSide is what the processes use.
type e2eBroker interface {
	e2eSide
	// child returns what a process needs to make its e2eSide
	// (childSide).
	child() (kind, addr, prefix string)
	// setup creates the test's queues, topics or streams (removed when t
	// ends): orders in, events out, dead letters.
	setup(t *testing.T)
	// publish publishes the orders, waiting for the broker's
	// acknowledgements.
	publish(t *testing.T, orders [][]byte)
	// downstreamKey is the downstream receiver's key: the outgoing
	// message's id, where the broker's publisher put it.
	downstreamKey() dedup.KeyFunc[*dedup.Message[e2eEvent]]
	// startDownstream consumes the events with rcv, in the test's process,
	// until t ends.
	startDownstream(t *testing.T, rcv *dedup.Receiver[*dedup.Message[e2eEvent], struct{}])
	// pending reports whether the orders and the events have all been
	// handled (as far as the broker tells), and what is left when not.
	pending(t *testing.T) (bool, string)
	// idle is called once pending reports nothing left and the consumer
	// process was killed: it reports whether no copy is still in flight,
	// where pending cannot tell (then the consumer is started again).
	idle(t *testing.T) bool
	// deadLetters counts the orders dead-lettered.
	deadLetters(t *testing.T) int
	// output returns the events as the broker holds them: each ordering
	// key's in the order the broker received them.
	output(t *testing.T) []stored
}

// e2eParams are the sizes of an end-to-end run.
type e2eParams struct {
	orders, duplicates, customers, kills int
}

// runE2E: orders (and copies of some) go through a consumer, on b, whose
// handler, in one transaction with the record's completion, counts the
// order on its customer's row, writes the order and two messages
// (created, confirmed: the customer is their ordering key); two relays
// publish them to b. The consumer and the relays are processes of their
// own, killed with SIGKILL at random moments and started again, and the
// PostgreSQL server (a test's own) is killed and started again once. A
// downstream consumer with dedup, keyed on the messages' ids, counts
// their effects: every outgoing message's effect happened exactly once,
// none is lost, and the first copies of each customer's messages are in
// the order their transactions committed.
func runE2E(t *testing.T, b e2eBroker, p e2eParams) {
	started := time.Now()
	b.setup(t)
	srv := pgtest.Start(t)
	pool := relaytest.Connect(t, srv.DSN(), 8)
	ctx := t.Context()
	_, err := pgstore.New(ctx, pool, &pgstore.Options{Migrate: true, Logger: relaytest.Quiet})
	require.NoError(t, err)
	_, err = pgoutbox.New(ctx, pool, &pgoutbox.Options{Migrate: true, Buckets: 16, Logger: relaytest.Quiet})
	require.NoError(t, err)
	// Marking a message sent deletes its row: a trigger logs each
	// message's seq, for the order check at the end.
	_, err = pool.Exec(ctx, `CREATE TABLE outbox_log (id text PRIMARY KEY, seq bigint NOT NULL);
CREATE FUNCTION log_outbox() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO outbox_log VALUES (NEW.id, NEW.seq); RETURN NULL; END $$;
CREATE TRIGGER log_outbox AFTER INSERT ON dedup_outbox FOR EACH ROW EXECUTE FUNCTION log_outbox()`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `CREATE TABLE customers (id text PRIMARY KEY, orders int NOT NULL DEFAULT 0);
CREATE TABLE orders (id text NOT NULL, customer text NOT NULL);
INSERT INTO customers (id) SELECT 'c-' || lpad(i::text, 3, '0') FROM generate_series(0, `+fmt.Sprint(p.customers-1)+`) i`)
	require.NoError(t, err)

	// The downstream consumer, in this process.
	var effects deduptest.Effects
	down, err := memstore.New(nil)
	require.NoError(t, err)
	key := b.downstreamKey()
	rcv, err := dedup.NewReceiver(down, key, func(ctx context.Context, m *dedup.Message[e2eEvent]) (struct{}, error) {
		id, err := key(m)
		if err != nil {
			return struct{}{}, err
		}
		effects.Record(id)
		return struct{}{}, nil
	}, &dedup.Config{Namespace: "downstream", Logger: relaytest.Quiet})
	require.NoError(t, err)
	b.startDownstream(t, rcv)

	// The orders, with copies, published before the processes start.
	var deliveries []e2eOrder
	for i := range p.orders {
		deliveries = append(deliveries, e2eOrder{ID: fmt.Sprintf("o-%04d", i), Customer: fmt.Sprintf("c-%03d", rand.IntN(p.customers))})
	}
	for range p.duplicates {
		deliveries = append(deliveries, deliveries[rand.IntN(p.orders)])
	}
	rand.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })
	bodies := make([][]byte, len(deliveries))
	for i, o := range deliveries {
		bodies[i], _ = json.Marshal(o)
	}
	b.publish(t, bodies)

	consumer := startChild(t, "consumer", srv.DSN(), b)
	relays := []*child{startChild(t, "relay", srv.DSN(), b), startChild(t, "relay", srv.DSN(), b)}
	kills := map[string]int{}
	for i := range p.kills {
		time.Sleep(time.Duration(200+rand.IntN(800)) * time.Millisecond)
		if i == p.kills/2 {
			t.Logf("PostgreSQL killed with %d orders written, %d messages sent", count(t, pool, "SELECT count(*) FROM orders"),
				count(t, pool, sentSQL))
			srv.Kill()
			time.Sleep(time.Duration(200+rand.IntN(500)) * time.Millisecond)
			srv.Start()
		}
		if i%2 == 0 {
			consumer.kill()
			kills["consumer"]++
			consumer = startChild(t, "consumer", srv.DSN(), b)
		} else {
			k := rand.IntN(len(relays))
			relays[k].kill()
			kills["relay"]++
			relays[k] = startChild(t, "relay", srv.DSN(), b)
		}
	}
	processed := count(t, pool, "SELECT count(*) FROM orders")
	sent := count(t, pool, sentSQL)
	t.Logf("%d kills in %v; %d orders written and %d messages sent by then", p.kills, time.Since(started), processed, sent)

	// Everything settles: the orders handled, the messages sent, and
	// handled downstream.
	ids := make([]string, 0, 2*p.orders)
	for i := range p.orders {
		for _, event := range []string{"created", "confirmed"} {
			ids = append(ids, outbox.MessageID(e2eNamespace+":"+fmt.Sprintf("o-%04d", i), event))
		}
	}
	within := time.Now().Add(90 * time.Second)
	for {
		done, state := b.pending(t)
		if done && count(t, pool, "SELECT count(*) FROM dedup_outbox") == 0 {
			consumer.kill()
			if b.idle(t) {
				break
			}
			consumer = startChild(t, "consumer", srv.DSN(), b)
		}
		if !time.Now().Before(within) {
			// The consumer process reports its state and goroutines (printed
			// with its stderr), and the broker what it knows.
			consumer.report()
			if d, ok := b.(interface{ diagnose(*testing.T) string }); ok {
				state += "\n" + d.diagnose(t)
			}
			require.Fail(t, "not settled", "%s; %d effects of %d", state, effects.Len(), len(ids))
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The incoming side: each order written once, nothing dead-lettered.
	require.Equal(t, p.orders, count(t, pool, "SELECT count(*) FROM orders"), "orders written")
	require.Equal(t, p.orders, count(t, pool, "SELECT count(DISTINCT id) FROM orders"))
	require.Equal(t, p.orders, count(t, pool, "SELECT sum(orders) FROM customers"), "orders counted on customers")
	require.Zero(t, b.deadLetters(t), "dead letters")

	// The outgoing side: each message's effect once, downstream.
	require.Equal(t, 2*p.orders, count(t, pool, "SELECT count(*) FROM outbox_log"), "messages written")
	require.Equal(t, 2*p.orders, count(t, pool, "SELECT count(*) FROM dedup_outbox_ids"), "ids kept")
	require.Zero(t, count(t, pool, "SELECT count(*) FROM dedup_outbox_dead"), "messages set aside")
	effects.ExactlyOnce(ids...).Check(t)

	// The order: each customer's first copies in the order of the outbox.
	seqOf := map[string]int64{}
	rows, err := pool.Query(ctx, "SELECT id, seq FROM outbox_log")
	require.NoError(t, err)
	for rows.Next() {
		var id string
		var seq int64
		require.NoError(t, rows.Scan(&id, &seq))
		seqOf[id] = seq
	}
	require.NoError(t, rows.Err())
	msgs := b.output(t)
	last := map[string]int64{}
	for _, m := range firstOccurrences(msgs) {
		var ev e2eEvent
		require.NoError(t, json.Unmarshal([]byte(m.body), &ev))
		seq, ok := seqOf[m.id]
		require.True(t, ok, "message %s is not in the outbox", m.id)
		require.Greater(t, seq, last[ev.Customer], "customer %s: message %s (%s of %s) came after a later one", ev.Customer, m.id, ev.Event, ev.Order)
		last[ev.Customer] = seq
	}
	require.Len(t, firstOccurrences(msgs), len(ids), "distinct messages the broker holds")
	t.Logf("kills %v and one PostgreSQL restart; %d orders and %d copies; %d messages on the broker for %d outgoing (%d copies absorbed downstream); %v in all",
		kills, p.orders, p.duplicates, len(msgs), len(ids), len(msgs)-len(ids), time.Since(started))
}

// sentSQL counts the messages sent: written, and no longer in the outbox.
const sentSQL = "SELECT (SELECT count(*) FROM outbox_log) - (SELECT count(*) FROM dedup_outbox)"

// count returns the single integer sql answers.
func count(t testing.TB, pool *pgxpool.Pool, sql string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), sql).Scan(&n), sql)
	return n
}
