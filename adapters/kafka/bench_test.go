package dedupkafka_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"syscall"
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

// benchInterval is the commit cadence of the benchmarks that commit on a
// timer: short enough that a run of a few hundred thousand messages holds
// several commits.
const benchInterval = 100 * time.Millisecond

// BenchmarkConsume consumes b.N distinct orders from a 3-partition topic of
// an in-process cluster (kfake), in the same run, at two commit cadences:
//
//   - after every message: a bare kafka-go reader loop (FetchMessage,
//     decode, handler, synchronous CommitMessages), the same loop calling
//     the receiver's Handle over memstore itself (bare+handle), and the dedup
//     Consumer over memstore with CommitEveryOutcome;
//   - on a timer: the bare loop with kafka-go's CommitInterval at 100ms
//     (and committing every 100 messages itself), bare+handle with the same
//     interval, and the Consumer with CommitInterval 100ms (and 1s, and
//     with BatchSize 100 over memstore and over redisstore).
//
// Each side is timed from the first message handled to the last: joining
// the group before, the last commit and stopping after are outside the
// clock, as in the bench module's Kafka rows. bare+handle against bare is
// the receiver's new-key path over memstore; the Consumer against
// bare+handle is the adapter's own cost. Read the msgs/s as ratios: the
// machine and kfake set the scale.
//
//	go test -run '^$' -bench 'Consume/^(bare|bare\+handle|dedup)$/(every|100ms)' -benchtime 40000x -count 3 .
func BenchmarkConsume(b *testing.B) {
	brokers := startKafka(b, partitions)
	var run atomic.Int64
	bench := func(name string, consume func(b *testing.B, brokers []string, topic string, t *benchTally)) {
		b.Run(name, func(b *testing.B) {
			topic := fmt.Sprintf("bench-%d", run.Add(1))
			createTopic(b, brokers, topic, partitions)
			msgs := make([]kafka.Message, b.N)
			for i := range msgs {
				data, _ := json.Marshal(Order{ID: fmt.Sprintf("o-%09d", i), Cents: i})
				msgs[i] = kafka.Message{Partition: i % partitions, Value: data}
			}
			produce(b, newWriter(b, brokers), topic, msgs)
			t := &benchTally{n: b.N, done: make(chan struct{})}
			b.ResetTimer()
			cpu := processCPU(b)
			consume(b, brokers, topic, t)
			cpu = processCPU(b) - cpu
			b.StopTimer()
			require.Equal(b, int64(b.N)*int64(b.N-1)/2, t.sum.Load(), "every message handled exactly once")
			got := committed(b, brokers, topic, topic, partitions)
			for p, end := range endOffsets(b, brokers, topic, partitions) {
				require.Equal(b, end, max(got[p], 0), "partition %d committed to its end", p)
			}
			b.ReportMetric(t.rate(), "msgs/s")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/msg")
		})
	}
	bench("bare/commit-every-message", bareLoop(1, 0, false))
	bench("bare+handle/commit-every-message", bareLoop(1, 0, true))
	bench("dedup/commit-every-outcome", dedupLoop(memstoreStore, &dedupkafka.Options{DropPoison: true, CommitInterval: dedupkafka.CommitEveryOutcome}))
	bench("bare/commit-100ms", bareLoop(0, benchInterval, false))
	bench("bare/commit-every-100", bareLoop(100, 0, false))
	bench("bare+handle/commit-100ms", bareLoop(0, benchInterval, true))
	bench("dedup/commit-100ms", dedupLoop(memstoreStore, &dedupkafka.Options{DropPoison: true, CommitInterval: benchInterval}))
	bench("dedup/commit-1s", dedupLoop(memstoreStore, &dedupkafka.Options{DropPoison: true}))
	bench("dedup/batch-100", dedupLoop(memstoreStore, &dedupkafka.Options{DropPoison: true, BatchSize: 100}))
	redisStore := func(b *testing.B, _ int) store.Store {
		c := redistest.Client(b)
		s, err := redisstore.New(context.Background(), c, &redisstore.Options{Prefix: redistest.Prefix(b, c)})
		require.NoError(b, err)
		return s
	}
	bench("dedup-redisstore/batch-100", dedupLoop(redisStore, &dedupkafka.Options{DropPoison: true, BatchSize: 100}))
}

// benchTally counts handled orders; the sum of their amounts is known, so
// a message handled twice or missed shows.
type benchTally struct {
	n           int
	seen, sum   atomic.Int64
	first, last atomic.Int64 // Unix ns of the first and the n-th order handled
	done        chan struct{}
}

func (t *benchTally) add(o Order) {
	if t.first.Load() == 0 {
		t.first.CompareAndSwap(0, time.Now().UnixNano())
	}
	t.sum.Add(int64(o.Cents))
	if t.seen.Add(1) == int64(t.n) {
		t.last.Store(time.Now().UnixNano())
		close(t.done)
	}
}

// processCPU is the user and system CPU time of the whole process (the
// in-process cluster's included, the same for every side): a run's
// cpu-ns/msg says what a message costs on a machine whose other load
// makes its wall-clock rate noisy.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rate is orders per second from the first handled to the last.
func (t *benchTally) rate() float64 {
	return float64(t.n) / max(time.Duration(t.last.Load()-t.first.Load()), time.Nanosecond).Seconds()
}

func memstoreStore(b *testing.B, count int) store.Store {
	s, err := memstore.New(&memstore.Options{Capacity: 2 * count})
	require.NoError(b, err)
	return s
}

func createTopic(b testing.TB, brokers []string, topic string, partitions int) {
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: closedAtCleanup(b)}
	resp, err := client.CreateTopics(context.Background(), &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{Topic: topic, NumPartitions: partitions, ReplicationFactor: 1}}})
	require.NoError(b, err)
	require.NoError(b, resp.Errors[topic])
}

// bareLoop is a plain kafka-go consumer: one goroutine fetching, decoding,
// handling and committing. With interval 0 it commits the last message of
// each partition seen itself, every commitEvery messages and at the end;
// with an interval it hands each message to CommitMessages and kafka-go
// commits every interval and at close. With receive, it hands each order to
// a Receiver over memstore (Handle) instead of to the handler directly.
func bareLoop(commitEvery int, interval time.Duration, receive bool) func(b *testing.B, brokers []string, topic string, t *benchTally) {
	return func(b *testing.B, brokers []string, topic string, t *benchTally) {
		cfg := readerConfig(brokers, topic, topic)
		cfg.CommitInterval = interval
		r := kafka.NewReader(cfg)
		defer func() { require.NoError(b, r.Close()) }()
		ctx := context.Background()
		handle := func(o Order) error { t.add(o); return nil }
		if receive {
			rcv, err := dedup.NewReceiver(memstoreStore(b, t.n), func(o Order) (string, error) { return o.ID, nil },
				func(_ context.Context, o Order) (struct{}, error) {
					t.add(o)
					return struct{}{}, nil
				}, &dedup.Config{Retention: 7 * 24 * time.Hour})
			require.NoError(b, err)
			handle = func(o Order) error {
				_, err := rcv.Handle(ctx, o)
				return err
			}
		}
		last := map[int]kafka.Message{}
		for i := range t.n {
			m, err := r.FetchMessage(ctx)
			if err != nil {
				b.Fatal(err)
			}
			var o Order
			if err := json.Unmarshal(m.Value, &o); err != nil {
				b.Fatal(err)
			}
			if err := handle(o); err != nil {
				b.Fatal(err)
			}
			if interval > 0 {
				if err := r.CommitMessages(ctx, m); err != nil {
					b.Fatal(err)
				}
				continue
			}
			last[m.Partition] = m
			if (i+1)%commitEvery == 0 || i == t.n-1 {
				msgs := make([]kafka.Message, 0, len(last))
				for _, m := range last {
					msgs = append(msgs, m)
				}
				clear(last)
				if err := r.CommitMessages(ctx, msgs...); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
}

// dedupLoop consumes through the dedup Consumer with opts, and stops it
// (which commits) once every message was handled.
func dedupLoop(newStore func(b *testing.B, count int) store.Store, opts *dedupkafka.Options) func(b *testing.B, brokers []string, topic string, t *benchTally) {
	return func(b *testing.B, brokers []string, topic string, t *benchTally) {
		rcv, err := dedup.NewReceiver(newStore(b, t.n), idstrategy.BodyField("id", func(o Order) string { return o.ID }),
			func(_ context.Context, m *dedup.Message[Order]) (struct{}, error) {
				t.add(m.Body)
				return struct{}{}, nil
			}, &dedup.Config{Retention: 7 * 24 * time.Hour})
		require.NoError(b, err)
		r := kafka.NewReader(readerConfig(brokers, topic, topic))
		defer func() { _ = r.Close() }() // after Stop: the Consumer leaves the reader to its maker
		c, err := dedupkafka.NewConsumer(r, rcv, opts)
		require.NoError(b, err)
		require.NoError(b, c.Start(context.Background()))
		select {
		case <-t.done:
		case <-time.After(5 * time.Minute):
			b.Fatalf("handled %d of %d orders in 5 minutes", t.seen.Load(), t.n)
		}
		require.NoError(b, c.Stop(context.Background()))
	}
}
