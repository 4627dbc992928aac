package bench

import (
	"context"
	"fmt"
	"testing"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	dedupnats "github.com/dedup-go/dedup/adapters/nats"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/pgoutbox"
)

// sharedJetStream connects to the shared NATS server (JetStream on,
// 127.0.0.1:4222 by default), closed when the row is done.
func sharedJetStream(tb testing.TB) jetstream.JetStream {
	nc, err := natsgo.Connect(testenv.NATS.Addr(tb), natsgo.MaxReconnects(0))
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

// jetStreamOutboxRun creates a file stream of its own, runs send with its
// subject, checks that the stream holds every message once, and deletes
// it.
func jetStreamOutboxRun(tb testing.TB, js jetstream.JetStream, n int, send func(subject string) sample) sample {
	ctx := context.Background()
	name := uniqueName("objs")
	subject := name + ".events"
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject}, Storage: jetstream.FileStorage})
	if err != nil {
		tb.Fatal(err)
	}
	defer func() {
		if err := js.DeleteStream(context.Background(), name); err != nil {
			tb.Errorf("delete stream %s: %v", name, err)
		}
	}()
	s := send(subject)
	info, err := stream.Info(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	if info.State.Msgs != uint64(n) {
		tb.Fatalf("the stream holds %d messages, want %d", info.State.Msgs, n)
	}
	return s
}

// bareJetStreamPublish is the publisher a user would write: every message
// published asynchronously with its id as Nats-Msg-Id, at most
// outboxWindow awaiting their PubAck; each PubAck is checked.
func bareJetStreamPublish(tb testing.TB, js jetstream.JetStream, subject string, evs []outboxEvent) {
	ctx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
	defer cancel()
	futures := make([]jetstream.PubAckFuture, len(evs))
	await := func(f jetstream.PubAckFuture) {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			tb.Fatalf("publish not acknowledged: %v", err)
		case <-ctx.Done():
			tb.Fatal(ctx.Err())
		}
	}
	for i, e := range evs {
		if i >= outboxWindow {
			await(futures[i-outboxWindow])
		}
		m := &natsgo.Msg{Subject: subject, Data: e.body, Header: natsgo.Header{}}
		f, err := js.PublishMsgAsync(m, jetstream.WithMsgID(e.id))
		if err != nil {
			tb.Fatal(err)
		}
		futures[i] = f
	}
	for _, f := range futures[max(len(evs)-outboxWindow, 0):] {
		await(f)
	}
}

func init() {
	register(row{
		name: "outbox relay to JetStream (PostgreSQL outbox, 1 relay)",
		unit: "msgs/s", n: 20000,
		setup: func(tb testing.TB) []side {
			js := sharedJetStream(tb)
			pool := openPostgres(tb)
			pub, err := dedupnats.NewOutboxPublisher(js, nil)
			if err != nil {
				tb.Fatal(err)
			}
			evs := outboxEvents(20000)
			relay := func(buckets, batch int) side {
				return side{name: fmt.Sprintf("pgoutbox relay, Buckets %d, BatchSize %d", buckets, batch), run: func(tb testing.TB, n int) sample {
					return jetStreamOutboxRun(tb, js, n, func(subject string) sample {
						return relayRun(tb, pool, pub, buckets, pgoutbox.RelayOptions{BatchSize: batch}, evs[:n], subject)
					})
				}}
			}
			return []side{
				{name: fmt.Sprintf("bare PublishMsgAsync, Nats-Msg-Id, %d PubAcks in flight", outboxWindow), run: func(tb testing.TB, n int) sample {
					return jetStreamOutboxRun(tb, js, n, func(subject string) sample {
						return rate(n, func() { bareJetStreamPublish(tb, js, subject, evs[:n]) })
					})
				}},
				relay(64, 256), relay(64, 1024), relay(64, 4096), relay(8, 4096),
				{name: "pgoutbox relay, Buckets 64, BatchSize 4096, every message a key of its own (no order to keep)", run: func(tb testing.TB, n int) sample {
					return jetStreamOutboxRun(tb, js, n, func(subject string) sample {
						return relayRun(tb, pool, pub, 64, pgoutbox.RelayOptions{BatchSize: 4096}, ownKeys(evs[:n]), subject)
					})
				}},
				{name: "pgoutbox relay, Buckets 64, BatchSize 4096, acknowledged call by call (Publish, not PublishEach)", run: func(tb testing.TB, n int) sample {
					return jetStreamOutboxRun(tb, js, n, func(subject string) sample {
						return relayRun(tb, pool, callByCall{pub}, 64, pgoutbox.RelayOptions{BatchSize: 4096}, evs[:n], subject)
					})
				}},
			}
		},
	})
}
