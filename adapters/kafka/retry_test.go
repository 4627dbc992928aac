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

// calls records every handler call of the retry tests: the order, when,
// and the envelope's view of it.
type calls struct {
	mu  sync.Mutex
	got []call
}

type call struct {
	id            string
	at            time.Time
	source        string
	stream        string
	offset        int64
	deliveryCount int
	failed        bool
}

func (c *calls) add(cl call) {
	c.mu.Lock()
	c.got = append(c.got, cl)
	c.mu.Unlock()
}

func (c *calls) of(id string) []call {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []call
	for _, cl := range c.got {
		if cl.id == id {
			out = append(out, cl)
		}
	}
	return out
}

// retryReceiver is a receiver over one memstore whose handler fails the
// orders fail says (given the attempt), records its calls, and has its
// effect once per success. Every retry waits backoff, MaxAttempts is 3.
func retryReceiver(t testing.TB, fx *effects, cl *calls, backoff time.Duration, fail func(id string, attempt int) bool) *dedup.Receiver[*dedup.Message[Order], Receipt] {
	t.Helper()
	cfg := fastConfig("billing")
	cfg.MaxAttempts = 3
	cfg.Backoff = dedup.BackoffFunc(func(int) time.Duration { return backoff })
	s, err := memstore.New(nil)
	require.NoError(t, err)
	rcv, err := dedup.NewReceiver(s, idstrategy.MessageHeader[Order](dedupkafka.HeaderMessageID),
		func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
			held, _ := store.ClaimFromContext(ctx)
			c := call{id: m.Body.ID, at: time.Now(), source: m.Source, stream: m.Stream, offset: m.Offset, deliveryCount: m.DeliveryCount}
			if fail(m.Body.ID, held.Attempt) {
				c.failed = true
				cl.add(c)
				return Receipt{}, errors.New("payment service timed out")
			}
			cl.add(c)
			return Receipt{OrderID: m.Body.ID, Charge: fx.add(m.Partition, m.Body.ID)}, nil
		}, cfg)
	require.NoError(t, err)
	return rcv
}

// produceIDs writes one order per id to partition 0 of topic, each with
// its Message-Id header.
func produceIDs(t testing.TB, brokers []string, topic string, ids ...string) {
	t.Helper()
	msgs := make([]kafka.Message, len(ids))
	for i, id := range ids {
		msgs[i] = kafka.Message{Value: orderJSON(t, Order{ID: id}), Headers: []kafka.Header{{Key: dedupkafka.HeaderMessageID, Value: []byte(id)}}}
	}
	produce(t, newWriter(t, brokers), topic, msgs)
}

func startConsumer(t testing.TB, r *kafka.Reader, rcv *dedup.Receiver[*dedup.Message[Order], Receipt], opts *dedupkafka.Options) *dedupkafka.Consumer[Order, Receipt] {
	t.Helper()
	c, err := dedupkafka.NewConsumer(r, rcv, opts)
	require.NoError(t, err)
	require.NoError(t, c.Start(t.Context()))
	stopAtCleanup(t, c)
	return c
}

func stopNow(t testing.TB, c *dedupkafka.Consumer[Order, Receipt]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, c.Stop(ctx))
}

func header(t testing.TB, m kafka.Message, name string) string {
	t.Helper()
	v, ok := dedupkafka.Header(m.Headers).Get(name)
	require.True(t, ok, "header %s missing", name)
	return v
}

// TestRetryTopicTransient: an order failing once goes to the retry topic
// of its tier (its 1s backoff is the smallest tier), with the headers
// saying where it came from; its partition goes on meanwhile (the orders
// behind it take effect before it), it is handed over again no sooner than
// its tier after it failed, on its second attempt, and takes effect once.
// Both groups commit to their ends.
func TestRetryTopicTransient(t *testing.T) {
	t.Parallel()
	const topic, group, retryGroup = "orders", "billing", "billing-retry"
	tiers := []time.Duration{time.Second, time.Minute}
	retry1, retry2 := adapter.RetryName(topic, tiers[0]), adapter.RetryName(topic, tiers[1])
	brokers := startKafka(t, 1, topic, retry1, retry2)
	var ids []string
	for i := range 10 {
		ids = append(ids, orderID(i))
	}
	produceIDs(t, brokers, topic, ids...)

	fx, cl := newEffects(), &calls{}
	rcv := retryReceiver(t, fx, cl, tiers[0], func(id string, attempt int) bool { return id == orderID(3) && attempt == 1 })
	opts := &dedupkafka.Options{DropPoison: true, RetryTopics: tiers, CommitInterval: 10 * time.Millisecond}
	main := startConsumer(t, newReader(t, brokers, group, topic), rcv, opts)
	retry := startConsumer(t, newReader(t, brokers, retryGroup, retry1, retry2), rcv, opts)

	eventually(t, 30*time.Second, func() bool { return fx.Len() == 10 }, "every order processed")
	stopNow(t, main)
	stopNow(t, retry)

	fx.ExactlyOnce(ids...).Check(t)
	want := append(append(append([]string(nil), ids[:3]...), ids[4:]...), ids[3])
	require.Equal(t, want, fx.order(0), "the partition did not go on while the failed order waited in its retry topic")

	got := cl.of(orderID(3))
	require.Len(t, got, 2, "order 3: one failure, one success")
	require.True(t, got[0].failed)
	require.Equal(t, call{id: orderID(3), at: got[0].at, source: topic, stream: topic, offset: 3, failed: true}, got[0])
	require.False(t, got[1].failed)
	require.Equal(t, retry1, got[1].source, "the second attempt was read from the retry topic")
	require.Equal(t, topic, got[1].stream, "the envelope's Stream is where the message was first read")
	require.Equal(t, int64(3), got[1].offset)
	require.Equal(t, 2, got[1].deliveryCount, "the envelope carries the attempt it is on")
	require.GreaterOrEqual(t, got[1].at.Sub(got[0].at), tiers[0], "handed over again before its tier")

	letters := readAll(t, brokers, retry1, 1)
	require.Equal(t, orderID(3), header(t, letters[0], dedupkafka.HeaderMessageID), "the Message-Id is kept, so the store counts the attempts")
	require.Equal(t, topic, header(t, letters[0], delivery.HeaderSource), "read from the topic")
	require.Equal(t, topic, header(t, letters[0], delivery.HeaderStream))
	require.Equal(t, "0", header(t, letters[0], delivery.HeaderPartition))
	require.Equal(t, "3", header(t, letters[0], delivery.HeaderOffset))
	require.Equal(t, "1", header(t, letters[0], delivery.HeaderAttempt))
	require.Equal(t, string(delivery.ReasonHandlerError), header(t, letters[0], delivery.HeaderReason))
	notBefore, err := time.Parse(time.RFC3339Nano, header(t, letters[0], dedupkafka.HeaderNotBefore))
	require.NoError(t, err)
	firstFail, err := time.Parse(time.RFC3339Nano, header(t, letters[0], dedupkafka.HeaderFirstFailure))
	require.NoError(t, err)
	require.GreaterOrEqual(t, notBefore.Sub(firstFail), tiers[0])
	require.False(t, got[1].at.Before(notBefore), "handed over before its not-before")
	readAll(t, brokers, retry2, 0)

	require.Equal(t, map[int]int64{0: 10}, committed(t, brokers, group, topic, 1))
	require.Equal(t, map[int]int64{0: 1}, committed(t, brokers, retryGroup, retry1, 1))
}

// TestRetryTopicAttemptsExhausted: an order that always fails goes through
// its retry tier twice (its 280ms backoff rounded up to the 300ms tier, not
// the 250ms one) and, on its third attempt (MaxAttempts), lands on
// the dead-letter topic with its attempt count, its first failure and
// where it was first read; its effect never happens, the others' once.
func TestRetryTopicAttemptsExhausted(t *testing.T) {
	t.Parallel()
	const topic, dlq, group, retryGroup = "orders", "orders.dlq", "billing", "billing-retry"
	tiers := []time.Duration{250 * time.Millisecond, 300 * time.Millisecond}
	retry0, retry1 := adapter.RetryName(topic, tiers[0]), adapter.RetryName(topic, tiers[1])
	brokers := startKafka(t, 1, topic, retry0, retry1, dlq)
	ids := []string{orderID(0), orderID(1), orderID(2)}
	produceIDs(t, brokers, topic, ids...)

	fx, cl := newEffects(), &calls{}
	rcv := retryReceiver(t, fx, cl, 280*time.Millisecond, func(id string, _ int) bool { return id == orderID(1) })
	opts := &dedupkafka.Options{RetryTopics: tiers, DeadLetterTopic: dlq, CommitInterval: 10 * time.Millisecond}
	main := startConsumer(t, newReader(t, brokers, group, topic), rcv, opts)
	retry := startConsumer(t, newReader(t, brokers, retryGroup, retry0, retry1), rcv, opts)

	letters := readAll(t, brokers, dlq, 1)
	stopNow(t, main)
	stopNow(t, retry)
	fx.ExactlyOnce(orderID(0), orderID(2)).Check(t)
	got := cl.of(orderID(1))
	require.Len(t, got, 3, "MaxAttempts is 3")
	for i, c := range got {
		require.True(t, c.failed)
		require.Equal(t, i+1, max(c.deliveryCount, 1), "attempt %d", i+1)
	}

	dl := letters[0]
	require.Equal(t, string(delivery.ReasonAttemptsExhausted), header(t, dl, delivery.HeaderReason))
	require.Equal(t, "3", header(t, dl, delivery.HeaderAttempt))
	require.Equal(t, topic, header(t, dl, delivery.HeaderStream), "the dead letter names the original topic as its stream")
	require.Equal(t, retry1, header(t, dl, delivery.HeaderSource), "and the retry topic its last attempt was read from as its source")
	require.Equal(t, retryGroup, header(t, dl, delivery.HeaderConsumerGroup))
	require.Equal(t, "1", header(t, dl, delivery.HeaderOffset))
	require.Equal(t, "dedup-dlq:orders:0:1", header(t, dl, dedupkafka.HeaderMessageID))
	require.Equal(t, orderID(1), header(t, dl, delivery.HeaderOriginalMessageID))
	_, ok := dedupkafka.Header(dl.Headers).Get(dedupkafka.HeaderNotBefore)
	require.False(t, ok, "a dead letter has no not-before")
	for _, name := range []string{delivery.HeaderSource, delivery.HeaderStream, delivery.HeaderAttempt, delivery.HeaderConsumerGroup, dedupkafka.HeaderFirstFailure} {
		n := 0
		for _, h := range dl.Headers {
			if h.Key == name {
				n++
			}
		}
		require.Equal(t, 1, n, "header %s once", name)
	}

	readAll(t, brokers, retry0, 0)
	retried := readAll(t, brokers, retry1, 2)
	require.Equal(t, "1", header(t, retried[0], delivery.HeaderAttempt))
	require.Equal(t, "2", header(t, retried[1], delivery.HeaderAttempt))
	for _, m := range retried {
		require.Equal(t, "1", header(t, m, delivery.HeaderOffset), "a retry of a retry still names the original")
		require.Equal(t, topic, header(t, m, delivery.HeaderStream), "a retry of a retry still names the original")
	}
	require.Equal(t, topic, header(t, retried[0], delivery.HeaderSource), "the first attempt was read from the topic")
	require.Equal(t, retry1, header(t, retried[1], delivery.HeaderSource), "the second from the retry topic")
	first := header(t, retried[0], dedupkafka.HeaderFirstFailure)
	require.Equal(t, first, header(t, retried[1], dedupkafka.HeaderFirstFailure))
	require.Equal(t, first, header(t, dl, dedupkafka.HeaderFirstFailure), "the first failure is carried to the dead letter")

	require.Equal(t, map[int]int64{0: 3}, committed(t, brokers, group, topic, 1))
	require.Equal(t, map[int]int64{0: 2}, committed(t, brokers, retryGroup, retry1, 1))
}

// TestRetryTopicStopWhileWaiting: Stop returns at once while a message of
// a retry topic waits for its not-before a minute away, the message is not
// handed over, and the group commits the message before it (due already)
// but nothing past the waiting one.
func TestRetryTopicStopWhileWaiting(t *testing.T) {
	t.Parallel()
	const topic, retryGroup = "orders", "billing-retry"
	tier := time.Minute
	retry1 := adapter.RetryName(topic, tier)
	brokers := startKafka(t, 1, topic, retry1)
	retryMsg := func(id string, offset int, notBefore time.Time) kafka.Message {
		return kafka.Message{Value: orderJSON(t, Order{ID: id}), Headers: []kafka.Header{
			{Key: dedupkafka.HeaderMessageID, Value: []byte(id)},
			{Key: delivery.HeaderStream, Value: []byte(topic)},
			{Key: delivery.HeaderPartition, Value: []byte("0")},
			{Key: delivery.HeaderOffset, Value: []byte(strconv.Itoa(offset))},
			{Key: delivery.HeaderAttempt, Value: []byte("1")},
			{Key: dedupkafka.HeaderNotBefore, Value: []byte(notBefore.UTC().Format(time.RFC3339Nano))},
		}}
	}
	now := time.Now()
	produce(t, newWriter(t, brokers), retry1, []kafka.Message{
		retryMsg(orderID(0), 0, now.Add(-time.Second)),
		retryMsg(orderID(1), 1, now.Add(tier)),
	})

	fx, cl := newEffects(), &calls{}
	rcv := retryReceiver(t, fx, cl, time.Second, func(string, int) bool { return false })
	retry := startConsumer(t, newReader(t, brokers, retryGroup, retry1), rcv,
		&dedupkafka.Options{DropPoison: true, RetryTopics: []time.Duration{tier}, CommitInterval: 10 * time.Millisecond})
	eventually(t, 30*time.Second, func() bool {
		return committedTo(t, brokers, retryGroup, retry1, 1)
	}, "the due message handled and committed")

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	require.NoError(t, retry.Stop(ctx), "Stop waited for a not-before a minute away")
	require.Equal(t, []string{orderID(0)}, fx.order(0))
	require.Empty(t, cl.of(orderID(1)), "the waiting message was handed over before its not-before")
	require.Equal(t, map[int]int64{0: 1}, committed(t, brokers, retryGroup, retry1, 1), "committed past the waiting message")
}

// TestRetryTopicsChecked: Start refuses retry topics that do not exist,
// keep messages for less than their tier, or outlive the receiver's
// records; a reader of a retry topic checks its siblings. Options refuse
// tiers out of order and a retry writer that is not synchronous with all
// acks.
func TestRetryTopicsChecked(t *testing.T) {
	t.Parallel()
	const topic = "orders"
	brokers := startKafka(t, 1, topic, adapter.RetryName(topic, time.Second))
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: closedAtCleanup(t)}
	short := adapter.RetryName(topic, time.Hour)
	resp, err := client.CreateTopics(t.Context(), &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{
		Topic: short, NumPartitions: 1, ReplicationFactor: 1,
		ConfigEntries: []kafka.ConfigEntry{{ConfigName: "retention.ms", ConfigValue: "60000"}},
	}}})
	require.NoError(t, err)
	require.NoError(t, resp.Errors[short])

	start := func(readTopic string, retention time.Duration, tiers ...time.Duration) error {
		r := kafka.NewReader(readerConfig(brokers, "g-"+readTopic, readTopic))
		t.Cleanup(func() { _ = r.Close() })
		dc := fastConfig("billing")
		dc.Retention = retention
		c, err := dedupkafka.NewConsumer(r, orderReceiver(t, dc), &dedupkafka.Options{DropPoison: true, RetryTopics: tiers})
		require.NoError(t, err)
		err = c.Start(t.Context())
		if err == nil {
			stopAtCleanup(t, c)
		}
		return err
	}
	day := 24 * time.Hour
	err = start(topic, day, time.Second, time.Minute)
	require.ErrorIs(t, err, dedupkafka.ErrRetryTopics, "orders.retry.1m does not exist")
	require.ErrorIs(t, err, dedup.ErrInvalidConfig)
	require.ErrorContains(t, err, "orders.retry.1m")
	require.ErrorIs(t, start(topic, day, time.Second, time.Hour), dedupkafka.ErrRetryTopics, "orders.retry.1h keeps messages a minute")
	require.ErrorIs(t, start(topic, 500*time.Millisecond, time.Second), dedupkafka.ErrRetryTopics, "records kept for less than the longest tier")
	require.NoError(t, start(adapter.RetryName(topic, time.Second), day, time.Second), "a reader of orders.retry.1s retries to orders.retry.1s")
	require.ErrorIs(t, start(adapter.RetryName(topic, time.Second), day, time.Second, time.Minute), dedupkafka.ErrRetryTopics, "its sibling orders.retry.1m is missing")
	require.NoError(t, start(topic, day, time.Second))

	r := kafka.NewReader(readerConfig([]string{"127.0.0.1:1"}, "g", "t"))
	t.Cleanup(func() { _ = r.Close() })
	rcv := orderReceiver(t, fastConfig("billing"))
	for name, o := range map[string]dedupkafka.Options{
		"tiers out of order":   {RetryTopics: []time.Duration{time.Minute, time.Second}},
		"tiers repeated":       {RetryTopics: []time.Duration{time.Second, time.Second}},
		"zero tier":            {RetryTopics: []time.Duration{0}},
		"writer without tiers": {RetryWriter: &kafka.Writer{RequiredAcks: kafka.RequireAll}},
		"writer with a topic":  {RetryTopics: []time.Duration{time.Second}, RetryWriter: &kafka.Writer{Topic: "x", RequiredAcks: kafka.RequireAll}},
		"writer acks one":      {RetryTopics: []time.Duration{time.Second}, RetryWriter: &kafka.Writer{RequiredAcks: kafka.RequireOne}},
		"writer async":         {RetryTopics: []time.Duration{time.Second}, RetryWriter: &kafka.Writer{RequiredAcks: kafka.RequireAll, Async: true}},
	} {
		o.DropPoison = true
		_, err := dedupkafka.NewConsumer(r, rcv, &o)
		require.ErrorIs(t, err, dedup.ErrInvalidConfig, name)
	}
}

// TestRetryTopicNames: adapter.RetryName names the retry topics as 0.1's
// dedupkafka.RetryTopic did (these are its names), so the retry topics an
// application created for 0.1, and the copies waiting in them, are those
// a Consumer of 1.x reads and writes.
func TestRetryTopicNames(t *testing.T) {
	t.Parallel()
	for tier, want := range map[time.Duration]string{
		500 * time.Millisecond:     "orders.retry.500ms",
		30 * time.Second:           "orders.retry.30s",
		5 * time.Minute:            "orders.retry.5m",
		90 * time.Second:           "orders.retry.1m30s",
		time.Hour:                  "orders.retry.1h",
		time.Hour + 30*time.Minute: "orders.retry.1h30m",
		time.Hour + 30*time.Second: "orders.retry.1h0m30s",
	} {
		require.Equal(t, want, adapter.RetryName("orders", tier), "the name of 0.1")
	}
}

// TestRetryTopicWriteBeforeCommit: while the retry topic cannot be written
// (deleted after Start), the failed order is not committed past, and the
// handler does not run again (the write is what is retried); once the topic
// is back, the retry message is written once, the partition goes on, and
// the order takes effect once from the retry topic.
func TestRetryTopicWriteBeforeCommit(t *testing.T) {
	t.Parallel()
	const topic, group, retryGroup = "orders", "billing", "billing-retry"
	tiers := []time.Duration{300 * time.Millisecond}
	retry1 := adapter.RetryName(topic, tiers[0])
	brokers := startKafka(t, 1, topic, retry1)
	ids := []string{orderID(0), orderID(1), orderID(2)}

	fx, cl := newEffects(), &calls{}
	rcv := retryReceiver(t, fx, cl, tiers[0], func(id string, attempt int) bool { return id == orderID(1) && attempt == 1 })
	tr := closedAtCleanup(t)
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), RequiredAcks: kafka.RequireAll, MaxAttempts: 1, BatchTimeout: time.Millisecond, Transport: tr}
	t.Cleanup(func() { _ = w.Close() })
	opts := &dedupkafka.Options{DropPoison: true, RetryTopics: tiers, RetryWriter: w, CommitInterval: 10 * time.Millisecond}
	main, err := dedupkafka.NewConsumer(newReader(t, brokers, group, topic), rcv, opts)
	require.NoError(t, err)
	require.NoError(t, main.Start(t.Context()))
	stopAtCleanup(t, main)

	client := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: tr}
	del, err := client.DeleteTopics(t.Context(), &kafka.DeleteTopicsRequest{Topics: []string{retry1}})
	require.NoError(t, err)
	require.NoError(t, del.Errors[retry1])
	produceIDs(t, brokers, topic, ids...)

	eventually(t, 30*time.Second, func() bool { return committedTo(t, brokers, group, topic, 1) }, "the order before the failed one committed")
	time.Sleep(300 * time.Millisecond) // retry writes fail, commit ticks pass
	require.Equal(t, map[int]int64{0: 1}, committed(t, brokers, group, topic, 1), "committed past an unwritten retry message")
	require.Len(t, cl.of(orderID(1)), 1, "the handler ran again instead of the write")
	require.Equal(t, []string{orderID(0)}, fx.order(0), "the partition went past a message it could not send to its retry topic")

	resp, err := client.CreateTopics(t.Context(), &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{Topic: retry1, NumPartitions: 1, ReplicationFactor: 1}}})
	require.NoError(t, err)
	require.NoError(t, resp.Errors[retry1])
	retry := startConsumer(t, newReader(t, brokers, retryGroup, retry1), rcv, opts)
	eventually(t, 30*time.Second, func() bool { return fx.Len() == 3 }, "every order processed")
	stopNow(t, main)
	stopNow(t, retry)
	fx.ExactlyOnce(ids...).Check(t)
	require.Equal(t, []string{orderID(0), orderID(2), orderID(1)}, fx.order(0))
	require.Len(t, cl.of(orderID(1)), 2)
	readAll(t, brokers, retry1, 1)
	require.Equal(t, map[int]int64{0: 3}, committed(t, brokers, group, topic, 1))
	st := main.Stats()
	require.GreaterOrEqual(t, st.SettleFailures, uint64(1), "the failed retry-topic writes")
	st.SettleFailures = 0
	require.Equal(t, dedup.ConsumerStats{Delivered: 3, Acked: 2, RetriedLater: 1}, st, "a failed write is no retry in place")
}
