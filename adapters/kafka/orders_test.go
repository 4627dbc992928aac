package dedupkafka_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/memstore"
	"github.com/dedup-go/dedup/store/redisstore"
)

// The order stream of TestOrdersExactlyOnce: order i goes to partition
// i%3; every fourth is produced twice (a producer retry: the copy comes a
// few messages later, at another offset, with the same order id and
// Message-Id); one in ten fails on its first attempt; one in fifty is slow;
// and two in five hundred are poison: a body that is not UTF-8, or a
// permanent handler error.
const (
	orderCount  = 10_000
	partitions  = 3
	copyEvery   = 4
	copyLag     = 7 // a copy follows its original after this many orders of its partition
	failEvery   = 10
	slowEvery   = 50
	poisonEvery = 500
)

func isUndecodable(i int) bool { return i%poisonEvery == 250 }
func isPermanent(i int) bool   { return i%poisonEvery == 499 }
func failsOnce(i int) bool     { return i%failEvery == 3 }

// orderStream returns the messages to produce, partition by partition in
// produce order, and the ids whose effect is expected, per partition in
// produce order.
func orderStream(t testing.TB, count int) (msgs []kafka.Message, want map[int][]string) {
	want = map[int][]string{}
	type queued struct {
		at  int
		msg kafka.Message
	}
	var copies []queued
	seen := map[int]int{} // partition -> orders so far
	for i := range count {
		p := i % partitions
		id := orderID(i)
		m := kafka.Message{Partition: p, Key: []byte(id), Value: orderJSON(t, Order{ID: id, Cents: 100 + i})}
		if isUndecodable(i) {
			m.Value = []byte("{\"id\":\"" + id + "\xff\"}")
		} else if !isPermanent(i) {
			want[p] = append(want[p], id)
		}
		msgs = append(msgs, m)
		dedupkafka.StampMessageID(msgs[len(msgs)-1:], nil)
		m = msgs[len(msgs)-1]
		seen[p]++
		if i%copyEvery == 0 {
			copies = append(copies, queued{at: seen[p] + copyLag, msg: m})
		}
		// Copies whose time has come, in the order they were queued.
		copies = slices.DeleteFunc(copies, func(q queued) bool {
			if q.msg.Partition == p && q.at <= seen[p] {
				msgs = append(msgs, q.msg)
				return true
			}
			return false
		})
	}
	for _, q := range copies {
		msgs = append(msgs, q.msg)
	}
	return msgs, want
}

// produce writes msgs in order, in chunks.
func produce(t testing.TB, w *kafka.Writer, topic string, msgs []kafka.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for chunk := range slices.Chunk(msgs, 1000) {
		out := make([]kafka.Message, len(chunk))
		for i, m := range chunk {
			m.Topic = topic
			out[i] = m
		}
		require.NoError(t, w.WriteMessages(ctx, out...))
	}
}

// charge is the handler of the order tests: a transient failure on the
// first attempt of some orders, a permanent one for others, a slow one for
// some, and one effect per success.
func charge(fx *effects) dedup.Handler[*dedup.Message[Order], Receipt] {
	return func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
		i, err := strconv.Atoi(m.Body.ID[2:])
		if err != nil {
			return Receipt{}, dedup.Permanent(err)
		}
		held, _ := store.ClaimFromContext(ctx)
		switch {
		case isPermanent(i):
			return Receipt{}, dedup.Permanent(errors.New("card declined"))
		case failsOnce(i) && held.Attempt == 1:
			return Receipt{}, errors.New("payment service timed out")
		case i%slowEvery == 7:
			time.Sleep(3 * time.Millisecond)
		}
		return Receipt{OrderID: m.Body.ID, Charge: fx.add(m.Partition, m.Body.ID)}, nil
	}
}

// TestOrdersExactlyOnce consumes 10,000 orders on 3 partitions, a quarter
// of them produced twice, with transient failures, slow handlers and
// poison: every order has its effect once, none is lost, the poison is on
// the dead-letter topic with its headers, and after a clean stop the group
// has committed every partition to its end. One message at a time, each
// partition's first effects come in produce order; in batches, all but the
// retried ones do (a failed message does not hold back its batch).
func TestOrdersExactlyOnce(t *testing.T) {
	t.Parallel()
	t.Run("memstore", func(t *testing.T) {
		t.Parallel()
		s, err := memstore.New(&memstore.Options{Capacity: 2 * orderCount})
		require.NoError(t, err)
		testOrders(t, s, &dedupkafka.Options{DropPoison: true, Concurrency: 3}, true)
	})
	t.Run("redisstore-batches", func(t *testing.T) {
		t.Parallel()
		c := redistest.Client(t)
		s, err := redisstore.New(t.Context(), c, &redisstore.Options{Prefix: redistest.Prefix(t, c)})
		require.NoError(t, err)
		testOrders(t, s, &dedupkafka.Options{DropPoison: true, Concurrency: 3, BatchSize: 64, Linger: 5 * time.Millisecond, CommitInterval: 50 * time.Millisecond}, false)
	})
}

func testOrders(t *testing.T, s store.Store, opts *dedupkafka.Options, strictOrder bool) {
	const topic, dlq, group = "orders", "orders.dlq", "billing"
	brokers := startKafka(t, partitions, topic, dlq)
	msgs, want := orderStream(t, orderCount)
	produce(t, newWriter(t, brokers), topic, msgs)

	fx := newEffects()
	var mu sync.Mutex
	reasons := map[delivery.Reason]int{}
	retried := map[string]bool{}
	obs := onSettled(func(e delivery.Event) {
		mu.Lock()
		defer mu.Unlock()
		reasons[e.Decision.Reason]++
		if e.Decision.Action == delivery.Retry {
			retried[e.Key] = true
		}
	})
	cfg := fastConfig("billing")
	cfg.Observer = obs
	rcv, err := dedup.NewReceiver(s, idstrategy.BodyField("id", func(o Order) string { return o.ID }), charge(fx), cfg)
	require.NoError(t, err)
	o := *opts
	o.DeadLetterTopic, o.DropPoison = dlq, false
	o.MinRetryDelay = 10 * time.Millisecond
	c, err := dedupkafka.NewConsumer(newReader(t, brokers, group, topic), rcv, &o)
	require.NoError(t, err)
	require.NoError(t, c.Start(t.Context()))
	stopAtCleanup(t, c)

	var wantAll []string
	for p := range partitions {
		wantAll = append(wantAll, want[p]...)
	}
	eventually(t, 3*time.Minute, func() bool { return fx.Len() >= len(wantAll) }, "orders processed")
	poison := 2 * orderCount / poisonEvery
	eventually(t, time.Minute, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return reasons[delivery.ReasonUndecodable]+reasons[delivery.ReasonPermanent] >= poison
	}, "poison dead-lettered")
	// Every message settled: processed, duplicate or dead-lettered.
	eventually(t, time.Minute, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return reasons[delivery.ReasonProcessed]+reasons[delivery.ReasonDuplicate]+reasons[delivery.ReasonUndecodable]+reasons[delivery.ReasonPermanent] >= len(msgs)
	}, "every message settled")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, c.Stop(ctx))
	require.NoError(t, c.Err())

	fx.ExactlyOnce(wantAll...).Check(t)
	mu.Lock()
	require.Equal(t, orderCount/copyEvery, reasons[delivery.ReasonDuplicate], "every copy answered as a duplicate")
	require.Equal(t, len(wantAll), reasons[delivery.ReasonProcessed])
	require.Equal(t, orderCount/poisonEvery, reasons[delivery.ReasonUndecodable])
	require.Equal(t, orderCount/poisonEvery, reasons[delivery.ReasonPermanent])
	require.GreaterOrEqual(t, reasons[delivery.ReasonHandlerError], orderCount/failEvery-orderCount/poisonEvery, "transient failures retried")
	mu.Unlock()
	for p := range partitions {
		got := fx.order(p)
		if strictOrder {
			require.Equal(t, want[p], got, "partition %d: first effects out of produce order", p)
			continue
		}
		// In batches only the retried orders may come late.
		keep := func(ids []string) []string {
			return slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return retried["billing:"+id] })
		}
		require.Equal(t, keep(want[p]), keep(got), "partition %d: first effects of orders never retried out of produce order", p)
	}

	// A clean stop commits every partition to its end.
	require.Equal(t, endOffsets(t, brokers, topic, partitions), committed(t, brokers, group, topic, partitions))

	// The poison is on the dead-letter topic, with headers saying why.
	letters := readAll(t, brokers, dlq, poison)
	for _, m := range letters {
		h := dedupkafka.Header(m.Headers)
		id := string(m.Key)
		i, err := strconv.Atoi(id[2:])
		require.NoError(t, err)
		get := func(name string) string {
			v, ok := h.Get(name)
			require.True(t, ok, "dead letter of %s has no %s", id, name)
			return v
		}
		require.Equal(t, topic, get(delivery.HeaderSource))
		require.Equal(t, topic, get(delivery.HeaderStream))
		require.Equal(t, strconv.Itoa(i%partitions), get(delivery.HeaderPartition))
		offset := get(delivery.HeaderOffset)
		require.Equal(t, "dedup-dlq:"+topic+":"+strconv.Itoa(i%partitions)+":"+offset, get(dedupkafka.HeaderMessageID))
		require.NotEmpty(t, get(delivery.HeaderOriginalMessageID))
		require.Equal(t, group, get(delivery.HeaderConsumerGroup))
		require.NotEmpty(t, get(delivery.HeaderError))
		_, err = time.Parse(time.RFC3339Nano, get(dedupkafka.HeaderFirstFailure))
		require.NoError(t, err)
		switch {
		case isUndecodable(i):
			require.Equal(t, string(delivery.ReasonUndecodable), get(delivery.HeaderReason))
			require.Equal(t, "0", get(delivery.HeaderAttempt), "no claim was made")
		case isPermanent(i):
			require.Equal(t, string(delivery.ReasonPermanent), get(delivery.HeaderReason))
			require.Equal(t, "1", get(delivery.HeaderAttempt))
			require.Equal(t, "billing:"+id, get(delivery.HeaderKey))
		default:
			t.Fatalf("order %s was dead-lettered", id)
		}
	}
}

// readAll reads want messages from every partition of topic, from the
// start, and checks that no more arrive soon after.
func readAll(t testing.TB, brokers []string, topic string, want int) []kafka.Message {
	t.Helper()
	r := kafka.NewReader(readerConfig(brokers, fmt.Sprintf("reader-%d", time.Now().UnixNano()), topic))
	defer r.Close()
	var out []kafka.Message
	for len(out) < want {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		m, err := r.FetchMessage(ctx)
		cancel()
		require.NoError(t, err, "read %d of %d messages of %s", len(out), want, topic)
		out = append(out, m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	m, err := r.FetchMessage(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded, "an extra message on %s: %s", topic, m.Key)
	return out
}
