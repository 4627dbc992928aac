package pgoutbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupnats "github.com/dedup-go/dedup/adapters/nats"
	"github.com/dedup-go/dedup/deduptest"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/adaptertest"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/outbox"
	"github.com/dedup-go/dedup/store/memstore"
	"github.com/dedup-go/dedup/store/pgoutbox"
	"github.com/dedup-go/dedup/store/pgstore"
)

const (
	e2eOrders     = 2000
	e2eDuplicates = 400
	e2eCustomers  = 100
	e2eKills      = 8 // of the consumer and the relays, in turn
)

// TestEndToEnd: 2,000 orders (and 400 copies of some) go through a
// JetStream consumer whose handler, in one transaction with the record's
// completion, counts the order on its customer's row, writes the order
// and two messages (created, confirmed: the customer is their ordering
// key); two relays publish them to JetStream. The consumer and the relays
// are processes of their own, killed with SIGKILL at random moments and
// started again, and the PostgreSQL server (a test's own) is killed and
// started again once. A downstream consumer with dedup, keyed on the
// messages' ids, counts their effects: every outgoing message's effect
// happened exactly once, none is lost, and the first copies of each
// customer's messages are in the order their transactions committed.
// The output stream's duplicate window is the shortest JetStream takes
// (100ms), so copies that the relays publish again reach the downstream
// consumer, whose dedup absorbs them.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	started := time.Now()
	natsURL := testenv.NATS.Addr(t)
	srv := startPostgres(t)
	pool := connect(t, srv.DSN(), 8)
	ctx := t.Context()
	_, err := pgstore.New(ctx, pool, &pgstore.Options{Migrate: true, Logger: quiet})
	require.NoError(t, err)
	_, err = pgoutbox.New(ctx, pool, &pgoutbox.Options{Migrate: true, Buckets: 16, Logger: quiet})
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `CREATE TABLE customers (id text PRIMARY KEY, orders int NOT NULL DEFAULT 0);
CREATE TABLE orders (id text NOT NULL, customer text NOT NULL);
INSERT INTO customers (id) SELECT 'c-' || lpad(i::text, 3, '0') FROM generate_series(0, `+fmt.Sprint(e2eCustomers-1)+`) i`)
	require.NoError(t, err)

	_, js := natsConn(t, natsURL)
	n := newE2ENames(suffix())
	for name, cfg := range map[string]jetstream.StreamConfig{
		n.inStream:  {Subjects: []string{n.in}, Storage: jetstream.MemoryStorage},
		n.outStream: {Subjects: []string{n.out + ".>"}, Storage: jetstream.MemoryStorage, Duplicates: 100 * time.Millisecond},
		n.dlStream:  {Subjects: []string{n.dlq}, Storage: jetstream.MemoryStorage},
	} {
		cfg.Name = name
		_, err := js.CreateStream(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	}
	_, err = js.CreateOrUpdateConsumer(ctx, n.inStream, jetstream.ConsumerConfig{Durable: e2eConsumer, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: 2 * time.Second, MaxDeliver: 100, MaxAckPending: 64})
	require.NoError(t, err)

	// The downstream consumer, in this process.
	var effects deduptest.Effects
	down, err := memstore.New(nil)
	require.NoError(t, err)
	rcv, err := dedup.NewReceiver(down, idstrategy.MessageID[e2eEvent](), func(ctx context.Context, m *dedup.Message[e2eEvent]) (struct{}, error) {
		effects.Record(m.ID)
		return struct{}{}, nil
	}, &dedup.Config{Namespace: "downstream", Logger: quiet})
	require.NoError(t, err)
	downCons, err := js.CreateOrUpdateConsumer(ctx, n.outStream, jetstream.ConsumerConfig{Durable: "downstream", AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(t, err)
	dc, err := dedupnats.NewConsumer(js, downCons, rcv, &dedupnats.Options{DropPoison: true, Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, dc.Start(context.WithoutCancel(ctx)))
	adaptertest.StopAtCleanup(t, dc)

	// The orders, with copies, published before the processes start.
	var deliveries []e2eOrder
	for i := range e2eOrders {
		deliveries = append(deliveries, e2eOrder{ID: fmt.Sprintf("o-%04d", i), Customer: fmt.Sprintf("c-%03d", rand.IntN(e2eCustomers))})
	}
	for range e2eDuplicates {
		deliveries = append(deliveries, deliveries[rand.IntN(e2eOrders)])
	}
	rand.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })
	for _, o := range deliveries {
		b, _ := json.Marshal(o)
		_, err := js.PublishAsync(n.in, b)
		require.NoError(t, err)
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(testenv.WaitTimeout):
		t.Fatal("the orders were not all published")
	}

	consumer := startChild(t, "consumer", srv.DSN(), natsURL, n)
	relays := []*child{startChild(t, "relay", srv.DSN(), natsURL, n), startChild(t, "relay", srv.DSN(), natsURL, n)}
	kills := map[string]int{}
	for i := range e2eKills {
		time.Sleep(time.Duration(200+rand.IntN(800)) * time.Millisecond)
		if i == e2eKills/2 {
			srv.Kill()
			time.Sleep(time.Duration(200+rand.IntN(500)) * time.Millisecond)
			srv.Start()
		}
		if i%2 == 0 {
			consumer.kill()
			kills["consumer"]++
			consumer = startChild(t, "consumer", srv.DSN(), natsURL, n)
		} else {
			k := rand.IntN(len(relays))
			relays[k].kill()
			kills["relay"]++
			relays[k] = startChild(t, "relay", srv.DSN(), natsURL, n)
		}
	}
	processed := count(t, pool, "SELECT count(*) FROM orders")
	t.Logf("%d kills in %v; %d orders written by then", e2eKills, time.Since(started), processed)

	// Everything settles: the orders handled, the messages sent, and
	// handled downstream.
	ids := make([]string, 0, 2*e2eOrders)
	for i := range e2eOrders {
		for _, event := range []string{"created", "confirmed"} {
			ids = append(ids, outbox.MessageID(e2eNamespace+":"+fmt.Sprintf("o-%04d", i), event))
		}
	}
	within := time.Now().Add(90 * time.Second)
	for {
		in, err := js.Consumer(ctx, n.inStream, e2eConsumer)
		require.NoError(t, err)
		info, err := in.Info(ctx)
		require.NoError(t, err)
		dInfo, err := downCons.Info(ctx)
		require.NoError(t, err)
		if info.NumPending == 0 && info.NumAckPending == 0 && dInfo.NumPending == 0 && dInfo.NumAckPending == 0 &&
			count(t, pool, "SELECT count(*) FROM dedup_outbox WHERE sent_at IS NULL") == 0 {
			break
		}
		require.True(t, time.Now().Before(within), "not settled: %d incoming pending, %d unacked; %d effects of %d; %d downstream pending",
			info.NumPending, info.NumAckPending, effects.Len(), len(ids), dInfo.NumPending)
		time.Sleep(100 * time.Millisecond)
	}

	// The incoming side: each order written once, nothing dead-lettered.
	require.Equal(t, e2eOrders, count(t, pool, "SELECT count(*) FROM orders"), "orders written")
	require.Equal(t, e2eOrders, count(t, pool, "SELECT count(DISTINCT id) FROM orders"))
	require.Equal(t, e2eOrders, count(t, pool, "SELECT sum(orders) FROM customers"), "orders counted on customers")
	dl, err := js.Stream(ctx, n.dlStream)
	require.NoError(t, err)
	dlInfo, err := dl.Info(ctx)
	require.NoError(t, err)
	require.Zero(t, dlInfo.State.Msgs, "dead letters")

	// The outgoing side: each message's effect once, downstream.
	require.Equal(t, 2*e2eOrders, count(t, pool, "SELECT count(*) FROM dedup_outbox"))
	effects.ExactlyOnce(ids...).Check(t)

	// The order: each customer's first copies in the order of the outbox.
	seqOf := map[string]int64{}
	rows, err := pool.Query(ctx, "SELECT id, seq FROM dedup_outbox")
	require.NoError(t, err)
	for rows.Next() {
		var id string
		var seq int64
		require.NoError(t, rows.Scan(&id, &seq))
		seqOf[id] = seq
	}
	require.NoError(t, rows.Err())
	out := outStream{name: n.outStream, js: js}
	msgs := out.read(t)
	last := map[string]int64{}
	for _, m := range firstOccurrences(msgs) {
		var ev e2eEvent
		require.NoError(t, json.Unmarshal([]byte(m.body), &ev))
		seq, ok := seqOf[m.id]
		require.True(t, ok, "message %s is not in the outbox", m.id)
		require.Greater(t, seq, last[ev.Customer], "customer %s: message %s (%s of %s) came after a later one", ev.Customer, m.id, ev.Event, ev.Order)
		last[ev.Customer] = seq
	}
	t.Logf("kills %v and one PostgreSQL restart; %d copies of incoming orders; %d messages in the output stream for %d outgoing (%d copies absorbed downstream); %v in all",
		kills, e2eDuplicates, len(msgs), len(ids), len(msgs)-len(ids), time.Since(started))
}

// count returns the single integer sql answers.
func count(t testing.TB, pool *pgxpool.Pool, sql string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), sql).Scan(&n), sql)
	return n
}
