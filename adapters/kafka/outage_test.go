package dedupkafka_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupkafka "github.com/dedup-go/dedup/adapters/kafka"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/store/redisstore"
)

// TestStoreDownFailClosed: while the store's Redis is down (a redis-server
// of the test's own, killed), no handler runs, each partition retries its
// message in place with the store retry delay, and fetching stops once the
// buffers are full: the messages read from Kafka stay within
// partitions x (PartitionBuffer + 1) + 1 + QueueCapacity + partitions. Once
// Redis is back, every order is processed exactly once, in order, and
// committed.
func TestStoreDownFailClosed(t *testing.T) {
	t.Parallel()
	const topic, group, count = "orders", "billing", 600
	const buffer, queue = 10, 5
	brokers := startKafka(t, partitions, topic)
	want := produceOrders(t, brokers, topic, count)

	srv := redistest.StartServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialerRetries: 1, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	// A killed server refuses at once: the bound is for New's ping and
	// script load, which a busy machine has taken over 200 ms to answer.
	s, err := redisstore.New(t.Context(), client, &redisstore.Options{Timeout: 5 * time.Second})
	require.NoError(t, err)
	srv.Stop()

	fx := newEffects()
	var mu sync.Mutex
	refused := map[position]int{}
	var bad []string
	obs := onSettled(func(e delivery.Event) {
		if e.Decision.Reason != delivery.ReasonStoreUnavailable {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		refused[position{e.Partition, e.Offset}]++
		if e.Decision.Action != delivery.Retry || e.Decision.Delay != 100*time.Millisecond || !errors.Is(e.Err, dedup.ErrStoreUnavailable) {
			bad = append(bad, e.Decision.Action.String())
		}
	})
	cfg := fastConfig("billing")
	cfg.Observer = obs
	rcv, err := dedup.NewReceiver(s, idstrategy.BodyField("id", func(o Order) string { return o.ID }),
		func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
			return Receipt{OrderID: m.Body.ID, Charge: fx.add(m.Partition, m.Body.ID)}, nil
		}, cfg)
	require.NoError(t, err)
	rc := readerConfig(brokers, group, topic)
	rc.QueueCapacity = queue
	r := kafka.NewReader(rc)
	t.Cleanup(func() { _ = r.Close() }) // after the consumer's stop, registered below
	c, err := dedupkafka.NewConsumer(r, rcv, &dedupkafka.Options{DropPoison: true, PartitionBuffer: buffer, CommitInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, c.Start(t.Context()))
	stopAtCleanup(t, c)

	// Each partition that got a message retries its first one in place,
	// again and again. (Not every partition need have one: the reader hands
	// out partitions' messages through one queue, so a partition whose
	// messages came after the buffer of a stuck one filled waits too.)
	eventually(t, 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for pos, n := range refused {
			if pos.offset == 0 && n < 3 {
				return false
			}
		}
		return len(refused) > 0
	}, "partitions retried in place")
	mu.Lock()
	for pos := range refused {
		require.Zero(t, pos.offset, "a partition went past a message it could not handle")
	}
	require.Empty(t, bad, "a refused delivery was not retried with the store retry delay")
	mu.Unlock()
	require.Zero(t, fx.Len(), "a handler ran while the store was down")

	// Fetching stops once the buffers are full.
	read := r.Stats().Messages
	for quiet := 0; quiet < 5; {
		time.Sleep(100 * time.Millisecond)
		n := r.Stats().Messages // the counter restarts at each Stats
		read += n
		if n == 0 {
			quiet++
		} else {
			quiet = 0
		}
	}
	bound := int64(partitions*(buffer+1) + 1 + queue + partitions)
	require.LessOrEqual(t, read, bound, "messages read from Kafka while the store was down")
	t.Logf("read ahead while the store was down: %d messages (bound %d, of %d produced)", read, bound, count)

	srv.Start()
	eventually(t, time.Minute, func() bool { return fx.Len() >= count }, "orders processed once Redis is back")
	fx.ExactlyOnce(want...).Check(t)
	for p := range partitions {
		var wantP []string
		for i := p; i < count; i += partitions {
			wantP = append(wantP, orderID(i))
		}
		require.Equal(t, wantP, fx.order(p), "partition %d out of order", p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, c.Stop(ctx))
	require.Equal(t, endOffsets(t, brokers, topic, partitions), committed(t, brokers, group, topic, partitions))
}
