package dedupkafka_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupkafka "github.com/dedup-go/dedup/adapters/kafka"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/store/memstore"
)

// TestOrigin: a Consumer's deliveries name the reader's GroupID as their
// consumer group, its broker as the server, and Options.DestinationTemplate
// as their template (none without it).
func TestOrigin(t *testing.T) {
	t.Parallel()
	const topic = "orders"
	brokers := startKafka(t, 1, topic)
	produce(t, newWriter(t, brokers), topic, []kafka.Message{{Value: orderJSON(t, Order{ID: "o-1", Cents: 1})}})
	host, p, err := net.SplitHostPort(brokers[0])
	require.NoError(t, err)
	port, err := strconv.Atoi(p)
	require.NoError(t, err)

	for _, c := range []struct{ group, template string }{{"billing", ""}, {"audit", "orders.{region}"}} {
		t.Run(c.group, func(t *testing.T) {
			t.Parallel()
			var tr tracer
			cfg := fastConfig("origin")
			cfg.Observer = &tr
			s, err := memstore.New(nil)
			require.NoError(t, err)
			rcv, err := dedup.NewReceiver(s, idstrategy.BodyField("id", func(o Order) string { return o.ID }),
				func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
					return Receipt{OrderID: m.Body.ID}, ctx.Err()
				}, cfg)
			require.NoError(t, err)
			cons, err := dedupkafka.NewConsumer(newReader(t, brokers, c.group, topic), rcv, &dedupkafka.Options{
				DropPoison: true, CommitInterval: 10 * time.Millisecond, DestinationTemplate: c.template,
			})
			require.NoError(t, err)
			require.NoError(t, cons.Start(t.Context()))
			stopAtCleanup(t, cons)
			eventually(t, 30*time.Second, func() bool { return tr.Count() >= 1 }, "the delivery reported")
			events, _, _ := tr.Snapshot()
			e := events[0]
			require.Equal(t, topic, e.Source)
			require.Equal(t, c.group, e.ConsumerGroup)
			require.Equal(t, host, e.ServerAddress)
			require.Equal(t, port, e.ServerPort)
			require.Equal(t, c.template, e.DestinationTemplate)
		})
	}
}
