package dedupkafka_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupkafka "github.com/dedup-go/dedup/adapters/kafka"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/memstore"
	"github.com/dedup-go/dedup/store/redisstore"
)

// BenchmarkConsume consumes b.N distinct orders from a 3-partition topic of
// an in-process cluster (kfake), in the same run: with a bare kafka-go
// reader loop (FetchMessage, decode, handler, CommitMessages) committing
// every message or every 100, and with the dedup Consumer over memstore
// (committing after every outcome, or every second) and over redisstore
// in batches of 100. Producing is outside the timer; the final commit is
// inside. The msgs/s are counted from the first message handled, so that
// joining the group (the same for both) does not weigh on short runs. Read the msgs/s as ratios: the machine and kfake set the scale.
func BenchmarkConsume(b *testing.B) {
	brokers := startKafka(b, partitions)
	var run atomic.Int64
	bench := func(name string, consume func(b *testing.B, brokers []string, topic string, count int, handle func(Order))) {
		b.Run(name, func(b *testing.B) {
			topic := fmt.Sprintf("bench-%d", run.Add(1))
			createTopic(b, brokers, topic, partitions)
			var msgs []kafka.Message
			for i := range b.N {
				data, _ := json.Marshal(Order{ID: fmt.Sprintf("o-%09d", i), Cents: i})
				msgs = append(msgs, kafka.Message{Partition: i % partitions, Value: data})
			}
			produce(b, newWriter(b, brokers), topic, msgs)
			var sum atomic.Int64
			var start atomic.Int64
			handle := func(o Order) {
				if start.Load() == 0 {
					start.CompareAndSwap(0, time.Now().UnixNano())
				}
				sum.Add(int64(o.Cents))
			}
			b.ResetTimer()
			consume(b, brokers, topic, b.N, handle)
			elapsed := time.Since(time.Unix(0, start.Load()))
			b.StopTimer()
			require.Equal(b, int64(b.N)*int64(b.N-1)/2, sum.Load(), "every message handled exactly once")
			got := committed(b, brokers, topic, topic, partitions)
			for p, end := range endOffsets(b, brokers, topic, partitions) {
				require.Equal(b, end, max(got[p], 0), "partition %d committed to its end", p)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
		})
	}
	bench("bare/commit-every-message", bareLoop(1))
	bench("bare/commit-every-100", bareLoop(100))
	memstoreStore := func(b *testing.B, count int) store.Store {
		s, err := memstore.New(&memstore.Options{Capacity: count + 1000})
		require.NoError(b, err)
		return s
	}
	bench("dedup/memstore/commit-every-outcome", dedupLoop(memstoreStore, &dedupkafka.Options{DropPoison: true, CommitInterval: dedupkafka.CommitEveryOutcome}))
	bench("dedup/memstore/commit-1s", dedupLoop(memstoreStore, nil))
	bench("dedup/memstore/batch-100", dedupLoop(memstoreStore, &dedupkafka.Options{DropPoison: true, BatchSize: 100}))
	redisStore := func(b *testing.B, _ int) store.Store {
		c := redistest.Client(b)
		s, err := redisstore.New(context.Background(), c, &redisstore.Options{Prefix: redistest.Prefix(b, c)})
		require.NoError(b, err)
		return s
	}
	bench("dedup/redisstore/batch-100", dedupLoop(redisStore, &dedupkafka.Options{DropPoison: true, BatchSize: 100}))
}

func createTopic(b testing.TB, brokers []string, topic string, partitions int) {
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: closedAtCleanup(b)}
	resp, err := client.CreateTopics(context.Background(), &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{Topic: topic, NumPartitions: partitions, ReplicationFactor: 1}}})
	require.NoError(b, err)
	require.NoError(b, resp.Errors[topic])
}

// bareLoop is a plain kafka-go consumer: one goroutine fetching, decoding,
// handling and committing every commitEvery messages (the last message of
// each partition seen).
func bareLoop(commitEvery int) func(b *testing.B, brokers []string, topic string, count int, handle func(Order)) {
	return func(b *testing.B, brokers []string, topic string, count int, handle func(Order)) {
		r := kafka.NewReader(readerConfig(brokers, topic, topic))
		defer r.Close()
		ctx := context.Background()
		last := map[int]kafka.Message{}
		commit := func() {
			var msgs []kafka.Message
			for _, m := range last {
				msgs = append(msgs, m)
			}
			clear(last)
			if err := r.CommitMessages(ctx, msgs...); err != nil {
				b.Fatal(err)
			}
		}
		for i := range count {
			m, err := r.FetchMessage(ctx)
			if err != nil {
				b.Fatal(err)
			}
			var o Order
			if err := json.Unmarshal(m.Value, &o); err != nil {
				b.Fatal(err)
			}
			handle(o)
			last[m.Partition] = m
			if (i+1)%commitEvery == 0 || i == count-1 {
				commit()
			}
		}
	}
}

// dedupLoop consumes through the dedup Consumer with opts, and stops it
// (which commits) once every message was handled.
func dedupLoop(newStore func(b *testing.B, count int) store.Store, opts *dedupkafka.Options) func(b *testing.B, brokers []string, topic string, count int, handle func(Order)) {
	return func(b *testing.B, brokers []string, topic string, count int, handle func(Order)) {
		var handled atomic.Int64
		done := make(chan struct{})
		rcv, err := dedup.NewReceiver(newStore(b, count), idstrategy.BodyField("id", func(o Order) string { return o.ID }),
			func(_ context.Context, m *dedup.Message[Order]) (struct{}, error) {
				handle(m.Body)
				if handled.Add(1) == int64(count) {
					close(done)
				}
				return struct{}{}, nil
			}, &dedup.Config{Retention: 7 * 24 * time.Hour})
		require.NoError(b, err)
		r := kafka.NewReader(readerConfig(brokers, topic, topic))
		defer r.Close() // after Stop: the Consumer leaves the reader to its maker
		c, err := dedupkafka.NewConsumer(r, rcv, opts)
		require.NoError(b, err)
		require.NoError(b, c.Start(context.Background()))
		<-done
		require.NoError(b, c.Stop(context.Background()))
	}
}
