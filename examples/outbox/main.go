// Command outbox shows effects that are messages, end to end: a payment
// service consumes payment requests from JetStream and, in one
// transaction, writes the payment row, completes the request's dedup
// record and adds a "payment captured" event to a PostgreSQL outbox
// (pgstore.TxHandler, pgoutbox's Writer.Add). A relay publishes the events
// to JetStream, each with its id as Nats-Msg-Id; a notification service
// downstream consumes them with a receiver keyed on that id
// (idstrategy.MessageID), so each event has its effect once.
//
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/test go -C examples/outbox run .
//
// NATS runs embedded, in a temporary directory; PostgreSQL is the one at
// DATABASE_URL, in a schema of the example's own (-schema,
// "dedup_outbox_example" by default), dropped and created again at the
// start. What happens on the way:
//   - A producer retry sends the request of p-2 twice: the copy is a
//     duplicate, answered from the record: no second row, no second event.
//   - The relay publishes p-1's event, JetStream stores it, and the
//     acknowledgement is lost on the way back (as with a network cut). The
//     relay publishes it again later, with the same id; the stream's
//     duplicate window (100ms here) is over by then, so the stream holds
//     two copies, and the notification service's receiver drops the
//     second. Meanwhile p-3's event, of the same account, waits: an
//     account's events go out in the order they were written.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dedup-go/dedup"
	dedupnats "github.com/dedup-go/dedup/adapters/nats"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/outbox"
	"github.com/dedup-go/dedup/store/memstore"
	"github.com/dedup-go/dedup/store/pgoutbox"
	"github.com/dedup-go/dedup/store/pgstore"
)

// Payment is a payment request, what the producers publish.
type Payment struct {
	ID      string `json:"id"`
	Account string `json:"account"`
	Cents   int    `json:"cents"`
}

// Captured is the event the payment service writes to the outbox.
type Captured struct {
	Payment string `json:"payment"`
	Account string `json:"account"`
	Cents   int    `json:"cents"`
}

const (
	requested  = "payments.requested"
	captured   = "payments.captured"
	dlqSubject = "dlq.payments"
	namespace  = "payments" // the payment service's receiver
)

func main() {
	schema := flag.String("schema", "dedup_outbox_example", "the schema the example drops and creates again")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn := cmp.Or(os.Getenv("DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	if err := run(ctx, os.Stdout, dsn, *schema); err != nil {
		fmt.Fprintln(os.Stderr, "outbox:", err)
		os.Exit(1)
	}
}

// run plays the scenario in schema of the database at dsn and writes its
// report to w.
func run(ctx context.Context, w io.Writer, dsn, schema string) error {
	pool, err := openSchema(ctx, dsn, schema)
	if err != nil {
		return err
	}
	defer pool.Close()
	records, err := pgstore.New(ctx, pool, &pgstore.Options{Migrate: true})
	if err != nil {
		return err
	}
	ob, err := pgoutbox.New(ctx, pool, &pgoutbox.Options{Migrate: true})
	if err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE payments (id text NOT NULL, account text NOT NULL, cents int NOT NULL)`); err != nil {
		return err
	}

	url, stopServer, err := startServer()
	if err != nil {
		return err
	}
	defer stopServer()
	nc, err := natsgo.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	for _, s := range []jetstream.StreamConfig{
		{Name: "PAYMENTS", Subjects: []string{requested}},
		{Name: "PAYMENTS_DLQ", Subjects: []string{dlqSubject}},
		// The events, with a short duplicate window, so that the copy the
		// relay publishes later reaches the notification service.
		{Name: "CAPTURED", Subjects: []string{captured}, Duplicates: 100 * time.Millisecond},
	} {
		if _, err := js.CreateStream(ctx, s); err != nil {
			return err
		}
	}

	fmt.Fprintln(w, "1. Payments p-1 to p-4 are requested; a producer retry sends p-2 again.")
	for _, p := range []Payment{{"p-1", "acct-1", 1000}, {"p-2", "acct-2", 2000}, {"p-3", "acct-1", 3000}, {"p-4", "acct-3", 4000}, {"p-2", "acct-2", 2000}} {
		data, err := json.Marshal(p)
		if err != nil {
			return err
		}
		if _, err := js.Publish(ctx, requested, data); err != nil {
			return err
		}
	}

	fmt.Fprintln(w, "2. The payment service writes each payment and its event in one transaction; the relay publishes the events.")
	paymentsDone, err := paymentService(ctx, js, records, ob)
	if err != nil {
		return err
	}
	defer paymentsDone()
	pub, err := dedupnats.NewOutboxPublisher(js, nil)
	if err != nil {
		return err
	}
	lossy := &losesFirstAck{Publisher: pub, id: outbox.MessageID(namespace+":p-1", "captured")}
	relay, err := pgoutbox.NewRelay(ob, lossy, &pgoutbox.RelayOptions{MinBackoff: 300 * time.Millisecond})
	if err != nil {
		return err
	}
	// The relay runs until Stop: Start's context ending would be a stop
	// nobody asked for.
	if err := relay.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = relay.Stop(stopCtx)
	}()

	fmt.Fprintln(w, "3. The notification service consumes the events, keyed on their id (Nats-Msg-Id).")
	notes := &notifications{}
	notesDone, err := notificationService(ctx, js, notes)
	if err != nil {
		return err
	}
	defer notesDone()

	// Everything settles: the requests handled, the events sent, and
	// handled downstream.
	for {
		settled, err := idle(ctx, js, "PAYMENTS", "payments")
		if err != nil {
			return err
		}
		var unsent int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM dedup_outbox`).Scan(&unsent); err != nil {
			return err
		}
		if settled && unsent == 0 && lossy.lost() {
			if settled, err = idle(ctx, js, "CAPTURED", "notifications"); err != nil {
				return err
			} else if settled {
				break
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	fmt.Fprintln(w)
	return report(ctx, w, pool, js, notes, relay)
}

// openSchema drops schema and creates it again, and returns a pool whose
// connections work in it.
func openSchema(ctx context.Context, dsn, schema string) (*pgxpool.Pool, error) {
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer admin.Close(context.Background())
	name := pgx.Identifier{schema}.Sanitize()
	if _, err := admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+name+" CASCADE"); err != nil {
		return nil, err
	}
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	return pgxpool.NewWithConfig(ctx, cfg)
}

// paymentService consumes the payment requests: in one transaction, the
// payment row, the event in the outbox and the request's record. It
// returns the function that stops it.
func paymentService(ctx context.Context, js jetstream.JetStream, records *pgstore.Store, ob *pgoutbox.Outbox) (func(), error) {
	handler, err := pgstore.TxHandler(records, func(ctx context.Context, tx pgx.Tx, m *dedup.Message[Payment]) (string, error) {
		p := m.Body
		if _, err := tx.Exec(ctx, `INSERT INTO payments (id, account, cents) VALUES ($1, $2, $3)`, p.ID, p.Account, p.Cents); err != nil {
			return "", err
		}
		w, err := ob.Writer(ctx, tx)
		if err != nil {
			return "", err
		}
		event, err := json.Marshal(Captured{Payment: p.ID, Account: p.Account, Cents: p.Cents})
		if err != nil {
			return "", err
		}
		// The id derives from the request's key and the name: a handler
		// that runs again writes the same one.
		return w.Add(ctx, pgoutbox.Message{Name: "captured", Destination: captured, OrderingKey: p.Account, Body: event})
	}, nil)
	if err != nil {
		return nil, err
	}
	rcv, err := dedup.NewReceiver(records, idstrategy.BodyField("id", func(p Payment) string { return p.ID }), handler,
		&dedup.Config{Namespace: namespace})
	if err != nil {
		return nil, err
	}
	cons, err := js.CreateConsumer(ctx, "PAYMENTS", jetstream.ConsumerConfig{Durable: "payments", AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 10})
	if err != nil {
		return nil, err
	}
	return startConsumer(ctx, js, cons, rcv)
}

// notifications is the notification service's effect: one notice per
// event, and the copies its receiver dropped.
type notifications struct {
	mu      sync.Mutex
	effects map[string][]Captured // by event id
	dropped []string              // ids of the copies answered as duplicates
}

func (n *notifications) observer() delivery.Observer {
	return delivery.ObserverFunc(func(_ context.Context, e delivery.Event) {
		if e.Settled && e.Status == delivery.StatusDuplicate {
			n.mu.Lock()
			defer n.mu.Unlock()
			n.dropped = append(n.dropped, strings.TrimPrefix(e.Key, "notifications:"))
		}
	})
}

// notificationService consumes the events with a receiver keyed on the
// id the relay put in Nats-Msg-Id, its records in memory. It returns the
// function that stops it.
func notificationService(ctx context.Context, js jetstream.JetStream, notes *notifications) (func(), error) {
	store, err := memstore.New(nil)
	if err != nil {
		return nil, err
	}
	rcv, err := dedup.NewReceiver(store, idstrategy.MessageID[Captured](), func(_ context.Context, m *dedup.Message[Captured]) (struct{}, error) {
		notes.mu.Lock()
		defer notes.mu.Unlock()
		if notes.effects == nil {
			notes.effects = map[string][]Captured{}
		}
		notes.effects[m.ID] = append(notes.effects[m.ID], m.Body)
		return struct{}{}, nil
	}, &dedup.Config{Namespace: "notifications", Observer: notes.observer()})
	if err != nil {
		return nil, err
	}
	cons, err := js.CreateConsumer(ctx, "CAPTURED", jetstream.ConsumerConfig{Durable: "notifications", AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 10})
	if err != nil {
		return nil, err
	}
	return startConsumer(ctx, js, cons, rcv)
}

// startConsumer starts a dedupnats consumer of cons with rcv, and returns
// the function that stops it.
func startConsumer[T any, R any](ctx context.Context, js jetstream.JetStream, cons jetstream.Consumer, rcv *dedup.Receiver[*dedup.Message[T], R]) (func(), error) {
	c, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{Concurrency: 1, DeadLetterSubject: dlqSubject})
	if err != nil {
		return nil, err
	}
	if err := c.Start(context.WithoutCancel(ctx)); err != nil {
		return nil, err
	}
	return func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(stopCtx)
	}, nil
}

// idle reports whether the consumer has settled every message of its
// stream.
func idle(ctx context.Context, js jetstream.JetStream, stream, consumer string) (bool, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return false, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return false, err
	}
	c, err := s.Consumer(ctx, consumer)
	if err != nil {
		return false, err
	}
	ci, err := c.Info(ctx)
	if err != nil {
		return false, err
	}
	return ci.AckFloor.Stream == info.State.LastSeq && ci.NumAckPending == 0 && ci.NumPending == 0, nil
}

// losesFirstAck is a publisher whose first acknowledgement of one message
// is lost on the way back: JetStream stored the message, and the relay is
// told it failed, as after a network cut.
type losesFirstAck struct {
	outbox.Publisher
	id string

	mu   sync.Mutex
	done bool
}

func (p *losesFirstAck) Publish(ctx context.Context, msgs []outbox.Message) error {
	err := p.Publisher.Publish(ctx, msgs)
	p.mu.Lock()
	defer p.mu.Unlock()
	i := slices.IndexFunc(msgs, func(m outbox.Message) bool { return m.ID == p.id })
	if p.done || i < 0 || !outbox.Acknowledged(err, len(msgs))[i] {
		return err
	}
	p.done = true
	errs := make([]error, len(msgs))
	var be *outbox.BatchError
	if errors.As(err, &be) && len(be.Errs) == len(msgs) {
		copy(errs, be.Errs)
	}
	errs[i] = errors.New("the acknowledgement was lost on the way back")
	return &outbox.BatchError{Errs: errs}
}

func (p *losesFirstAck) lost() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

func startServer() (url string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "dedup-outbox-example-")
	if err != nil {
		return "", nil, err
	}
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, err
	}
	srv.Start()
	stop = func() {
		srv.Shutdown()
		srv.WaitForShutdown()
		_ = os.RemoveAll(dir)
	}
	if !srv.ReadyForConnections(10 * time.Second) {
		stop()
		return "", nil, errors.New("the embedded NATS server did not start")
	}
	return srv.ClientURL(), stop, nil
}

// report prints the payments written, the events the stream holds (each
// account's in order), and the notifications' effects.
func report(ctx context.Context, w io.Writer, pool *pgxpool.Pool, js jetstream.JetStream, notes *notifications, relay *pgoutbox.Relay) error {
	rows, err := pool.Query(ctx, `SELECT id, count(*) FROM payments GROUP BY id ORDER BY id`)
	if err != nil {
		return err
	}
	written, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var id string
		var n int
		err := r.Scan(&id, &n)
		return fmt.Sprintf("%s %d row(s)", id, n), err
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "Payments written: %s\n", strings.Join(written, ", "))
	var ids int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM dedup_outbox_ids`).Scan(&ids); err != nil {
		return err
	}
	fmt.Fprintf(w, "Events written to the outbox: %d; marked sent by the relay: %d\n", ids, relay.Stats().Published)

	stored, err := readStream(ctx, js, "CAPTURED")
	if err != nil {
		return err
	}
	byAccount := map[string][]string{}
	for _, c := range stored {
		byAccount[c.Account] = append(byAccount[c.Account], c.Payment)
	}
	fmt.Fprintf(w, "Events in the stream: %d\n", len(stored))
	for _, a := range slices.Sorted(maps.Keys(byAccount)) {
		fmt.Fprintf(w, "    %s: %s\n", a, strings.Join(byAccount[a], ", "))
	}

	notes.mu.Lock()
	defer notes.mu.Unlock()
	once := true
	var effects []string
	for _, cs := range notes.effects {
		once = once && len(cs) == 1
		effects = append(effects, fmt.Sprintf("%s x%d", cs[0].Payment, len(cs)))
	}
	slices.Sort(effects)
	fmt.Fprintf(w, "Notifications sent: %s\n", strings.Join(effects, ", "))
	fmt.Fprintf(w, "Copies dropped by the notification service: %d\n", len(notes.dropped))
	fmt.Fprintf(w, "Every event's effect exactly once: %v\n", once && len(notes.effects) == ids)
	return nil
}

// readStream returns the events a stream holds, in order.
func readStream(ctx context.Context, js jetstream.JetStream, stream string) ([]Captured, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, err
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	var out []Captured
	for uint64(len(out)) < info.State.Msgs {
		batch, err := c.Fetch(int(info.State.Msgs)-len(out), jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return nil, err
		}
		for m := range batch.Messages() {
			var e Captured
			if err := json.Unmarshal(m.Data(), &e); err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		if err := batch.Error(); err != nil {
			return nil, err
		}
	}
	return out, nil
}
