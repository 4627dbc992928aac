package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/outbox"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/pgoutbox"
)

// The outbox rows measure pgoutbox's relay beside the bare publisher loop
// a user would write, with the same acknowledgements, on each broker.
// Both sides send the same messages (ids, bodies of outboxBodySize bytes,
// ordering keys) to a destination of each run's own. The relay side
// commits them to an outbox table of the run's own, on the shared
// PostgreSQL, before the clock starts (what handlers would have written:
// outboxPerTx messages per transaction, through Writer.Add), then starts
// one relay and stops the clock when it has marked the last one sent, the
// broker having acknowledged it. The bare side publishes them from memory
// with a window of acknowledgements in flight. Each side then checks that
// the broker holds every message once, and the relay side that no row is
// left unsent.

// Sizes of the outbox rows' messages.
const (
	// outboxKeys is how many ordering keys (customers) the messages
	// spread over, drawn at random: about 20 messages per key, which a
	// relay publishes one after the other, each once the previous one was
	// acknowledged (the package documentation of pgoutbox, "Order").
	outboxKeys = 1000
	// outboxBodySize is each message's body, in bytes.
	outboxBodySize = 200
	// outboxPerTx is how many messages one handler transaction writes.
	outboxPerTx = 100
	// outboxWriters is how many transactions write the outbox at once
	// (before the clock starts).
	outboxWriters = 4
	// outboxWindow is how many messages the bare publishers have in
	// flight, awaiting their acknowledgements: the window of a
	// well-written publisher, which publishes on while the broker
	// acknowledges. JetStream and RabbitMQ gain nothing past 1024 here;
	// kfake, in memory, goes on gaining (about 1.5x at 4096).
	outboxWindow = 1024
)

// outboxEvent is one message of an outbox row, the same on both sides.
type outboxEvent struct {
	id, key string
	body    []byte
}

// outboxEvents returns n messages, the same on every call: ordering keys
// drawn at random among outboxKeys, JSON bodies padded to outboxBodySize,
// and the ids Writer.Add gives them (the claim of transaction j, position
// k within it).
func outboxEvents(n int) []outboxEvent {
	rng := rand.New(rand.NewPCG(26, 26))
	evs := make([]outboxEvent, n)
	for i := range evs {
		key := fmt.Sprintf("customer-%04d", rng.IntN(outboxKeys))
		body := fmt.Appendf(nil, `{"order":"o-%09d","customer":%q,"amount":%d,"note":"`, i, key, rng.IntN(100000))
		for len(body) < outboxBodySize-2 {
			body = append(body, 'x')
		}
		body = append(body, `"}`...)
		evs[i] = outboxEvent{
			id:   outbox.MessageID(outboxClaim(i/outboxPerTx), strconv.Itoa(i%outboxPerTx+1)),
			key:  key,
			body: body,
		}
	}
	return evs
}

// ownKeys returns evs with every message an ordering key of its own:
// nothing to keep in order, what a relay does without the order per key.
func ownKeys(evs []outboxEvent) []outboxEvent {
	out := make([]outboxEvent, len(evs))
	for i, e := range evs {
		e.key = "order-" + strconv.Itoa(i)
		out[i] = e
	}
	return out
}

// outboxClaim is the key of the claim of the j-th handler transaction.
func outboxClaim(j int) string { return "bench:payment-" + strconv.Itoa(j) }

// newOutbox creates an outbox table of its own in pool's schema (the
// row's), dropped with its lease and relay tables when done is called.
func newOutbox(tb testing.TB, pool *pgxpool.Pool, buckets int) (ob *pgoutbox.Outbox, table string, done func()) {
	table = uniqueName("ob")
	ob, err := pgoutbox.New(context.Background(), pool, &pgoutbox.Options{Table: table, Migrate: true, Buckets: buckets, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	return ob, table, func() {
		ctx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
		defer cancel()
		if _, err := pool.Exec(ctx, fmt.Sprintf("DROP TABLE %[1]s, %[1]s_leases, %[1]s_relays", table)); err != nil {
			tb.Errorf("drop the outbox %s: %v", table, err)
		}
	}
}

// fillOutbox commits evs to ob, addressed to dest, as handlers would:
// outboxPerTx messages per transaction, each under the claim of its
// incoming message, outboxWriters transactions at once.
func fillOutbox(tb testing.TB, pool *pgxpool.Pool, ob *pgoutbox.Outbox, evs []outboxEvent, dest string) {
	ctx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
	defer cancel()
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(outboxWriters)
	for j := 0; j*outboxPerTx < len(evs); j++ {
		chunk := evs[j*outboxPerTx : min((j+1)*outboxPerTx, len(evs))]
		g.Go(func() error {
			ctx := store.ContextWithClaim(ctx, &store.HeldClaim{Key: outboxClaim(j), Attempt: 1})
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				w, err := ob.Writer(ctx, tx)
				if err != nil {
					return err
				}
				for _, e := range chunk {
					id, err := w.Add(ctx, pgoutbox.Message{Destination: dest, OrderingKey: e.key, Body: e.body})
					if err != nil {
						return err
					}
					if id != e.id {
						return fmt.Errorf("Writer.Add gave id %s, the bare side sends %s", id, e.id)
					}
				}
				return nil
			})
		})
	}
	if err := g.Wait(); err != nil {
		tb.Fatal(err)
	}
}

// ackAtOnce is a publisher that acknowledges every message at once,
// sending nothing: a relay through it measures the relay's own ceiling,
// what PostgreSQL and the relay's pipeline allow.
type ackAtOnce struct{}

func (ackAtOnce) Publish(context.Context, []outbox.Message) error { return nil }

// callByCall hides a publisher's PublishEach (outbox.AckPublisher): a
// relay through it waits for each call's whole answer, as it did before
// the interface, for comparison.
type callByCall struct{ p outbox.Publisher }

func (c callByCall) Publish(ctx context.Context, msgs []outbox.Message) error {
	return c.p.Publish(ctx, msgs)
}

// relayRun commits evs to an outbox of the run's own, addressed to dest,
// then starts a relay publishing through pub with opts, and returns the
// messages per second from its start until it marked the last one sent.
// Any failed step of the relay (a publish not acknowledged, a mark that
// failed) fails the run: a retry after a backoff is not the throughput
// measured here.
func relayRun(tb testing.TB, pool *pgxpool.Pool, pub outbox.Publisher, buckets int, opts pgoutbox.RelayOptions, evs []outboxEvent, dest string) sample {
	ob, table, drop := newOutbox(tb, pool, buckets)
	defer drop()
	fillOutbox(tb, pool, ob, evs, dest)
	// The statistics autovacuum keeps of a table in use.
	if _, err := pool.Exec(context.Background(), "ANALYZE "+table); err != nil {
		tb.Fatal(err)
	}
	var (
		sent     atomic.Int64
		allSent  = make(chan struct{})
		once     sync.Once
		failures = make(chan error, 1)
	)
	opts.Observer = outbox.ObserverFunc(func(_ context.Context, e outbox.Event) {
		switch e.Kind {
		case outbox.EventPublished:
			if sent.Add(int64(e.Messages)) >= int64(len(evs)) {
				once.Do(func() { close(allSent) })
			}
		case outbox.EventFailed:
			select {
			case failures <- fmt.Errorf("%s: %w", e.Op, e.Err):
			default:
			}
		}
	})
	relay, err := pgoutbox.NewRelay(ob, pub, &opts)
	if err != nil {
		tb.Fatal(err)
	}
	s := rate(len(evs), func() {
		if err := relay.Start(context.Background()); err != nil {
			tb.Fatal(err)
		}
		select {
		case <-allSent:
		case err := <-failures:
			tb.Fatalf("the relay failed: %v", err)
		case <-time.After(testenv.WaitTimeout):
			tb.Fatalf("the relay marked %d of %d messages sent in %v", sent.Load(), len(evs), testenv.WaitTimeout)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
	defer cancel()
	if err := relay.Stop(ctx); err != nil {
		tb.Fatalf("stop the relay: %v", err)
	}
	select {
	case err := <-failures:
		if !errors.Is(err, context.Canceled) {
			tb.Fatalf("the relay failed: %v", err)
		}
	default:
	}
	var unsent int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE sent_at IS NULL").Scan(&unsent); err != nil {
		tb.Fatal(err)
	}
	if unsent != 0 {
		tb.Fatalf("%d messages left unsent", unsent)
	}
	return s
}
