package bench

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/dedup-go/dedup"
	dedupnats "github.com/dedup-go/dedup/adapters/nats"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/testenv"
)

// startNATS starts an embedded nats-server with JetStream (the current
// release, not the shared 2.9), stopped when the row is done.
func startNATS(tb testing.TB) jetstream.JetStream {
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: tb.TempDir(), NoLog: true, NoSigs: true,
	})
	if err != nil {
		tb.Fatal(err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		tb.Fatal("embedded nats-server did not start")
	}
	tb.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	nc, err := natsgo.Connect(srv.ClientURL(), natsgo.MaxReconnects(0))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1<<16))
	if err != nil {
		tb.Fatal(err)
	}
	return js
}

// jetStreamRun publishes n orders to a memory stream of their own, runs
// consume on its durable consumer, checks that every order was handled
// once and every Ack reached the server, and deletes the stream. The rate
// is the tally's, from the first order handled to the last: starting to
// pull before, and stopping the consumer after (draining its workers), are
// outside the clock.
func jetStreamRun(tb testing.TB, js jetstream.JetStream, n int, side string, consume func(cons jetstream.Consumer, t *tally)) sample {
	ctx := context.Background()
	name := uniqueName("js")
	subject := name + ".orders"
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject}, Storage: jetstream.MemoryStorage}); err != nil {
		tb.Fatal(err)
	}
	defer func() {
		if err := js.DeleteStream(context.Background(), name); err != nil {
			tb.Errorf("delete stream %s: %v", name, err)
		}
	}()
	cons, err := js.CreateOrUpdateConsumer(ctx, name, jetstream.ConsumerConfig{
		Durable: "worker", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: 5,
	})
	if err != nil {
		tb.Fatal(err)
	}
	bodies, _ := ordersJSON(n)
	for _, b := range bodies {
		if _, err := js.PublishAsync(subject, b); err != nil {
			tb.Fatal(err)
		}
	}
	testenv.Recv(tb, js.PublishAsyncComplete(), "the orders published")
	t := newTally(n)
	consume(cons, t)
	s := t.sample()
	t.check(tb, side)
	// Every Ack reached the server: the sides settle the same way.
	deadline := time.Now().Add(testenv.WaitTimeout)
	for {
		info, err := cons.Info(ctx)
		if err == nil && info.NumPending == 0 && info.NumAckPending == 0 {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s: the consumer still has unsettled messages (%v)", side, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return s
}

// The defaults of dedupnats' Options.Prefetch and Concurrency, which the
// bare loop matches.
const (
	natsDefaultPrefetch    = 128
	natsDefaultConcurrency = 8
)

// bareJetStream is the consumer a user would write: natsDefaultConcurrency
// workers pulling with the adapter's prefetch, decoding, handling and
// sending an asynchronous Ack (the adapter's default ack mode).
func bareJetStream(tb testing.TB, cons jetstream.Consumer, t *tally) {
	iter, err := cons.Messages(jetstream.PullMaxMessages(natsDefaultPrefetch), jetstream.WithMessagesErrOnMissingHeartbeat(false))
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	for range natsDefaultConcurrency {
		wg.Go(func() {
			for {
				m, err := iter.Next()
				if err != nil {
					return
				}
				o, err := decode(m.Data())
				if err != nil {
					_ = m.Term()
					continue
				}
				t.add(o)
				_ = m.Ack()
			}
		})
	}
	testenv.Recv(tb, t.done, "every order consumed")
	iter.Stop()
	testenv.Wait(tb, &wg, "the workers")
}

// dedupJetStream is the adapter's Consumer over memstore, with the same
// concurrency, prefetch and ack mode (its defaults).
func dedupJetStream(tb testing.TB, js jetstream.JetStream, cons jetstream.Consumer, t *tally) {
	rcv, err := dedup.NewReceiver(orderStore(tb, t.n), idstrategy.BodyField("id", func(o order) string { return o.ID }),
		func(_ context.Context, m *dedup.Message[order]) (struct{}, error) {
			t.add(m.Body)
			return struct{}{}, nil
		}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	c, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{Concurrency: natsDefaultConcurrency, DropPoison: true})
	if err != nil {
		tb.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	testenv.Recv(tb, t.done, "every order consumed")
	// Stop drains: it returns once every worker has settled its message.
	ctx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
	defer cancel()
	if err := c.Stop(ctx); err != nil && !errors.Is(err, context.Canceled) {
		tb.Fatal(err)
	}
}

func init() {
	register(row{
		name: "JetStream consumer, memstore, trivial handler",
		unit: "msgs/s", n: 50000, cpu: true,
		setup: func(tb testing.TB) []side {
			js := startNATS(tb)
			return []side{
				{name: "bare jetstream consumer (8 workers, async Ack)", run: func(tb testing.TB, n int) sample {
					return jetStreamRun(tb, js, n, "bare", func(cons jetstream.Consumer, t *tally) { bareJetStream(tb, cons, t) })
				}},
				{name: "dedupnats Consumer, memstore", run: func(tb testing.TB, n int) sample {
					return jetStreamRun(tb, js, n, "dedup", func(cons jetstream.Consumer, t *tally) { dedupJetStream(tb, js, cons, t) })
				}},
			}
		},
	})
}
