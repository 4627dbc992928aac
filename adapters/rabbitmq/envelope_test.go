package dedupamqp_test

import (
	"context"
	"maps"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupamqp "github.com/dedup-go/dedup/adapters/rabbitmq"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/memstore"
)

// TestEnvelope: what a handler sees of a delivery: the MessageId as ID,
// the queue as Source, the headers wrapped (values as text), the delivery
// itself through Native; and the shared id strategies of idstrategy
// work on it: MessageID, MessageHeader (an integer header as its text),
// DataHash and BodyField.
func TestEnvelope(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ.Addr(t)
	top := declare(t, url, dedupamqp.Topology{})
	conn := dial(t, url)
	got := make(chan *dedup.Message[Order], 1)
	keys := make(chan map[string]string, 1)
	store, err := memstore.New(nil)
	require.NoError(t, err)
	rcv, err := dedup.NewReceiver(store, idstrategy.MessageID[Order](),
		func(_ context.Context, m *dedup.Message[Order]) (struct{}, error) {
			k := map[string]string{}
			for name, f := range map[string]dedup.KeyFunc[*dedup.Message[Order]]{
				"message id": idstrategy.MessageID[Order](),
				"header":     idstrategy.MessageHeader[Order]("order-number"),
				"data hash":  idstrategy.DataHash[Order](),
				"body field": idstrategy.BodyField("id", func(o Order) string { return o.ID }),
			} {
				id, err := f(m)
				require.NoError(t, err)
				k[name] = id
			}
			keys <- k
			got <- m
			return struct{}{}, nil
		}, fastConfig("env"))
	require.NoError(t, err)
	c, err := dedupamqp.NewConsumer(url, top.Queue, rcv, top.Options())
	require.NoError(t, err)
	require.NoError(t, c.Start(t.Context()))
	stopAtCleanup(t, c)

	ts := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	body := orderJSON(t, Order{ID: "o-1", Cents: 250})
	publishAll(t, conn, top.Queue, []amqp.Publishing{{
		MessageId: "m-1", Timestamp: ts, Body: body, AppId: "shop",
		Headers: amqp.Table{
			"order-number": int32(42), "big": int64(1 << 40), "ratio": 3.5, "flag": true,
			"raw": []byte("bytes"), "text": "hello", "when": ts,
		},
	}})
	m := testenv.Recv(t, got, "the delivery")
	k := testenv.Recv(t, keys, "the keys")

	require.Equal(t, Order{ID: "o-1", Cents: 250}, m.Body)
	require.Equal(t, body, m.Data)
	require.Equal(t, "m-1", m.ID)
	require.Equal(t, top.Queue, m.Source)
	require.Equal(t, dedupamqp.BrokerRabbitMQ, m.Broker)
	require.Equal(t, 1, m.DeliveryCount)
	require.False(t, m.Redelivered)
	require.True(t, m.Timestamp.Equal(ts))
	require.Empty(t, m.Stream)
	want := map[string]string{
		"order-number": "42", "big": "1099511627776", "ratio": "3.5", "flag": "true",
		"raw": "bytes", "text": "hello", "when": "2026-11-22T10:00:00Z",
	}
	for name, v := range want {
		got, ok := m.HeaderValue(name)
		require.True(t, ok, name)
		require.Equal(t, v, got, name)
	}
	_, ok := m.HeaderValue("Order-Number")
	require.False(t, ok, "names match exactly, case included")
	require.Equal(t, want, maps.Collect(m.Header.All()))

	d, ok := dedupamqp.Native(m)
	require.True(t, ok)
	require.Equal(t, "shop", d.AppId)
	require.Equal(t, top.Queue, d.RoutingKey)
	_, ok = dedupamqp.Native[Order](nil)
	require.False(t, ok)
	_, ok = dedupamqp.Native(&dedup.Message[Order]{})
	require.False(t, ok)

	require.Equal(t, "m-1", k["message id"])
	require.Equal(t, "42", k["header"])
	require.Regexp(t, "^sha256:[0-9a-f]{64}$", k["data hash"])
	require.Equal(t, "o-1", k["body field"])
}

// TestTableHeader: the header wrapper without a broker: no copy, exact
// names, text values, nil-safe.
func TestTableHeader(t *testing.T) {
	t.Parallel()
	tbl := amqp.Table{"a": int8(-3), "b": uint16(9), "c": float32(0.25), "d": nil, "e": amqp.Decimal{Scale: 1, Value: 15}}
	h := dedupamqp.TableHeader(tbl)
	for name, want := range map[string]string{"a": "-3", "b": "9", "c": "0.25", "d": ""} {
		v, ok := h.Get(name)
		require.True(t, ok)
		require.Equal(t, want, v)
	}
	_, ok := h.Get("missing")
	require.False(t, ok)
	tbl["late"] = "seen"
	v, _ := h.Get("late")
	require.Equal(t, "seen", v, "TableHeader wraps the table, it does not copy it")
	m := &dedup.Message[Order]{}
	_, ok = m.HeaderValue("a")
	require.False(t, ok)
}
