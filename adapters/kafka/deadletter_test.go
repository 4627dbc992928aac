package dedupkafka_test

import (
	"context"
	"strconv"
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

// TestDeadLetterBeforeCommit: while the dead-letter topic cannot be
// written (it was deleted after Start checked it), the write of the poison
// message's dead letter is retried in place (each failure counted in
// SettleFailures), the partition does not go past it and nothing is
// committed past it; once the topic exists, the dead letter is written
// once and the partition goes on to its end. The poison's delivery is
// reported once, when the dead letter was written, with no settle error.
// In batches too, where the message after the poison is handled in the
// same batch: the watermark waits for the poison.
func TestDeadLetterBeforeCommit(t *testing.T) {
	t.Parallel()
	for _, batch := range []int{1, 3} {
		t.Run("batch-"+strconv.Itoa(batch), func(t *testing.T) {
			t.Parallel()
			testDeadLetterBeforeCommit(t, batch)
		})
	}
}

func testDeadLetterBeforeCommit(t *testing.T, batch int) {
	const topic, dlq, group = "orders", "orders.dlq", "billing"
	brokers := startKafka(t, 1, topic, dlq) // Start checks that it exists

	fx := newEffects()
	var mu sync.Mutex
	var failed, written int
	obs := onSettled(func(e delivery.Event) {
		if e.Decision.Action != delivery.DeadLetter {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if e.SettleErr != nil {
			failed++
		} else {
			written++
		}
	})
	cfg := fastConfig("billing")
	cfg.Observer = obs
	s, err := memstore.New(nil)
	require.NoError(t, err)
	rcv, err := dedup.NewReceiver(s, idstrategy.BodyField("id", func(o Order) string { return o.ID }),
		func(_ context.Context, m *dedup.Message[Order]) (Receipt, error) {
			return Receipt{OrderID: m.Body.ID, Charge: fx.add(m.Partition, m.Body.ID)}, nil
		}, cfg)
	require.NoError(t, err)
	tr := closedAtCleanup(t)
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), RequiredAcks: kafka.RequireAll, MaxAttempts: 1, BatchTimeout: time.Millisecond, Transport: tr}
	t.Cleanup(func() { _ = w.Close() })
	c, err := dedupkafka.NewConsumer(newReader(t, brokers, group, topic), rcv, &dedupkafka.Options{
		DeadLetterTopic: dlq, DeadLetterWriter: w, CommitInterval: 10 * time.Millisecond, BatchSize: batch, Linger: 100 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, c.Start(t.Context()))
	stopAtCleanup(t, c)
	admin := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: closedAtCleanup(t)}
	deleted, err := admin.DeleteTopics(t.Context(), &kafka.DeleteTopicsRequest{Topics: []string{dlq}})
	require.NoError(t, err)
	require.NoError(t, deleted.Errors[dlq])
	produce(t, newWriter(t, brokers), topic, []kafka.Message{
		{Value: orderJSON(t, Order{ID: orderID(0)})},
		{Value: []byte("not json")},
		{Value: orderJSON(t, Order{ID: orderID(2)})},
	})

	eventually(t, 30*time.Second, func() bool { return c.Stats().SettleFailures >= 3 }, "dead-letter writes retried")
	if batch == 1 {
		require.Equal(t, []string{orderID(0)}, fx.order(0), "the partition went past a message it could not dead-letter")
	}
	eventually(t, 5*time.Second, func() bool {
		return committedTo(t, brokers, group, topic, 1)
	}, "the message before the poison committed")
	time.Sleep(50 * time.Millisecond) // commit ticks pass
	require.Equal(t, map[int]int64{0: 1}, committed(t, brokers, group, topic, 1), "committed past an unwritten dead letter")

	resp, err := admin.CreateTopics(t.Context(), &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{Topic: dlq, NumPartitions: 1, ReplicationFactor: 1}}})
	require.NoError(t, err)
	require.NoError(t, resp.Errors[dlq])
	eventually(t, 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return written == 1 && fx.Len() == 2
	}, "the dead letter written, and the partition gone on")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, c.Stop(ctx))
	require.Equal(t, map[int]int64{0: 3}, committed(t, brokers, group, topic, 1))
	mu.Lock()
	require.Equal(t, 1, written)
	require.Zero(t, failed, "the poison's delivery was reported before its dead letter was written")
	mu.Unlock()
	st := c.Stats()
	require.GreaterOrEqual(t, st.SettleFailures, uint64(3))
	st.SettleFailures = 0
	require.Equal(t, dedup.ConsumerStats{Delivered: 3, Acked: 2, DeadLettered: 1}, st)
	require.Equal(t, map[delivery.Reason]uint64{delivery.ReasonUndecodable: 1}, rcv.Stats().DeadLetters)
	letters := readAll(t, brokers, dlq, 1)
	require.Equal(t, "not json", string(letters[0].Value))
	reason, _ := dedupkafka.Header(letters[0].Headers).Get(delivery.HeaderReason)
	require.Equal(t, string(delivery.ReasonUndecodable), reason)
}

// TestStopSettlesUnwrittenDeadLetter: a consumer stopping while the dead
// letter of a poison message cannot be written reports the poison's
// delivery once, not carried out (SettleErr matching ErrDeadLetter), and
// commits nothing past it; the receiver counts no dead letter.
func TestStopSettlesUnwrittenDeadLetter(t *testing.T) {
	t.Parallel()
	const topic, dlq, group = "orders", "orders.dlq", "billing"
	brokers := startKafka(t, 1, topic, dlq)
	var mu sync.Mutex
	var events []delivery.Event
	cfg := fastConfig("billing")
	cfg.Observer = onSettled(func(e delivery.Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e)
	})
	s, err := memstore.New(nil)
	require.NoError(t, err)
	rcv, err := dedup.NewReceiver(s, idstrategy.BodyField("id", func(o Order) string { return o.ID }),
		func(_ context.Context, m *dedup.Message[Order]) (Receipt, error) {
			return Receipt{OrderID: m.Body.ID}, nil
		}, cfg)
	require.NoError(t, err)
	tr := closedAtCleanup(t)
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), RequiredAcks: kafka.RequireAll, MaxAttempts: 1, BatchTimeout: time.Millisecond, Transport: tr}
	t.Cleanup(func() { _ = w.Close() })
	c, err := dedupkafka.NewConsumer(newReader(t, brokers, group, topic), rcv, &dedupkafka.Options{
		DeadLetterTopic: dlq, DeadLetterWriter: w, CommitInterval: 10 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, c.Start(t.Context()))
	stopAtCleanup(t, c)
	admin := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: closedAtCleanup(t)}
	deleted, err := admin.DeleteTopics(t.Context(), &kafka.DeleteTopicsRequest{Topics: []string{dlq}})
	require.NoError(t, err)
	require.NoError(t, deleted.Errors[dlq])
	produce(t, newWriter(t, brokers), topic, []kafka.Message{{Value: []byte("not json")}})

	eventually(t, 30*time.Second, func() bool { return c.Stats().SettleFailures >= 2 }, "dead-letter writes retried")
	mu.Lock()
	require.Empty(t, events, "the delivery was reported before its dead letter was written or given up")
	mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, c.Stop(ctx))

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, events, 1)
	e := events[0]
	require.Equal(t, delivery.DeadLetter, e.Decision.Action)
	require.Equal(t, delivery.ReasonUndecodable, e.Decision.Reason)
	require.ErrorIs(t, e.SettleErr, dedupkafka.ErrDeadLetter)
	require.Positive(t, e.SettleDuration, "from the first write to the stop")
	require.Nil(t, rcv.Stats().DeadLetters)
	require.Zero(t, c.Stats().DeadLettered)
	require.Equal(t, map[int]int64{0: -1}, committed(t, brokers, group, topic, 1), "committed past an unwritten dead letter")
}
