// Command mysql shows exactly-once effects with MySQL or MariaDB: a
// JetStream consumer (on an embedded NATS server, in a temporary
// directory) whose handler writes an order row and completes the message's
// dedup record in the same transaction, through mysqlstore.TxHandler. The
// orders table has no unique key: only the record keeps an order from
// being written twice.
//
//	MYSQL_DSN='dedup:dedup@tcp(127.0.0.1:3306)/dedup_test' go -C examples/mysql run .
//
// It works in a database of its own (-database, "dedup_test_example" by
// default), which it drops and creates again at the start. What happens on
// the way:
//   - A producer retry publishes orders 2 and 4 again (without
//     Nats-Msg-Id, so JetStream's own duplicate window cannot catch them):
//     the copies are answered as duplicates, nothing is written.
//   - The warehouse call fails once for order 3, after its row was
//     inserted: the transaction rolls back, the message is Nak'd and the
//     retry writes the row once.
//   - Worker A writes order 5 and commits, then its process dies before
//     acknowledging: JetStream redelivers order 5 to worker B, which finds
//     the record completed (it committed with the row) and writes nothing.
//   - Finally the whole stream is replayed to a new consumer: every
//     message is a duplicate, no row is written.
package main

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dedup-go/dedup"
	dedupnats "github.com/dedup-go/dedup/adapters/nats"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/store/mysqlstore"
)

// Order is the message the producers publish.
type Order struct {
	ID    string `json:"id"`
	Cents int    `json:"cents"`
}

// Receipt is what the handler returns, and what duplicates replay.
type Receipt struct {
	OrderID string `json:"order_id"`
	Written string `json:"written_by"`
}

const (
	subject    = "orders.created"
	dlqSubject = "dlq.orders"
	ackWait    = time.Second
	lease      = 2 * time.Second // its heartbeat (a third) comes before AckWait
)

func main() {
	database := flag.String("database", "dedup_test_example", "the database the example drops and creates again")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn := cmp.Or(os.Getenv("MYSQL_DSN"), "dedup:dedup@tcp(127.0.0.1:3306)/dedup_test")
	if err := run(ctx, os.Stdout, dsn, *database); err != nil {
		fmt.Fprintln(os.Stderr, "mysql:", err)
		os.Exit(1)
	}
}

// run plays the scenario in database of the server at dsn and writes its
// report to w.
func run(ctx context.Context, w io.Writer, dsn, database string) error {
	db, err := openDatabase(ctx, dsn, database)
	if err != nil {
		return err
	}
	defer db.Close()
	// The table dedup_records, in the database: created, then checked.
	records, err := mysqlstore.New(ctx, db, &mysqlstore.Options{Migrate: true})
	if err != nil {
		return err
	}
	defer records.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id VARCHAR(64) NOT NULL, cents INT NOT NULL, worker VARCHAR(32) NOT NULL) ENGINE=InnoDB`); err != nil {
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
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{subject}}); err != nil {
		return err
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS_DLQ", Subjects: []string{dlqSubject}}); err != nil {
		return err
	}
	consumer := func(name string) (jetstream.Consumer, error) {
		return js.CreateConsumer(ctx, "ORDERS", jetstream.ConsumerConfig{
			Durable: name, AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxDeliver: 10,
		})
	}
	orders, err := consumer("orders")
	if err != nil {
		return err
	}
	log := &tally{}

	fmt.Fprintln(w, "1. Order 5 is published. Worker A writes it and commits, then its process dies before acknowledging.")
	if err := publish(ctx, js, Order{"order-5", 5000}); err != nil {
		return err
	}
	if err := workerA(ctx, url, records, log); err != nil {
		return err
	}

	fmt.Fprintln(w, "2. Orders 1 to 4 are published; a producer retry sends orders 2 and 4 again.")
	for _, o := range []Order{{"order-1", 1000}, {"order-2", 2000}, {"order-3", 3000}, {"order-4", 4000}, {"order-2", 2000}, {"order-4", 4000}} {
		if err := publish(ctx, js, o); err != nil {
			return err
		}
	}

	fmt.Fprintln(w, "3. Worker B consumes the stream; the warehouse fails once for order 3; order 5 comes back after AckWait.")
	failOnce := map[string]bool{"order-3": true}
	var mu sync.Mutex
	if err := consume(ctx, js, orders, records, "worker-b", log, func(o Order) error {
		mu.Lock()
		defer mu.Unlock()
		if failOnce[o.ID] {
			delete(failOnce, o.ID)
			return errors.New("warehouse timeout")
		}
		return nil
	}, 7); err != nil {
		return err
	}

	fmt.Fprintln(w, "4. The whole stream is replayed to a new consumer, worker C.")
	replay, err := consumer("replay")
	if err != nil {
		return err
	}
	if err := consume(ctx, js, replay, records, "worker-c", log, nil, 7); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return report(ctx, w, db, log)
}

// openDatabase drops database and creates it again, and returns a pool
// whose connections work in it.
func openDatabase(ctx context.Context, dsn, database string) (*sql.DB, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	name := "`" + strings.ReplaceAll(database, "`", "``") + "`"
	if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
		return nil, err
	}
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return nil, err
	}
	cfg.DBName = database
	return sql.Open("mysql", cfg.FormatDSN())
}

// handler is the consumers' handler: it writes the order in the
// transaction that completes the message's record. fail, when set, is the
// warehouse call, made after the row is inserted.
func handler(records *mysqlstore.Store, worker string, fail func(Order) error) (dedup.Handler[*dedup.Message[Order], Receipt], error) {
	return mysqlstore.TxHandler(records, func(ctx context.Context, tx *sql.Tx, m *dedup.Message[Order]) (Receipt, error) {
		o := m.Body
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, cents, worker) VALUES (?, ?, ?)`, o.ID, o.Cents, worker); err != nil {
			return Receipt{}, err
		}
		if fail != nil {
			if err := fail(o); err != nil {
				return Receipt{}, err // the insert above is rolled back
			}
		}
		return Receipt{OrderID: o.ID, Written: worker}, nil
	}, nil)
}

func newReceiver(records *mysqlstore.Store, worker string, h dedup.Handler[*dedup.Message[Order], Receipt], log *tally) (*dedup.Receiver[*dedup.Message[Order], Receipt], error) {
	return dedup.NewReceiver(records,
		idstrategy.BodyField("id", func(o Order) string { return o.ID }),
		h,
		&dedup.Config{
			Namespace: "orders",
			Lease:     lease,
			Backoff:   dedup.ExponentialBackoff{Base: 100 * time.Millisecond, Max: time.Second},
			Observer:  log.observer(worker),
		})
}

// consume runs a consumer until the n messages of the stream are settled.
func consume(ctx context.Context, js jetstream.JetStream, cons jetstream.Consumer, records *mysqlstore.Store, worker string, log *tally, fail func(Order) error, n int) error {
	h, err := handler(records, worker, fail)
	if err != nil {
		return err
	}
	rcv, err := newReceiver(records, worker, h, log)
	if err != nil {
		return err
	}
	c, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{Concurrency: 4, DeadLetterSubject: dlqSubject})
	if err != nil {
		return err
	}
	// The consumer runs until Stop: Start's context ending would be a stop
	// nobody asked for.
	if err := c.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(stopCtx)
	}()
	for {
		info, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		if info.AckFloor.Stream == uint64(n) && info.NumAckPending == 0 && info.NumPending == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// workerA writes order 5 and commits, and its process dies before the
// acknowledgement: its connection to NATS is closed while the handler
// holds the message, so the ack never leaves.
func workerA(ctx context.Context, url string, records *mysqlstore.Store, log *tally) error {
	nc, err := natsgo.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cons, err := js.Consumer(ctx, "ORDERS", "orders")
	if err != nil {
		return err
	}
	committed, die := make(chan struct{}), make(chan struct{})
	inTx, err := handler(records, "worker-a", nil)
	if err != nil {
		return err
	}
	rcv, err := newReceiver(records, "worker-a", func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
		r, err := inTx(ctx, m) // the row and the record are committed
		close(committed)
		<-die
		return r, err
	}, log)
	if err != nil {
		return err
	}
	a, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{Concurrency: 1, DeadLetterSubject: dlqSubject})
	if err != nil {
		return err
	}
	if err := a.Start(ctx); err != nil {
		return err
	}
	select {
	case <-committed:
	case <-ctx.Done():
		return ctx.Err()
	}
	nc.Close()
	close(die)
	select {
	case <-a.Stopped():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func publish(ctx context.Context, js jetstream.JetStream, o Order) error {
	data, err := json.Marshal(o)
	if err != nil {
		return err
	}
	_, err = js.Publish(ctx, subject, data)
	return err
}

func startServer() (url string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "dedup-mysql-example-")
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

// tally keeps the decisions of every delivery, per order.
type tally struct {
	mu      sync.Mutex
	byOrder map[string][]string
}

func (t *tally) observer(worker string) delivery.Observer {
	return delivery.ObserverFunc(func(_ context.Context, e delivery.Event) {
		if !e.Settled {
			return
		}
		id := strings.TrimPrefix(e.Key, "orders:")
		status := e.Status.String()
		if e.Status == delivery.StatusNone {
			status = "handler failed"
		}
		what := fmt.Sprintf("%s  delivery %d: %s -> %s", worker, e.DeliveryCount, status, e.Decision.Action)
		switch {
		case e.SettleErr != nil && e.Status.Done():
			what += " lost with the process (" + rootCause(e.SettleErr) + ")"
		case e.Decision.Err != nil && e.Status != delivery.StatusDuplicate:
			what += " (" + rootCause(e.Decision.Err) + ")"
		}
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.byOrder == nil {
			t.byOrder = map[string][]string{}
		}
		t.byOrder[id] = append(t.byOrder[id], what)
	})
}

// rootCause is the innermost error's text.
func rootCause(err error) string {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err.Error()
		}
		err = next
	}
}

// report prints the rows of each order and its deliveries.
func report(ctx context.Context, w io.Writer, db *sql.DB, log *tally) error {
	rows, err := db.QueryContext(ctx, `SELECT id, COUNT(*), GROUP_CONCAT(worker ORDER BY worker) FROM orders GROUP BY id ORDER BY id`)
	if err != nil {
		return err
	}
	defer rows.Close()
	type written struct {
		n       int
		workers string
	}
	byOrder := map[string]written{}
	for rows.Next() {
		var id string
		var wr written
		if err := rows.Scan(&id, &wr.n, &wr.workers); err != nil {
			return err
		}
		byOrder[id] = wr
	}
	if err := rows.Err(); err != nil {
		return err
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	ids := make([]string, 0, len(log.byOrder))
	for id := range log.byOrder {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	once := len(byOrder) == 5
	for _, id := range ids {
		wr := byOrder[id]
		fmt.Fprintf(w, "%s  %d row(s), written by %s\n", id, wr.n, wr.workers)
		for _, d := range log.byOrder[id] {
			fmt.Fprintln(w, "    "+d)
		}
		once = once && wr.n == 1
	}
	fmt.Fprintln(w, "Every order written exactly once:", once)
	return nil
}
