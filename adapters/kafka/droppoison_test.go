package dedupkafka_test

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupkafka "github.com/dedup-go/dedup/adapters/kafka"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/store/memstore"
)

// lockedBuffer is a log destination that handlers may write concurrently.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestDropPoisonLogsAndCounts: without a dead-letter topic, poison is
// dropped only on purpose (DropPoison): logged at error level with its
// position and reason, counted, and committed past; valid orders behind it
// are processed. The drop is reported as what was done, an ack with the
// poison's reason, timed by the commit made at once (CommitEveryOutcome);
// the receiver counts no dead letter.
func TestDropPoisonLogsAndCounts(t *testing.T) {
	t.Parallel()
	const topic, group = "orders", "billing"
	brokers := startKafka(t, 1, topic)
	produce(t, newWriter(t, brokers), topic, []kafka.Message{
		{Value: []byte("not json")},
		{Value: orderJSON(t, Order{ID: orderID(1), Cents: 1})},
	})

	var logs lockedBuffer
	cfg := fastConfig("billing")
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	var mu sync.Mutex
	var events []delivery.Event
	cfg.Observer = onSettled(func(e delivery.Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e)
	})
	fx := newEffects()
	s, err := memstore.New(nil)
	require.NoError(t, err)
	rcv, err := dedup.NewReceiver(s, idstrategy.BodyField("id", func(o Order) string { return o.ID }),
		func(_ context.Context, m *dedup.Message[Order]) (Receipt, error) {
			fx.add(m.Partition, m.Body.ID)
			return Receipt{OrderID: m.Body.ID}, nil
		}, cfg)
	require.NoError(t, err)
	c, err := dedupkafka.NewConsumer(newReader(t, brokers, group, topic), rcv, &dedupkafka.Options{DropPoison: true, CommitInterval: dedupkafka.CommitEveryOutcome})
	require.NoError(t, err)
	require.NoError(t, c.Start(t.Context()))
	stopAtCleanup(t, c)
	eventually(t, 30*time.Second, func() bool { return fx.Len() == 1 }, "the valid order to be processed")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, c.Stop(ctx))

	require.Equal(t, dedup.ConsumerStats{Delivered: 2, Acked: 1, PoisonDropped: 1}, c.Stats())
	require.Nil(t, rcv.Stats().DeadLetters, "a dropped message is no dead letter")
	mu.Lock()
	require.Len(t, events, 2)
	drop := events[0]
	mu.Unlock()
	require.Equal(t, int64(0), drop.Offset)
	require.Equal(t, delivery.Ack, drop.Decision.Action)
	require.Equal(t, delivery.ReasonUndecodable, drop.Decision.Reason)
	require.ErrorIs(t, drop.Err, dedup.ErrUndecodable)
	require.NoError(t, drop.SettleErr)
	require.Positive(t, drop.SettleDuration, "settled when the commit past it was made")
	require.Contains(t, logs.String(), "level=ERROR msg=\"dedupkafka: poison message dropped")
	require.Contains(t, logs.String(), "offset=0")
	require.Contains(t, logs.String(), "reason=undecodable")
	require.Equal(t, map[int]int64{0: 2}, committed(t, brokers, group, topic, 1))
}
