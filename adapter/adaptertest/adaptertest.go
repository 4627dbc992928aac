// Package adaptertest is the conformance suite of broker adapters: the
// rules of package adapter (see its documentation), checked on a real
// broker, as package storetest checks stores.
//
// An adapter's test describes its broker in a [Harness] (how to make a
// source of messages of the test's own, publish to it, make a consumer of
// it for a given receiver, and read its dead-letter target) and calls
// [Run]:
//
//	func TestConformance(t *testing.T) {
//		adaptertest.Run(t, adaptertest.Harness{NewSource: func(t *testing.T) adaptertest.Source {
//			queue := declareQueues(t) // a queue and a dead-letter queue of the test's own
//			return adaptertest.Source{
//				Name:        queue,
//				Publish:     func(ctx context.Context, m adaptertest.Message) error { ... },
//				NewConsumer: func(rcv *dedup.Receiver[*dedup.Message[adaptertest.Order], adaptertest.Receipt]) (dedup.Consumer, error) {
//					return mybroker.NewConsumer(conn, queue, rcv, &mybroker.Options{DeadLetterQueue: queue + ".dlq"})
//				},
//				DeadLetters: func(ctx context.Context, n int) ([]adaptertest.DeadLetter, error) { ... },
//			}
//		}})
//	}
//
// The suite makes the receivers itself (over an in-process store, with a
// fast backoff), with handlers that respect their context, and waits for
// what it expects through the receiver's Observer, each wait bounded by
// Harness.Timeout.
package adaptertest

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/memstore"
)

// Order is the body of every message the suite publishes, as JSON: the
// consumers the harness makes decode bodies as JSON (every adapter's
// default Decoder). The suite keys the receiver on ID.
type Order struct {
	ID    string `json:"id"`
	Cents int    `json:"cents"`
}

// Receipt is the result of the suite's handlers.
type Receipt struct {
	OrderID string `json:"order_id"`
	Run     int    `json:"run"`
}

// Message is what the suite publishes.
type Message struct {
	// Data is the body: an Order as JSON, or bytes that are not JSON.
	Data []byte
	// ID is the producer's message id, to be published where the broker
	// carries one (AMQP's message-id; JetStream's Nats-Msg-Id). Empty for
	// none. The suite sets it only when Harness.NoMessageID is false, on
	// messages it publishes once.
	ID string
	// Header holds headers to publish with the message.
	Header map[string]string
}

// DeadLetter is a message that reached the dead-letter target.
type DeadLetter struct {
	Header delivery.Header
	Data   []byte
}

// Source is one subtest's source of messages on the broker: a stream and
// a subject, a queue, a topic, with a dead-letter target of its own,
// which no other subtest and no other test uses.
type Source struct {
	// Name is where the consumers read (the subject, the queue, the
	// topic): the Source of their deliveries, and the dead letters'
	// delivery.HeaderSource. Required.
	Name string
	// Publish publishes m to the source, returning once the broker took
	// it. Required.
	Publish func(ctx context.Context, m Message) error
	// NewConsumer makes a consumer of the source for rcv, not started.
	// The suite may call it again once an earlier consumer stopped: the
	// new one goes on where that one left off (the same durable consumer,
	// queue, consumer group). Each consumer is to settle every delivery
	// through rcv, dead-letter poison to the source's target (or drop it,
	// with Harness.DropPoison), and release on Stop whatever it made.
	// Required.
	NewConsumer func(rcv *dedup.Receiver[*dedup.Message[Order], Receipt]) (dedup.Consumer, error)
	// DeadLetters returns the messages that reached the source's
	// dead-letter target, in order: at least n of them, waiting for them
	// until ctx ends (it then returns what it read and an error). The
	// suite asks only after the consumers reported the dead letters
	// settled. Required unless Harness.DropPoison.
	DeadLetters func(ctx context.Context, n int) ([]DeadLetter, error)
}

// Harness is what the suite needs to test one adapter's consumer, and
// what its broker cannot do.
type Harness struct {
	// NewSource makes a source for one subtest, of its own, and removes
	// it when t ends. Required.
	NewSource func(t *testing.T) Source

	// NoRedelivery says the broker cannot hand a message back for a later
	// delivery (core NATS): a retry becomes a dead letter, and the
	// subtests about retries and hard stops skip.
	NoRedelivery bool
	// RetryLater says the consumers retry through a copy (a retry tier, a
	// retry topic) rather than in place: the suite then requires a retry
	// counted in ConsumerStats.RetriedLater, else in RetriedInPlace.
	RetryLater bool
	// NoMessageID says the broker carries no producer's message id
	// (Kafka): the dead letters' delivery.HeaderOriginalMessageID is not
	// checked.
	NoMessageID bool
	// DropPoison says the consumers drop poison instead of dead-lettering
	// it (the adapters' Options.DropPoison): poison is then counted in
	// ConsumerStats.PoisonDropped, and no dead letter is read.
	DropPoison bool

	// IgnoreGoroutines names functions, as goleak.IgnoreAnyFunction takes
	// them, whose goroutines NoLeaks does not count: those an in-process
	// broker starts for a connection the harness holds (kfake starts one
	// per read: "github.com/twmb/franz-go/pkg/kfake.(*clientConn).read.func1").
	// Defaults to none.
	IgnoreGoroutines []string

	// Timeout bounds each wait of the suite. Defaults to 30s.
	Timeout time.Duration
	// Grace is how long the suite gives a consumer to do what it must not
	// (return from Stop while a handler runs): the only waits of the suite
	// on something that is not expected to happen. Defaults to 200ms.
	Grace time.Duration
}

// Run runs the conformance suite against the adapter h describes, one
// subtest per rule, each on a source of its own:
//
//	Lifecycle     Start; a second Start fails; Stop drains (a handler running
//	              when Stop is called completes, and its delivery is acked and
//	              settled, before Stop returns); Stopped closes; a second Stop
//	              returns nil; Err is nil after Stop; nothing is acked while its
//	              handler runs
//	Duplicate     a message published twice has one effect; both deliveries
//	              are acked (ConsumerStats Delivered and Acked)
//	Undecodable   an undecodable body is dead-lettered with delivery.HeaderReason
//	              "undecodable", delivery.HeaderSource, its data and headers
//	              (counted in DeadLettered); the handler never runs
//	Retry         a handler error is retried, and the retry's success has
//	              the message's one effect
//	SettledOnce   an Observer hears one settled Event per delivery, and the
//	              consumer's Stats count every delivery once
//	HardStop      a Stop whose context ended hands the deliveries it cut short
//	              back to the broker: a new consumer handles them
//	NoLeaks       no goroutine of the consumer outlives Stop
//
// The subtests run one at a time, and NoLeaks looks at every goroutine of
// the process: call Run from a test that is not parallel (top-level tests
// that are parallel wait until it ends).
func Run(t *testing.T, h Harness) {
	t.Helper()
	require.NotNil(t, h.NewSource, "adaptertest: Harness.NewSource is nil")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.redelivers && h.NoRedelivery {
				t.Skip("adaptertest: the broker does not redeliver (Harness.NoRedelivery)")
			}
			c.run(t, setup(t, h))
		})
	}
}

// testCase is one rule.
type testCase struct {
	name       string
	redelivers bool // needs a broker that redelivers
	run        func(t *testing.T, f *fixture)
}

var cases = []testCase{
	{"Lifecycle", false, testLifecycle},
	{"Duplicate", false, testDuplicate},
	{"Undecodable", false, testUndecodable},
	{"Retry", true, testRetry},
	{"SettledOnce", false, testSettledOnce},
	{"HardStop", true, testHardStop},
	{"NoLeaks", false, testNoLeaks},
}

// fixture is one subtest's source, store, observer and effects.
type fixture struct {
	h       Harness
	src     Source
	store   *memstore.Store
	obs     *recorder
	timeout time.Duration
	grace   time.Duration

	mu      sync.Mutex
	effects map[string]int // effects by order id
	calls   map[string]int // handler calls by order id
}

func setup(t *testing.T, h Harness) *fixture {
	t.Helper()
	src := h.NewSource(t)
	require.NotEmpty(t, src.Name, "adaptertest: Source.Name is empty")
	require.NotNil(t, src.Publish, "adaptertest: Source.Publish is nil")
	require.NotNil(t, src.NewConsumer, "adaptertest: Source.NewConsumer is nil")
	require.True(t, src.DeadLetters != nil || h.DropPoison, "adaptertest: Source.DeadLetters is nil, and Harness.DropPoison is not set")
	st, err := memstore.New(nil)
	require.NoError(t, err)
	return &fixture{
		h: h, src: src, store: st, obs: newRecorder(),
		timeout: cmp.Or(h.Timeout, testenv.WaitTimeout),
		grace:   cmp.Or(h.Grace, 200*time.Millisecond),
		effects: map[string]int{}, calls: map[string]int{},
	}
}

// handler is a handler of the suite's.
type handler = dedup.Handler[*dedup.Message[Order], Receipt]

// receiver makes a receiver over the subtest's store with fn as its
// handler, which counts its calls; the handler's effect is counted by
// effect.
func (f *fixture) receiver(t *testing.T, fn handler) *dedup.Receiver[*dedup.Message[Order], Receipt] {
	t.Helper()
	key := func(m *dedup.Message[Order]) (string, error) { return m.Body.ID, nil }
	counted := func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
		f.mu.Lock()
		f.calls[m.Body.ID]++
		f.mu.Unlock()
		return fn(ctx, m)
	}
	rcv, err := dedup.NewReceiver(f.store, key, counted, &dedup.Config{
		Namespace:       "adaptertest",
		Lease:           5 * time.Second,
		MaxAttempts:     5,
		Backoff:         dedup.BackoffFunc(func(int) time.Duration { return 50 * time.Millisecond }),
		StoreRetryDelay: 200 * time.Millisecond,
		Logger:          slog.New(slog.DiscardHandler),
		Observer:        f.obs,
	})
	require.NoError(t, err)
	return rcv
}

// consumer makes a consumer of the source for a receiver with fn as its
// handler; it is stopped when t ends, if the test did not.
func (f *fixture) consumer(t *testing.T, fn handler) dedup.Consumer {
	t.Helper()
	c, err := f.src.NewConsumer(f.receiver(t, fn))
	require.NoError(t, err, "Source.NewConsumer")
	require.NotNil(t, c, "Source.NewConsumer returned a nil consumer")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
		defer cancel()
		_ = c.Stop(ctx) // the test may have stopped it
	})
	return c
}

// start starts c for the rest of the test.
func (f *fixture) start(t *testing.T, c dedup.Consumer) {
	t.Helper()
	// Start's context is the consumer's lifetime: the test's own, which
	// ends after the test stopped the consumer.
	require.NoError(t, c.Start(t.Context()), "Start")
}

// stop stops c, requiring that it drains within the suite's timeout,
// and that it then reports itself stopped, without an error.
func (f *fixture) stop(t *testing.T, c dedup.Consumer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	require.NoError(t, c.Stop(ctx), "Stop")
	f.recv(t, c.Stopped(), "Stopped to close after Stop returned")
	require.NoError(t, c.Err(), "Err after Stop")
}

// publish publishes m.
func (f *fixture) publish(t *testing.T, m Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	require.NoError(t, f.src.Publish(ctx, m), "Source.Publish")
}

// order returns o as a message body.
func order(t *testing.T, o Order) []byte {
	t.Helper()
	b, err := json.Marshal(o)
	require.NoError(t, err)
	return b
}

// effect counts one effect of the handler for id and returns the
// receipt of the call.
func (f *fixture) effect(id string) Receipt {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.effects[id]++
	return Receipt{OrderID: id, Run: f.effects[id]}
}

// counts returns the effects and the handler's calls for id.
func (f *fixture) counts(id string) (effects, calls int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.effects[id], f.calls[id]
}

// recv receives from ch within the suite's timeout.
func (f *fixture) recv(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	timer := time.NewTimer(f.timeout)
	defer timer.Stop()
	select {
	case <-ch:
	case <-timer.C:
		t.Fatalf("adaptertest: timed out after %v waiting for %s", f.timeout, what)
	}
}

// succeed is a handler that has its effect and succeeds.
func (f *fixture) succeed(_ context.Context, m *dedup.Message[Order]) (Receipt, error) {
	return f.effect(m.Body.ID), nil
}

// recorder is the receivers' Observer: it keeps every event, and wakes
// whoever waits for one.
type recorder struct {
	mu        sync.Mutex
	settled   []delivery.Event
	unsettled []delivery.Event
	changed   chan struct{} // closed and replaced at each event
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{})} }

func (r *recorder) Observe(_ context.Context, e delivery.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.Settled {
		r.settled = append(r.settled, e)
	} else {
		r.unsettled = append(r.unsettled, e)
	}
	close(r.changed)
	r.changed = make(chan struct{})
}

// events returns the settled events so far, and the others.
func (r *recorder) events() (settled, unsettled []delivery.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery.Event(nil), r.settled...), append([]delivery.Event(nil), r.unsettled...)
}

// waitFor waits, within the suite's timeout, until ok holds for the
// settled events, and returns them.
func (f *fixture) waitFor(t *testing.T, what string, ok func(settled []delivery.Event) bool) []delivery.Event {
	t.Helper()
	timer := time.NewTimer(f.timeout)
	defer timer.Stop()
	for {
		f.obs.mu.Lock()
		settled := append([]delivery.Event(nil), f.obs.settled...)
		changed := f.obs.changed
		f.obs.mu.Unlock()
		if ok(settled) {
			return settled
		}
		select {
		case <-changed:
		case <-timer.C:
			t.Fatalf("adaptertest: timed out after %v waiting for %s; settled events so far:\n%s", f.timeout, what, describe(settled))
		}
	}
}

// waitSettled waits until n deliveries were settled.
func (f *fixture) waitSettled(t *testing.T, n int, what string) []delivery.Event {
	t.Helper()
	return f.waitFor(t, what, func(s []delivery.Event) bool { return len(s) >= n })
}

// count returns how many events match.
func count(events []delivery.Event, match func(e delivery.Event) bool) int {
	n := 0
	for _, e := range events {
		if match(e) {
			n++
		}
	}
	return n
}

// acked matches the acks of key's deliveries.
func acked(key string) func(delivery.Event) bool {
	return func(e delivery.Event) bool { return e.Key == key && e.Decision.Action == delivery.Ack }
}

// describe lists events for a failure message.
func describe(events []delivery.Event) string {
	if len(events) == 0 {
		return "  (none)"
	}
	var b []byte
	for _, e := range events {
		b = append(b, "  key="...)
		b = append(b, e.Key...)
		b = append(b, " status="...)
		b = append(b, e.Status.String()...)
		b = append(b, " decision="...)
		b = append(b, e.Decision.Action.String()...)
		b = append(b, '/')
		b = append(b, e.Decision.Reason...)
		if e.SettleErr != nil {
			b = append(b, " settle-error="...)
			b = append(b, e.SettleErr.Error()...)
		}
		b = append(b, '\n')
	}
	return string(b)
}

// errTransient is the suite's handler error that a retry overcomes.
var errTransient = errors.New("adaptertest: transient failure")

// key is the receiver's key of an order id.
func key(id string) string { return "adaptertest:" + id }
