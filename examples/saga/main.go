// Command saga shows recorded steps and their compensations at work on a
// real broker without any external service: an order handler charges a
// card, reserves the goods and notifies the customer, each a step
// (dedup.Step) recorded under the message's claim. It starts an embedded
// NATS server with JetStream (in a temporary directory), publishes orders to
// a stream and consumes them with dedup over the in-process memstore; then it
// prints what each fake service did per order, what happened to each
// delivery, and exits.
//
//	go -C examples run ./saga
//
// What happens on the way:
//   - Worker A charges order 1 and its process dies before the reserve step:
//     JetStream redelivers order 1 to worker B after AckWait, where the
//     charge is replayed from its record and reserve and notify run.
//   - A producer retry publishes order 2 again without Nats-Msg-Id: the copy
//     is answered from the record, and no step runs.
//   - The warehouse is out of stock for good for order 3 (a Permanent
//     error): the message is given up, its charge refunded once by the
//     charge step's compensation, and it is dead-lettered.
//   - The mailer fails once on order 4: the retry replays charge and reserve
//     from their records and runs notify again.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dedup-go/dedup"
	dedupnats "github.com/dedup-go/dedup/adapters/nats"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/memstore"
)

// Order is the message the producers publish.
type Order struct {
	ID    string `json:"id"`
	Cents int    `json:"cents"`
}

// Charge is the charge step's result: what the gateway charged.
type Charge struct {
	ID    string `json:"id"`
	Cents int    `json:"cents"`
}

// Reservation is the reserve step's result.
type Reservation struct {
	ID string `json:"id"`
}

// Receipt is what handling an order returns, and what duplicates replay.
type Receipt struct {
	ChargeID      string `json:"charge_id"`
	ReservationID string `json:"reservation_id"`
	EmailID       string `json:"email_id"`
}

const (
	ackWait    = time.Second
	subject    = "orders.created"
	dlqSubject = "dlq.orders"
	retryDelay = 100 * time.Millisecond
)

// orders are published in this order, order 2 twice.
var orders = []Order{{"order-1", 1999}, {"order-2", 4500}, {"order-3", 1250}, {"order-4", 999}}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "saga:", err)
		os.Exit(1)
	}
}

// run plays the scenario and writes its report to w.
func run(ctx context.Context, w io.Writer) error {
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
	cons, err := js.CreateConsumer(ctx, "ORDERS", jetstream.ConsumerConfig{
		Durable: "fulfilment", AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxDeliver: 10,
	})
	if err != nil {
		return err
	}

	// The store outlives worker A, as Redis would; it keeps the step
	// records with the key's record.
	records, err := memstore.New(nil)
	if err != nil {
		return err
	}
	s := newSaga()

	fmt.Fprintln(w, "1. Order 1 is published. Worker A charges it, then its process dies before the reserve step.")
	if err := publish(ctx, js, orders[0], true); err != nil {
		return err
	}
	a, err := workerA(ctx, url, records, s)
	if err != nil {
		return err
	}
	// Until the server has seen worker A's connection go, its pull request
	// is still waiting there, and the next order could be delivered to it.
	if err := waitUntilNoPulls(ctx, cons); err != nil {
		return err
	}

	fmt.Fprintln(w, "2. Orders 2 to 4 are published; a producer retry sends order 2 again without Nats-Msg-Id.")
	fmt.Fprintln(w, "   The warehouse is out of stock for good for order 3; the mailer fails once on order 4.")
	for _, o := range orders[1:] {
		if err := publish(ctx, js, o, true); err != nil {
			return err
		}
		if o.ID == "order-2" {
			if err := publish(ctx, js, o, false); err != nil {
				return err
			}
		}
	}

	fmt.Fprintln(w, "3. Worker B consumes the stream; order 1 comes back to it after AckWait.")
	rcv, err := newReceiver(records, s, s.handler(nil), s.trace.record("worker-b"))
	if err != nil {
		return err
	}
	// One message at a time: each order's deliveries, and the report, come
	// in the same order on every run.
	b, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{Concurrency: 1, DeadLetterSubject: dlqSubject})
	if err != nil {
		return err
	}
	// The consumer runs until Stop, which has a deadline of its own: Start's
	// context ending would be a stop nobody asked for.
	if err := b.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	dead, waitErr := waitUntilSettled(ctx, js, cons, 1)
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Stop(stopCtx); err != nil {
		return err
	}
	if waitErr != nil {
		return waitErr
	}

	fmt.Fprintln(w)
	s.print(w, dead, map[string]dedup.Stats{"worker-a": a.Stats(), "worker-b": rcv.Stats()})
	return nil
}

// startServer starts an embedded NATS server with JetStream in a temporary
// directory, on a free port.
func startServer() (url string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "dedup-saga-")
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

// publish publishes o, with its id as Nats-Msg-Id when withID is set.
func publish(ctx context.Context, js jetstream.JetStream, o Order, withID bool) error {
	data, err := json.Marshal(o)
	if err != nil {
		return err
	}
	m := natsgo.NewMsg(subject)
	m.Data = data
	if withID {
		m.Header.Set(jetstream.MsgIDHeader, o.ID)
	}
	_, err = js.PublishMsg(ctx, m)
	return err
}

// newReceiver wraps handler: orders are keyed by the id in their body,
// which every copy carries, with or without Nats-Msg-Id. A message given up
// has its charge refunded and its reservation released. The consumer
// reports what it did with each delivery to observer.
func newReceiver(records store.Store, s *saga, handler dedup.Handler[*dedup.Message[Order], Receipt], observer delivery.Observer) (*dedup.Receiver[*dedup.Message[Order], Receipt], error) {
	return dedup.NewReceiver(records, idstrategy.BodyField("id", func(o Order) string { return o.ID }), handler, &dedup.Config{
		Namespace: "fulfilment",
		Lease:     600 * time.Millisecond, // the heartbeat (InProgress) beats at a third of it, well inside AckWait
		Backoff:   dedup.BackoffFunc(func(int) time.Duration { return retryDelay }),
		Compensations: dedup.Compensations{
			"charge": dedup.Compensate(func(ctx context.Context, m *dedup.Message[Order], c Charge) error {
				return s.gateway.refund(ctx, m.Body.ID, c.ID)
			}),
			"reserve": dedup.Compensate(func(ctx context.Context, m *dedup.Message[Order], r Reservation) error {
				return s.warehouse.release(ctx, m.Body.ID, r.ID)
			}),
		},
		Observer: observer,
		Logger:   slog.New(slog.DiscardHandler), // this program prints its own report
	})
}

// workerA is a process that charges order 1 and dies between the charge
// step and the reserve step: its connection closes, and then its handler's
// context ends. It returns worker A's receiver once its consumer stopped.
func workerA(ctx context.Context, url string, records store.Store, s *saga) (*dedup.Receiver[*dedup.Message[Order], Receipt], error) {
	nc, err := natsgo.Connect(url, natsgo.MaxReconnects(0))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	cons, err := js.Consumer(ctx, "ORDERS", "fulfilment")
	if err != nil {
		return nil, err
	}
	charged := make(chan struct{})
	rcv, err := newReceiver(records, s, s.handler(func(ctx context.Context) error {
		close(charged)
		<-ctx.Done() // the process dies here, between the steps
		return context.Cause(ctx)
	}), s.trace.record("worker-a"))
	if err != nil {
		return nil, err
	}
	a, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{
		Concurrency:       1,
		DeadLetterSubject: dlqSubject,
		Logger:            slog.New(slog.DiscardHandler), // its stop, unasked, is the point
	})
	if err != nil {
		return nil, err
	}
	life, die := context.WithCancel(ctx)
	defer die()
	if err := a.Start(life); err != nil {
		return nil, err
	}
	select {
	case <-charged:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	nc.Close() // nothing it does from now on reaches the broker
	die()
	select {
	case <-a.Stopped():
		return rcv, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// waitUntilNoPulls waits until no pull request waits on cons: the server
// drops those of a connection that closed.
func waitUntilNoPulls(ctx context.Context, cons jetstream.Consumer) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		info, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		if info.NumWaiting == 0 {
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("waiting for worker A's pull requests to go: %w", ctx.Err())
		}
	}
}

// waitUntilSettled waits until every message is acknowledged or terminated
// and the dead letters are in their stream, and returns them.
func waitUntilSettled(ctx context.Context, js jetstream.JetStream, cons jetstream.Consumer, deadLetters int) ([]jetstream.Msg, error) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		info, err := cons.Info(ctx)
		if err != nil {
			return nil, err
		}
		dlq, err := js.Stream(ctx, "ORDERS_DLQ")
		if err != nil {
			return nil, err
		}
		dinfo, err := dlq.Info(ctx)
		if err != nil {
			return nil, err
		}
		if info.NumPending == 0 && info.NumAckPending == 0 && dinfo.State.Msgs >= uint64(deadLetters) {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the stream to be consumed: %w", ctx.Err())
		}
	}
	oc, err := js.OrderedConsumer(ctx, "ORDERS_DLQ", jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	batch, err := oc.FetchNoWait(deadLetters)
	if err != nil {
		return nil, err
	}
	var out []jetstream.Msg
	for m := range batch.Messages() {
		out = append(out, m)
	}
	return out, batch.Error()
}

// saga is the order handler and the services its steps call.
type saga struct {
	gateway   *gateway
	warehouse *warehouse
	mailer    *mailer
	trace     *trace
}

// newSaga returns the saga of this scenario: the warehouse is out of stock
// for order 3 for good, and the mailer fails once on order 4.
func newSaga() *saga {
	return &saga{
		gateway:   &gateway{byKey: map[string]string{}, charges: map[string][]string{}, refunds: map[string][]string{}, refunded: map[string]string{}, requests: map[string]int{}, refundRequests: map[string]int{}},
		warehouse: &warehouse{outOfStock: map[string]bool{"order-3": true}, reserved: map[string][]string{}, released: map[string][]string{}, tries: map[string]int{}},
		mailer:    &mailer{failOnce: map[string]bool{"order-4": true}, sent: map[string][]string{}, tries: map[string]int{}},
		trace:     &trace{steps: map[deliveryID][]string{}, events: map[string][]event{}},
	}
}

// errOutOfStock is the warehouse's answer for goods it will not have.
var errOutOfStock = errors.New("out of stock")

// handler returns the order handler: three steps, charge, reserve and
// notify, each run at most once per order. beforeReserve, when set, runs
// between the charge and the reserve step (worker A dies there).
func (s *saga) handler(beforeReserve func(context.Context) error) dedup.Handler[*dedup.Message[Order], Receipt] {
	return func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
		o := m.Body
		tr := s.trace.run(deliveryID{o.ID, m.Offset, m.DeliveryCount})
		c, err := step(ctx, tr, "charge", func(ctx context.Context) (Charge, error) {
			key, err := dedup.OutgoingID(ctx, "charge") // the same for every delivery of the order
			if err != nil {
				return Charge{}, err
			}
			return s.gateway.charge(ctx, key, o)
		})
		if err != nil {
			return Receipt{}, err
		}
		if beforeReserve != nil {
			if err := beforeReserve(ctx); err != nil {
				return Receipt{}, err
			}
		}
		r, err := step(ctx, tr, "reserve", func(ctx context.Context) (Reservation, error) {
			r, err := s.warehouse.reserve(ctx, o)
			if errors.Is(err, errOutOfStock) {
				err = dedup.Permanent(err) // no retry will find it in stock
			}
			return r, err
		})
		if err != nil {
			return Receipt{}, err
		}
		email, err := step(ctx, tr, "notify", func(ctx context.Context) (string, error) {
			return s.mailer.send(ctx, o, c, r)
		})
		if err != nil {
			return Receipt{}, err
		}
		return Receipt{ChargeID: c.ID, ReservationID: r.ID, EmailID: email}, nil
	}
}

// step runs fn as the recorded step name, and notes in tr whether it ran,
// failed, or was answered from its record (replayed).
func step[T any](ctx context.Context, tr *stepNotes, name string, fn func(context.Context) (T, error)) (T, error) {
	ran := false
	v, err := dedup.Step(ctx, name, func(ctx context.Context) (T, error) {
		ran = true
		return fn(ctx)
	})
	switch {
	case err != nil && ran:
		tr.note(name + " failed")
	case err != nil:
		tr.note(name + " not run")
	case ran:
		tr.note(name + " ran")
	default:
		tr.note(name + " replayed")
	}
	return v, err
}

// gateway is the payment provider. It honours idempotency keys: a charge
// with a key it saw gets the first charge back. A refund is idempotent on
// the charge's id.
type gateway struct {
	mu             sync.Mutex
	byKey          map[string]string   // idempotency key -> charge id
	charges        map[string][]string // order id -> charge ids
	requests       map[string]int      // order id -> charge requests
	refunds        map[string][]string // order id -> "refund id of charge id"
	refunded       map[string]string   // charge id -> refund id
	refundRequests map[string]int      // order id -> refund requests
}

func (g *gateway) charge(ctx context.Context, key string, o Order) (Charge, error) {
	if err := ctx.Err(); err != nil {
		return Charge{}, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.requests[o.ID]++
	if id, ok := g.byKey[key]; ok {
		return Charge{ID: id, Cents: o.Cents}, nil
	}
	id := effectID("ch", o.ID, len(g.charges[o.ID]))
	g.byKey[key] = id
	g.charges[o.ID] = append(g.charges[o.ID], id)
	return Charge{ID: id, Cents: o.Cents}, nil
}

func (g *gateway) refund(ctx context.Context, orderID, chargeID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refundRequests[orderID]++
	if !slices.Contains(g.charges[orderID], chargeID) {
		return fmt.Errorf("refund: no charge %q of %s", chargeID, orderID)
	}
	if _, ok := g.refunded[chargeID]; ok {
		return nil
	}
	id := effectID("re", orderID, len(g.refunds[orderID]))
	g.refunded[chargeID] = id
	g.refunds[orderID] = append(g.refunds[orderID], id+" of "+chargeID)
	return nil
}

// effectID names the effect after n others of its kind for the order
// ("ch_1.1": order 1's first charge), the same on every run of the
// program, whichever order the deliveries come in.
func effectID(kind, orderID string, n int) string {
	return fmt.Sprintf("%s_%s.%d", kind, strings.TrimPrefix(orderID, "order-"), n+1)
}

// warehouse reserves the goods of an order, and releases a reservation.
type warehouse struct {
	mu         sync.Mutex
	outOfStock map[string]bool
	reserved   map[string][]string // order id -> reservation ids
	released   map[string][]string // order id -> reservation ids released
	tries      map[string]int      // order id -> reserve calls
}

func (h *warehouse) reserve(ctx context.Context, o Order) (Reservation, error) {
	if err := ctx.Err(); err != nil {
		return Reservation{}, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tries[o.ID]++
	if h.outOfStock[o.ID] {
		return Reservation{}, errOutOfStock
	}
	id := effectID("rs", o.ID, len(h.reserved[o.ID]))
	h.reserved[o.ID] = append(h.reserved[o.ID], id)
	return Reservation{ID: id}, nil
}

func (h *warehouse) release(ctx context.Context, orderID, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !slices.Contains(h.reserved[orderID], id) {
		return fmt.Errorf("release: no reservation %q of %s", id, orderID)
	}
	if !slices.Contains(h.released[orderID], id) {
		h.released[orderID] = append(h.released[orderID], id)
	}
	return nil
}

// mailer sends the order's confirmation, which names the charge and the
// reservation: the results of the steps before it, run or replayed.
type mailer struct {
	mu       sync.Mutex
	failOnce map[string]bool
	sent     map[string][]string // order id -> "email id (charge id, reservation id)"
	tries    map[string]int      // order id -> send calls
}

func (m *mailer) send(ctx context.Context, o Order, c Charge, r Reservation) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tries[o.ID]++
	if m.failOnce[o.ID] {
		delete(m.failOnce, o.ID)
		return "", errors.New("mailer unavailable")
	}
	id := effectID("em", o.ID, len(m.sent[o.ID]))
	m.sent[o.ID] = append(m.sent[o.ID], fmt.Sprintf("%s (%s, %s)", id, c.ID, r.ID))
	return id, nil
}

// deliveryID names one delivery of an order: its stream sequence and
// delivery count.
type deliveryID struct {
	order string
	seq   int64
	count int
}

// trace keeps what each delivery's handler did with its steps, and what
// the consumer did with each delivery.
type trace struct {
	mu     sync.Mutex
	steps  map[deliveryID][]string
	events map[string][]event // order id -> settled deliveries, in order
}

type event struct {
	worker string
	delivery.Event
}

// stepNotes are the notes of one handler run.
type stepNotes struct {
	t  *trace
	id deliveryID
}

func (t *trace) run(id deliveryID) *stepNotes { return &stepNotes{t, id} }

func (n *stepNotes) note(s string) {
	n.t.mu.Lock()
	defer n.t.mu.Unlock()
	n.t.steps[n.id] = append(n.t.steps[n.id], s)
}

// record returns the Observer of worker's receiver: it keeps what the
// consumer did with each delivery, one settled event per delivery.
func (t *trace) record(worker string) delivery.Observer {
	return delivery.ObserverFunc(func(_ context.Context, e delivery.Event) {
		if !e.Settled {
			return
		}
		_, id, _ := strings.Cut(e.Key, ":")
		t.mu.Lock()
		defer t.mu.Unlock()
		t.events[id] = append(t.events[id], event{worker: worker, Event: e})
	})
}

// print writes the report: per order, what each service did and what came
// of each delivery; the dead letters; the receivers' step counts.
func (s *saga) print(w io.Writer, dead []jetstream.Msg, stats map[string]dedup.Stats) {
	s.trace.mu.Lock()
	defer s.trace.mu.Unlock()
	g, h, m := s.gateway, s.warehouse, s.mailer
	g.mu.Lock()
	defer g.mu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()

	once := true
	for _, o := range orders {
		id := o.ID
		fmt.Fprintln(w, id)
		fmt.Fprintf(w, "    gateway    %d charge request(s), charged %v, %d refund request(s), refunded %v\n",
			g.requests[id], g.charges[id], g.refundRequests[id], g.refunds[id])
		fmt.Fprintf(w, "    warehouse  %d reserve call(s), reserved %v, released %v\n",
			h.tries[id], h.reserved[id], h.released[id])
		fmt.Fprintf(w, "    mailer     %d send call(s), sent %v\n", m.tries[id], m.sent[id])
		for _, e := range s.trace.events[id] {
			steps := s.trace.steps[deliveryID{id, e.Offset, e.DeliveryCount}]
			if len(steps) == 0 { // a duplicate; a given-up message's compensations resumed
				steps = []string{"no step ran"}
			}
			fmt.Fprintf(w, "    %s   seq %d, delivery %d: %s: %s\n", e.worker, e.Offset, e.DeliveryCount, strings.Join(steps, ", "), describe(e.Event))
		}
		want := 1 // reservations and emails: none for order 3, out of stock
		if id == "order-3" {
			want = 0
		}
		once = once && len(g.charges[id]) == 1 && len(h.reserved[id]) == want && len(h.released[id]) == 0 && len(m.sent[id]) == want
	}
	fmt.Fprintf(w, "\nDead letters in %s:\n", dlqSubject)
	for _, d := range dead {
		hd := d.Headers()
		var o Order
		if err := json.Unmarshal(d.Data(), &o); err != nil {
			o.ID = "(undecodable)"
		}
		fmt.Fprintf(w, "    %s  seq %s, reason %s: %s\n", o.ID, hd.Get(delivery.HeaderOffset), hd.Get(delivery.HeaderReason), hd.Get(delivery.HeaderError))
	}
	fmt.Fprintln(w)
	for _, worker := range []string{"worker-a", "worker-b"} {
		st := stats[worker]
		fmt.Fprintf(w, "%s's receiver: %d step(s) run, %d replayed, %d compensation(s) run, %d failed\n",
			worker, st.StepsRun, st.StepsReplayed, st.Compensations, st.CompensationErrors)
	}
	fmt.Fprintf(w, "\nEvery step's effect happened once: %v\n", once)
	fmt.Fprintf(w, "Order 3 refunded once: %v\n", g.refundRequests["order-3"] == 1 && len(g.refunds["order-3"]) == 1)
}

// describe says what one delivery came to.
func describe(e delivery.Event) string {
	d := e.Decision
	switch {
	case e.SettleErr != nil && d.Reason == delivery.ReasonCanceled:
		return "the process died (canceled -> nak, which never reached the broker)"
	case d.Reason == delivery.ReasonDuplicate:
		return "duplicate: answered with the first receipt -> ack"
	case d.Reason == delivery.ReasonProcessed:
		return "processed -> ack"
	case d.Action == delivery.Retry && d.Reason == delivery.ReasonHandlerError:
		return fmt.Sprintf("handler failed (%v) -> nak, retry in %v", errors.Unwrap(e.Err), d.Delay.Round(100*time.Millisecond))
	case d.Action == delivery.DeadLetter && d.Reason == delivery.ReasonCompensationFailed:
		return "given up, its compensations failed -> dead-letter"
	case d.Action == delivery.DeadLetter:
		return fmt.Sprintf("given up (%s): compensations ran -> dead-letter", d.Reason)
	}
	return fmt.Sprintf("%s -> %s", d.Reason, d.Action)
}
