// Command quickstart shows dedup at work on a real broker without any
// external service: it starts an embedded NATS server with JetStream (in a
// temporary directory), publishes orders to a stream, and consumes them with
// a payment handler wrapped by dedup over the in-process memstore. Then it
// prints what was charged once, what was answered as a duplicate and what
// was dead-lettered, and exits.
//
//	go -C examples run ./quickstart    (or: make quickstart)
//
// What happens on the way:
//   - Worker A charges order 1 and its process dies before acknowledging it:
//     JetStream redelivers order 1 to worker B after AckWait.
//   - A producer retry publishes orders 2 and 5 again without Nats-Msg-Id,
//     so JetStream's own duplicate window cannot catch them.
//   - The payment gateway times out once on order 3: the message is Nak'd
//     and retried.
//   - Charging order 4 takes longer than AckWait: the lease heartbeat tells
//     JetStream it is in progress, so it is not redelivered meanwhile.
//   - Two poison messages (not JSON, and no order id) go to the dead-letter
//     stream with their reason.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
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

// Receipt is what charging an order returns, and what duplicates replay.
type Receipt struct {
	ChargeID string `json:"charge_id"`
	Cents    int    `json:"cents"`
}

const (
	ackWait    = time.Second
	slowCharge = 1500 * time.Millisecond // order 4: past AckWait
	subject    = "orders.created"
	dlqSubject = "dlq.orders"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
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
		Durable: "billing", AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxDeliver: 10,
	})
	if err != nil {
		return err
	}

	// The store outlives worker A, as Redis would.
	records, err := memstore.New(nil)
	if err != nil {
		return err
	}
	gw := &gateway{charges: map[string][]string{}, failOnce: map[string]bool{"order-3": true}}
	tally := &tally{byOrder: map[string][]event{}}

	fmt.Fprintln(w, "1. Order 1 is published. Worker A charges it, then its process dies before acknowledging.")
	if err := publish(ctx, js, Order{"order-1", 1999}, true); err != nil {
		return err
	}
	if err := workerA(ctx, url, records, gw, tally); err != nil {
		return err
	}

	fmt.Fprintln(w, "2. Orders 2 to 6 are published; a producer retry sends orders 2 and 5 again without Nats-Msg-Id;")
	fmt.Fprintln(w, "   a message that is not JSON and an order without an id are published too.")
	for i, o := range []Order{{"order-2", 4500}, {"order-3", 1250}, {"order-4", 999}, {"order-5", 30000}, {"order-6", 7700}} {
		if err := publish(ctx, js, o, true); err != nil {
			return err
		}
		if i == 0 || i == 3 {
			if err := publish(ctx, js, o, false); err != nil {
				return err
			}
		}
	}
	for _, poison := range [][]byte{[]byte(`{"id": "order-7", "cents": `), []byte(`{"cents": 500}`)} {
		if _, err := js.Publish(ctx, subject, poison); err != nil {
			return err
		}
	}

	fmt.Fprintln(w, "3. Worker B consumes the stream; order 1 comes back to it after AckWait.")
	rcv, err := newReceiver(records, gw.charge, tally.record("worker-b"))
	if err != nil {
		return err
	}
	b, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{
		Concurrency:       4,
		DeadLetterSubject: dlqSubject,
	})
	if err != nil {
		return err
	}
	// The consumer runs until Stop, which has a deadline of its own: Start's
	// context ending would be a stop nobody asked for.
	if err := b.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	dead, waitErr := waitUntilSettled(ctx, js, cons, 2)
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Stop(stopCtx); err != nil {
		return err
	}
	if waitErr != nil {
		return waitErr
	}

	fmt.Fprintln(w)
	tally.print(w, gw, dead)
	return nil
}

// startServer starts an embedded NATS server with JetStream in a temporary
// directory, on a free port.
func startServer() (url string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "dedup-quickstart-")
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

// newReceiver wraps charge: orders are keyed by the id in their body, which
// every copy carries, with or without Nats-Msg-Id. The consumer reports what
// it did with each delivery to observer.
func newReceiver(records store.Store, charge dedup.Handler[*dedup.Message[Order], Receipt], observer delivery.Observer) (*dedup.Receiver[*dedup.Message[Order], Receipt], error) {
	return dedup.NewReceiver(records, idstrategy.BodyField("id", func(o Order) string { return o.ID }), charge, &dedup.Config{
		Namespace: "billing",
		Lease:     600 * time.Millisecond, // the heartbeat (InProgress) beats at a third of it, well inside AckWait
		Backoff:   dedup.BackoffFunc(func(int) time.Duration { return 100 * time.Millisecond }),
		Observer:  observer,
		Logger:    slog.New(slog.DiscardHandler), // this program prints its own report
	})
}

// workerA is a process that charges order 1 and dies (its connection
// closes) before the acknowledgement goes out.
func workerA(ctx context.Context, url string, records store.Store, gw *gateway, t *tally) error {
	nc, err := natsgo.Connect(url, natsgo.MaxReconnects(0))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cons, err := js.Consumer(ctx, "ORDERS", "billing")
	if err != nil {
		return err
	}
	charged, die := make(chan struct{}), make(chan struct{})
	rcv, err := newReceiver(records, func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
		r, err := gw.charge(ctx, m)
		close(charged)
		<-die // the process dies between the charge and the acknowledgement
		return r, err
	}, t.record("worker-a"))
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
	case <-charged:
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

// gateway is the payment provider: its charges are the side effect that must
// happen once per order.
type gateway struct {
	mu       sync.Mutex
	charges  map[string][]string // order id -> charge ids
	failOnce map[string]bool     // orders whose first charge times out
	next     int
}

func (g *gateway) charge(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
	o := m.Body
	if o.ID == "order-4" {
		select {
		case <-time.After(slowCharge):
		case <-ctx.Done():
			return Receipt{}, ctx.Err()
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.failOnce[o.ID] {
		delete(g.failOnce, o.ID)
		return Receipt{}, errors.New("payment gateway timeout")
	}
	g.next++
	id := fmt.Sprintf("ch_%03d", g.next)
	g.charges[o.ID] = append(g.charges[o.ID], id)
	return Receipt{ChargeID: id, Cents: o.Cents}, nil
}

// tally records every delivery's outcome, in the order they were settled.
type tally struct {
	mu      sync.Mutex
	byOrder map[string][]event
}

type event struct {
	worker string
	delivery.Event
}

// record returns the Observer of worker's receiver: it keeps what the
// consumer did with each delivery, one settled event per delivery.
func (t *tally) record(worker string) delivery.Observer {
	return delivery.ObserverFunc(func(_ context.Context, e delivery.Event) {
		if !e.Settled || e.Decision.Action == delivery.DeadLetter {
			return // dead letters are read back from their stream
		}
		_, id, _ := strings.Cut(e.Key, ":")
		t.mu.Lock()
		defer t.mu.Unlock()
		t.byOrder[id] = append(t.byOrder[id], event{worker: worker, Event: e})
	})
}

func (t *tally) print(w io.Writer, gw *gateway, dead []jetstream.Msg) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ids := make([]string, 0, len(t.byOrder))
	for id := range t.byOrder {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	once := true
	for _, id := range ids {
		charges := gw.charges[id]
		once = once && len(charges) == 1
		fmt.Fprintf(w, "%s  charged %d time(s): %v\n", id, len(charges), charges)
		events := t.byOrder[id]
		for _, e := range events {
			fmt.Fprintf(w, "    %s  seq %d, delivery %d: %s\n", e.worker, e.Offset, e.DeliveryCount, describe(e.Event))
		}
		if id == "order-4" && len(events) == 1 {
			fmt.Fprintf(w, "    (charging took %v, past the %v AckWait: the heartbeat's InProgress kept it from being redelivered)\n", slowCharge, ackWait)
		}
	}
	for _, m := range dead {
		h := m.Headers()
		fmt.Fprintf(w, "poison  seq %s dead-lettered (%s) to %s: %s\n", h.Get(delivery.HeaderOffset), h.Get(delivery.HeaderReason), dlqSubject, h.Get(delivery.HeaderError))
	}
	fmt.Fprintf(w, "\nEvery order charged exactly once: %v\n", once && len(ids) == 6)
}

// describe says what one delivery came to.
func describe(e delivery.Event) string {
	d := e.Decision
	switch {
	case d.Action == delivery.Ack && e.SettleErr != nil && d.Reason == delivery.ReasonProcessed:
		return "processed, but the ack was lost with the process"
	case d.Reason == delivery.ReasonDuplicate:
		return "duplicate: answered with the first receipt -> ack"
	case d.Reason == delivery.ReasonProcessed:
		return "processed -> ack"
	case d.Action == delivery.Retry && d.Reason == delivery.ReasonHandlerError:
		return fmt.Sprintf("handler failed (%v) -> nak, retry in %v", errors.Unwrap(e.Err), d.Delay.Round(100*time.Millisecond))
	case d.Action == delivery.Retry:
		return fmt.Sprintf("%s -> nak, retry in %v", d.Reason, d.Delay.Round(100*time.Millisecond))
	}
	return fmt.Sprintf("%s -> %s", d.Reason, d.Action)
}
