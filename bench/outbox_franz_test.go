package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	dedupfranz "github.com/dedup-go/dedup/adapters/franz"
	dedupkafka "github.com/dedup-go/dedup/adapters/kafka"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/pgoutbox"
)

// outboxFranzClient is the client of both franz-go sides, on a client of
// the run's own: kgo's defaults (acknowledged by all in-sync replicas,
// idempotent, the key hashed with murmur2) but for the settings of the
// kafka-go sides' writer (outboxKafkaWriter): batches sent after a
// millisecond (kgo lingers 10ms by default, which cut the bare loop to a
// quarter here) and no compression (kgo's default is snappy, kafka-go's
// none).
func outboxFranzClient(tb testing.TB, brokers []string) *kgo.Client {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(time.Millisecond),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		tb.Fatal(err)
	}
	return cl
}

// bareFranzAsync is the pipelined loop on franz-go: Produce, at most
// outboxWindow records produced and not yet acknowledged (each promise
// frees its room); a failed record fails the run.
func bareFranzAsync(tb testing.TB, brokers []string, topic string, evs []outboxEvent) sample {
	cl := outboxFranzClient(tb, brokers)
	defer cl.Close()
	room := make(chan struct{}, outboxWindow)
	failed := make(chan error, 1)
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			select {
			case failed <- err:
			default:
			}
		}
		<-room
	}
	ctx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
	defer cancel()
	records := make([]*kgo.Record, len(evs))
	for i, e := range evs {
		records[i] = &kgo.Record{Topic: topic, Key: []byte(e.key), Value: e.body,
			Headers: []kgo.RecordHeader{{Key: dedupfranz.HeaderMessageID, Value: []byte(e.id)}}}
	}
	wait := func() {
		select {
		case room <- struct{}{}:
		case err := <-failed:
			tb.Fatal(err)
		case <-ctx.Done():
			tb.Fatal(ctx.Err())
		}
	}
	return rate(len(evs), func() {
		for _, r := range records {
			wait()
			cl.Produce(ctx, r, promise)
		}
		for range outboxWindow {
			wait()
		}
	})
}

func init() {
	register(row{
		name: fmt.Sprintf("outbox relay to Kafka on franz-go (kfake, %d partitions; PostgreSQL outbox, 1 relay)", kafkaPartitions),
		unit: "msgs/s", n: 20000,
		setup: func(tb testing.TB) []side {
			brokers := startKafka(tb)
			pool := openPostgres(tb)
			evs := outboxEvents(20000)
			opts := pgoutbox.RelayOptions{BatchSize: 4096}
			return []side{
				{name: fmt.Sprintf("bare franz-go Produce, %d acks in flight", outboxWindow), run: func(tb testing.TB, n int) sample {
					return kafkaOutboxRun(tb, brokers, n, func(topic string) sample { return bareFranzAsync(tb, brokers, topic, evs[:n]) })
				}},
				{name: "pgoutbox relay, Buckets 64, BatchSize 4096 (default), dedupfranz OutboxPublisher (promises)", run: func(tb testing.TB, n int) sample {
					return kafkaOutboxRun(tb, brokers, n, func(topic string) sample {
						pub, err := dedupfranz.NewOutboxPublisher(outboxFranzClient(tb, brokers))
						if err != nil {
							tb.Fatal(err)
						}
						defer func() {
							ctx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
							defer cancel()
							if err := pub.Close(ctx); err != nil {
								tb.Error(err)
							}
						}()
						return relayRun(tb, pool, pub, 64, opts, evs[:n], topic)
					})
				}},
				{name: fmt.Sprintf("bare kafka-go Writer, async, %d acks in flight", outboxWindow), run: func(tb testing.TB, n int) sample {
					return kafkaOutboxRun(tb, brokers, n, func(topic string) sample { return bareKafkaAsync(tb, brokers, topic, evs[:n]) })
				}},
				{name: "pgoutbox relay, Buckets 64, BatchSize 4096 (default), dedupkafka asynchronous OutboxPublisher (kafka-go)", run: func(tb testing.TB, n int) sample {
					return kafkaOutboxRun(tb, brokers, n, func(topic string) sample {
						w, done := outboxKafkaWriter(brokers, true, nil)
						defer done()
						pub, err := dedupkafka.NewAsyncOutboxPublisher(w)
						if err != nil {
							tb.Fatal(err)
						}
						return relayRun(tb, pool, pub, 64, opts, evs[:n], topic)
					})
				}},
			}
		},
		versus: []versus{
			{name: "dedupkafka relay over its bare kafka-go loop, paired", a: 3, b: 2},
			{name: "dedupfranz relay over dedupkafka relay, paired", a: 1, b: 3},
		},
	})
}
