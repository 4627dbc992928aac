package dedupkafka_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	dedupkafka "github.com/dedup-go/dedup/adapters/kafka"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/memstore"
)

// TestUpgradeRetryCopiesOf01: retry copies a Consumer of 0.1 wrote, with
// the header names of 0.1 (Dedup-Topic, Dedup-Group beside
// Dedup-Partition, Dedup-Offset, Dedup-Attempt, Dedup-First-Failure,
// Dedup-Not-Before), onto a retry topic named by the rule of 0.1
// ("orders.retry.1s"), are consumed after the upgrade as the copies of
// the original they name: the receiver is keyed on the original's topic,
// partition and offset (idstrategy.TopicPartitionOffset), so a copy read
// as its own message would run again.
//
// Order 5 failed its first attempt under 0.1, which wrote its copy twice
// (its commit was lost): it runs once, on attempt 2, no sooner than its
// not-before, and the second copy is a duplicate. Order 6 fails again on
// attempt 2: its new copy (written by this version, with the names of
// now and none of 0.1) takes it to attempt 3, once.
func TestUpgradeRetryCopiesOf01(t *testing.T) {
	t.Parallel()
	const topic, dlq, group = "orders", "orders.dlq", "billing-retry"
	const retryTopic = "orders.retry.1s" // the name 0.1 gave the tier of 1s
	tier := time.Second
	require.Equal(t, retryTopic, adapter.RetryName(topic, tier))
	brokers := startKafka(t, 1, topic, retryTopic, dlq)

	type call struct {
		offset        int64
		stream        string
		source        string
		deliveryCount int
		attempt       int
		at            time.Time
	}
	var mu sync.Mutex
	calls := map[string][]call{}
	fx := newEffects()
	cfg := fastConfig("billing")
	cfg.MaxAttempts = 3
	cfg.Backoff = dedup.BackoffFunc(func(int) time.Duration { return tier })
	s, err := memstore.New(nil)
	require.NoError(t, err)
	rcv, err := dedup.NewReceiver(s, idstrategy.TopicPartitionOffset[Order](),
		func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
			held, _ := store.ClaimFromContext(ctx)
			mu.Lock()
			calls[m.Body.ID] = append(calls[m.Body.ID], call{m.Offset, m.Stream, m.Source, m.DeliveryCount, held.Attempt, time.Now()})
			mu.Unlock()
			if held.Attempt == 1 || (m.Body.ID == orderID(6) && held.Attempt == 2) {
				return Receipt{}, errors.New("payment service timed out")
			}
			return Receipt{OrderID: m.Body.ID, Charge: fx.add(m.Partition, m.Body.ID)}, nil
		}, cfg)
	require.NoError(t, err)

	// The first attempts, made by 0.1 on orders, partition 0, offsets 5
	// and 6: they failed, and the store counts them.
	for _, offset := range []int64{5, 6} {
		id := orderID(int(offset))
		_, err := rcv.Handle(t.Context(), &dedup.Message[Order]{Body: Order{ID: id}, Source: topic, Stream: topic, Offset: offset, Broker: "kafka"})
		require.Error(t, err, "attempt 1 of %s", id)
	}
	mu.Lock()
	clear(calls)
	mu.Unlock()

	// The copies 0.1 wrote: its header names, literally.
	notBefore := time.Now().Add(1500 * time.Millisecond)
	copyOf01 := func(offset int64) kafka.Message {
		id := orderID(int(offset))
		return kafka.Message{Key: []byte(id), Value: orderJSON(t, Order{ID: id}), Headers: []kafka.Header{
			{Key: "Message-Id", Value: []byte(id)},
			{Key: "Dedup-Reason", Value: []byte("handler-error")},
			{Key: "Dedup-Error", Value: []byte("payment service timed out")},
			{Key: "Dedup-Topic", Value: []byte(topic)},
			{Key: "Dedup-Partition", Value: []byte("0")},
			{Key: "Dedup-Offset", Value: []byte(strconv.FormatInt(offset, 10))},
			{Key: "Dedup-Group", Value: []byte("billing")},
			{Key: "Dedup-Attempt", Value: []byte("1")},
			{Key: "Dedup-First-Failure", Value: []byte(time.Now().Add(-tier).UTC().Format(time.RFC3339Nano))},
			{Key: "Dedup-Not-Before", Value: []byte(notBefore.UTC().Format(time.RFC3339Nano))},
		}}
	}
	produce(t, newWriter(t, brokers), retryTopic, []kafka.Message{copyOf01(5), copyOf01(5), copyOf01(6)})

	c := startConsumer(t, newReader(t, brokers, group, retryTopic), rcv,
		&dedupkafka.Options{DeadLetterTopic: dlq, RetryTopics: []time.Duration{tier}, CommitInterval: 10 * time.Millisecond})
	eventually(t, 30*time.Second, func() bool {
		return fx.Len() == 2 && committedTo(t, brokers, group, retryTopic, 4)
	}, "both orders processed, and the retry topic committed past the three copies and the new one")
	stopNow(t, c)

	fx.ExactlyOnce(orderID(5), orderID(6)).Check(t)
	mu.Lock()
	defer mu.Unlock()
	five := calls[orderID(5)]
	require.Len(t, five, 1, "order 5 ran once after the upgrade: its second copy is a duplicate of the first")
	require.Equal(t, call{5, topic, retryTopic, 2, 2, five[0].at}, five[0], "the copy of 0.1 is read as order 5 on its second attempt")
	require.False(t, five[0].at.Before(notBefore), "handed over before the not-before of 0.1's copy")
	six := calls[orderID(6)]
	require.Len(t, six, 2)
	require.Equal(t, call{6, topic, retryTopic, 2, 2, six[0].at}, six[0])
	require.Equal(t, call{6, topic, retryTopic, 3, 3, six[1].at}, six[1], "the copy this version wrote takes it to attempt 3")
	readAll(t, brokers, dlq, 0)

	// The copy this version wrote of 0.1's copy has the names of now only.
	copies := readAll(t, brokers, retryTopic, 4)
	h := dedupkafka.Header(copies[3].Headers)
	for name, want := range map[string]string{
		delivery.HeaderSource: retryTopic, delivery.HeaderStream: topic, delivery.HeaderPartition: "0", delivery.HeaderOffset: "6",
		delivery.HeaderConsumerGroup: group, delivery.HeaderAttempt: "2", dedupkafka.HeaderMessageID: orderID(6),
	} {
		got, ok := h.Get(name)
		require.True(t, ok, "header %s", name)
		require.Equal(t, want, got, "header %s", name)
	}
	for _, former := range []string{"Dedup-Topic", "Dedup-Group"} {
		_, ok := h.Get(former)
		require.False(t, ok, "the new copy still carries %s of 0.1", former)
	}
	ff, _ := h.Get(dedupkafka.HeaderFirstFailure)
	was, _ := dedupkafka.Header(copies[2].Headers).Get(dedupkafka.HeaderFirstFailure)
	require.Equal(t, was, ff, "the first failure of 0.1's copy is carried on")
}
