package dedupamqp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
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

const (
	benchConcurrency = 8
	benchPrefetch    = 64
)

// BenchmarkConsume consumes b.N distinct transient orders from a classic
// queue with a bare amqp091-go consumer (manual acks, JSON decode, the
// handler, Ack, on benchConcurrency workers with prefetch benchPrefetch),
// and b.N more with the same consumer wrapped by dedup over memstore, in
// the same run: in benchRounds alternating rounds of b.N/benchRounds
// messages each (bare first, then dedup first), so that a machine whose
// load drifts during the run still gives a fair ratio (dedup/bare). What is
// timed is consuming, from subscribed to the last message handled: not
// publishing, connecting or closing.
//
//	go test -run '^$' -bench BenchmarkConsume -benchtime 40000x -count 3 .
func BenchmarkConsume(b *testing.B) {
	const benchRounds = 4
	url := testenv.RabbitMQ.Addr(b)
	n := max(b.N/benchRounds, 1)
	var bare, wrapped time.Duration
	for r := range benchRounds {
		if r%2 == 0 {
			bare += benchConsume(b, url, n, consumeBare)
			wrapped += benchConsume(b, url, n, consumeDedup)
		} else {
			wrapped += benchConsume(b, url, n, consumeDedup)
			bare += benchConsume(b, url, n, consumeBare)
		}
	}
	total := float64(n * benchRounds)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(total/bare.Seconds(), "bare-msgs/s")
	b.ReportMetric(total/wrapped.Seconds(), "dedup-msgs/s")
	b.ReportMetric(bare.Seconds()/wrapped.Seconds(), "ratio")
}

// consumeFunc consumes count messages from queue, calling handle for each,
// and returns how long consuming took: from the moment the consumer was
// subscribed to the moment the last message was handled, so that neither
// connecting nor closing is counted.
type consumeFunc func(b *testing.B, url, queue string, count int, handle func(Order)) time.Duration

// benchConsume publishes n orders to a queue of their own, consumes them
// with consume and returns the time it took.
func benchConsume(b *testing.B, url string, n int, consume consumeFunc) time.Duration {
	b.StopTimer()
	top := declare(b, url, dedupamqp.Topology{})
	conn := dial(b, url)
	msgs := make([]amqp.Publishing, 0, n)
	for i := range n {
		data, _ := json.Marshal(Order{ID: fmt.Sprintf("o-%09d", i), Cents: i})
		msgs = append(msgs, amqp.Publishing{DeliveryMode: amqp.Transient, MessageId: fmt.Sprintf("m-%09d", i), Body: data})
	}
	publishAll(b, conn, top.Queue, msgs)
	var sum atomic.Int64
	handle := func(o Order) { sum.Add(int64(o.Cents)) }
	b.StartTimer()
	elapsed := consume(b, url, top.Queue, n, handle)
	b.StopTimer()
	require.Equal(b, int64(n)*int64(n-1)/2, sum.Load(), "every message handled exactly once")
	return elapsed
}

func consumeBare(b *testing.B, url, queue string, count int, handle func(Order)) time.Duration {
	conn := dial(b, url)
	ch := channel(b, conn)
	require.NoError(b, ch.Qos(benchPrefetch, 0, false))
	deliveries, err := ch.Consume(queue, "bare", false, false, false, false, nil)
	require.NoError(b, err)
	start := time.Now()
	var acked atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range benchConcurrency {
		wg.Go(func() {
			for d := range deliveries {
				var o Order
				if err := json.Unmarshal(d.Body, &o); err != nil {
					_ = d.Reject(false)
					continue
				}
				handle(o)
				_ = d.Ack(false)
				if acked.Add(1) == int64(count) {
					close(done)
				}
			}
		})
	}
	testenv.Recv(b, done, "every message consumed")
	elapsed := time.Since(start)
	require.NoError(b, ch.Cancel("bare", false))
	testenv.Wait(b, &wg, "the workers")
	return elapsed
}

func consumeDedup(b *testing.B, url, queue string, count int, handle func(Order)) time.Duration {
	store, err := memstore.New(&memstore.Options{Capacity: count + 1000})
	require.NoError(b, err)
	var handled atomic.Int64
	done := make(chan struct{})
	rcv, err := dedup.NewReceiver(store, idstrategy.BodyField("id", func(o Order) string { return o.ID }),
		func(_ context.Context, m *dedup.Message[Order]) (struct{}, error) {
			handle(m.Body)
			if handled.Add(1) == int64(count) {
				close(done)
			}
			return struct{}{}, nil
		}, nil)
	require.NoError(b, err)
	c, err := dedupamqp.NewConsumer(url, queue, rcv, &dedupamqp.Options{
		Concurrency: benchConcurrency, Prefetch: benchPrefetch, DeadLetterExchange: queue + ".dlx",
	})
	require.NoError(b, err)
	require.NoError(b, c.Start(context.Background()))
	start := time.Now()
	testenv.Recv(b, done, "every message consumed")
	elapsed := time.Since(start)
	require.NoError(b, c.Stop(context.Background()))
	return elapsed
}
