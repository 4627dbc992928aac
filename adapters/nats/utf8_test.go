package dedupnats_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupnats "github.com/dedup-go/dedup/adapters/nats"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/store/memstore"
)

// TestInvalidUTF8Bodies: {"id":"\xff\xfe-1"} and {"id":"\xfe\xff-1"} are
// different orders that encoding/json would both decode to the id
// "\uFFFD\uFFFD-1", answering the second as a duplicate of the first (its
// effect lost). With the default JSON decoder neither is rewritten: each is
// dead-lettered as undecodable on its own, with its own bytes. With a
// decoder of the user's (raw bytes, keyed on a hash of the data) each is
// processed on its own.
func TestInvalidUTF8Bodies(t *testing.T) {
	t.Parallel()
	bodies := [][]byte{[]byte("{\"id\":\"\xff\xfe-1\"}"), []byte("{\"id\":\"\xfe\xff-1\"}")}
	forEachServer(t, func(t *testing.T, url string) {
		_, js := connect(t, url)
		t.Run("JSONDecoder", func(t *testing.T) {
			n := newNames()
			streams(t, js, n)
			cons := consumer(t, js, n, jetstream.ConsumerConfig{AckWait: 30 * time.Second, MaxDeliver: 3})
			fx := newEffects()
			c, err := dedupnats.NewConsumer(js, cons, okReceiver(t, fx, fastConfig("utf8")), &dedupnats.Options{DeadLetterSubject: n.dlq})
			require.NoError(t, err)
			for _, b := range bodies {
				_, err := js.Publish(t.Context(), n.subject, b)
				require.NoError(t, err)
			}
			require.NoError(t, c.Start(t.Context()))
			stopAtCleanup(t, c)
			dead := deadLetters(t, js, n, 2, 20*time.Second)
			settled(t, cons, 20*time.Second)
			require.Len(t, dead, 2)
			// The consumer works on both at once: their dead letters land
			// in either order.
			var got [][]byte
			for _, d := range dead {
				require.Equal(t, "undecodable", d.Headers().Get(delivery.HeaderReason))
				require.Contains(t, d.Headers().Get(delivery.HeaderError), "not valid UTF-8")
				got = append(got, d.Data())
			}
			require.ElementsMatch(t, bodies, got, "each dead letter carries its original bytes")
			require.Zero(t, fx.Len())
		})
		t.Run("own decoder", func(t *testing.T) {
			n := newNames()
			streams(t, js, n)
			cons := consumer(t, js, n, jetstream.ConsumerConfig{AckWait: 30 * time.Second, MaxDeliver: 3})
			store, err := memstore.New(nil)
			require.NoError(t, err)
			fx := newEffects()
			reasons := make(chan delivery.Reason, 4)
			rcv, err := dedup.NewReceiver(store, idstrategy.DataHash[[]byte](), func(_ context.Context, m *dedup.Message[[]byte]) (int64, error) {
				return fx.add(string(m.Body)), nil
			}, observed(fastConfig("utf8raw"), onSettled(func(e delivery.Event) { sendUntilDone(t, reasons, e.Decision.Reason) })))
			require.NoError(t, err)
			c, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{DeadLetterSubject: n.dlq, Decoder: dedup.RawDecoder{}})
			require.NoError(t, err)
			for _, b := range bodies {
				_, err := js.Publish(t.Context(), n.subject, b)
				require.NoError(t, err)
			}
			require.NoError(t, c.Start(t.Context()))
			stopAtCleanup(t, c)
			settled(t, cons, 20*time.Second)
			fx.ExactlyOnce(string(bodies[0]), string(bodies[1])).Check(t)
			for range bodies {
				select {
				case r := <-reasons:
					require.Equal(t, delivery.ReasonProcessed, r)
				case <-time.After(10 * time.Second):
					t.Fatal("a delivery was not settled")
				}
			}
		})
	})
}
