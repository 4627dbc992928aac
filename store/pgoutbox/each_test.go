package pgoutbox_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/outbox"
	"github.com/dedup-go/dedup/store/pgoutbox"
	"github.com/dedup-go/dedup/store/pgoutbox/internal/relaytest"
)

// ackFunc is an outbox.AckPublisher of a function; its Publish is never
// called by a relay.
type ackFunc func(ctx context.Context, msgs []outbox.Message, ack func(int, error)) error

func (f ackFunc) Publish(context.Context, []outbox.Message) error {
	panic("the relay called Publish on an AckPublisher")
}

func (f ackFunc) PublishEach(ctx context.Context, msgs []outbox.Message, ack func(int, error)) error {
	return f(ctx, msgs, ack)
}

// TestRelayEachFreesKeyAtOnce: with an AckPublisher, a key's next message
// is handed over as soon as its predecessor was reported acknowledged,
// while the call that carried it still waits for another message: the
// publisher holds b-1's acknowledgement until it has seen a-2, which the
// relay sends only after a-1's report.
func TestRelayEachFreesKeyAtOnce(t *testing.T) {
	t.Parallel()
	db := relaytest.NewDB(t, 8)
	ob := db.Outbox(t, &pgoutbox.Options{Buckets: 1})
	w := relaytest.Writer{DB: db, OB: ob}
	for _, m := range []pgoutbox.Message{
		{Name: "a-1", Destination: "orders.events", OrderingKey: "a", Body: []byte("a-1")},
		{Name: "b-1", Destination: "orders.events", OrderingKey: "b", Body: []byte("b-1")},
		{Name: "a-2", Destination: "orders.events", OrderingKey: "a", Body: []byte("a-2")},
	} {
		_, err := w.Write(t.Context(), "order:"+m.Name, m)
		require.NoError(t, err)
	}
	sawA2 := make(chan struct{})
	var once sync.Once
	var calls atomic.Int32
	pub := ackFunc(func(ctx context.Context, msgs []outbox.Message, ack func(int, error)) error {
		calls.Add(1)
		for i, m := range msgs {
			switch string(m.Body) {
			case "a-2":
				once.Do(func() { close(sawA2) })
				ack(i, nil)
			case "b-1":
				defer func() {
					select {
					case <-sawA2:
						ack(i, nil)
					case <-ctx.Done():
					}
				}()
			default:
				ack(i, nil)
			}
		}
		return ctx.Err()
	})
	ev := &relaytest.Events{}
	r := relaytest.NewRelay(t, ob, pub, &pgoutbox.RelayOptions{Lease: 3 * testenv.WaitTimeout, PublishTimeout: testenv.WaitTimeout, Observer: ev})
	relaytest.Start(t, r)
	relaytest.WaitFor(t, testenv.WaitTimeout, "every message sent", func() bool { return db.Unsent(t) == 0 })
	require.Empty(t, ev.Of(outbox.EventFailed, ""), "a-2 went out while b-1's call waited")
	require.GreaterOrEqual(t, calls.Load(), int32(2))
}

// TestRelayEachSilentBroker: an AckPublisher that reports nothing until
// its context ends (the broker down or silent) stops the pump from
// starting more calls: the first pump makes the calls its window holds
// (16 of 64 messages for 1,100 messages of keys of their own) and no
// more, and its messages are published again later.
func TestRelayEachSilentBroker(t *testing.T) {
	t.Parallel()
	db := relaytest.NewDB(t, 8)
	ob := db.Outbox(t, &pgoutbox.Options{Buckets: 1})
	w := relaytest.Writer{DB: db, OB: ob}
	var msgs []pgoutbox.Message
	for i := range 1100 {
		msgs = append(msgs, pgoutbox.Message{Name: fmt.Sprint(i), Destination: "orders.events", OrderingKey: fmt.Sprint("key-", i), Body: []byte("x")})
	}
	_, err := w.Write(t.Context(), "order:many", msgs...)
	require.NoError(t, err)
	var calls atomic.Int32
	pub := ackFunc(func(ctx context.Context, msgs []outbox.Message, ack func(int, error)) error {
		calls.Add(1)
		<-ctx.Done()
		return ctx.Err()
	})
	ev := &relaytest.Events{}
	r := relaytest.NewRelay(t, ob, pub, &pgoutbox.RelayOptions{BatchSize: 2048, Lease: 5 * time.Second, PublishTimeout: 300 * time.Millisecond,
		MinBackoff: time.Second, MaxBackoff: time.Second, Observer: ev})
	relaytest.Start(t, r)
	relaytest.WaitFor(t, testenv.WaitTimeout, "a failed pump", func() bool { return len(ev.Of(outbox.EventFailed, "publish")) > 0 })
	require.LessOrEqual(t, calls.Load(), int32(16), "calls after the first came back with nothing acknowledged")
	require.Equal(t, 1100, ev.Of(outbox.EventFailed, "publish")[0].Messages, "every message read counts as failed")
	require.Equal(t, 1100, db.Unsent(t))
}
