package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	dedupkafka "github.com/dedup-go/dedup/adapters/kafka"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/pgoutbox"
)

// outboxKafkaWriter is the writer of both Kafka sides: acknowledged by
// all in-sync replicas, the key hashed to a partition, batches sent after
// a millisecond or at 256 messages, on a
// transport of its own (a transport caches the cluster's metadata, which
// would not know the run's new topic). BatchSize 256 is the bare loop's
// best (kafka-go allocates room for BatchSize messages per batch: at 4096
// the bare loop wrote 0.6 times the messages per second, the relay 0.8
// times). async makes it an asynchronous
// writer reporting to completion (nil for NewAsyncOutboxPublisher's, which
// sets its own).
func outboxKafkaWriter(brokers []string, async bool, completion func([]kafka.Message, error)) (*kafka.Writer, func()) {
	tr := &kafka.Transport{}
	w := &kafka.Writer{
		Addr: kafka.TCP(brokers...), Balancer: &kafka.Hash{}, RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond, BatchSize: 256, Transport: tr,
		Async: async, Completion: completion,
	}
	return w, func() {
		_ = w.Close()
		tr.CloseIdleConnections()
	}
}

// kafkaOutboxRun creates a topic of its own (kafkaPartitions partitions),
// runs send with its name, checks that it holds every message, and
// deletes it.
func kafkaOutboxRun(tb testing.TB, brokers []string, n int, send func(topic string) sample) sample {
	ctx := context.Background()
	client := kafkaClient(tb, brokers)
	topic := uniqueName("obk")
	created, err := client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{Topic: topic, NumPartitions: kafkaPartitions, ReplicationFactor: 1}}})
	if err != nil {
		tb.Fatal(err)
	}
	if err := created.Errors[topic]; err != nil {
		tb.Fatal(err)
	}
	defer func() {
		if _, err := client.DeleteTopics(context.Background(), &kafka.DeleteTopicsRequest{Topics: []string{topic}}); err != nil {
			tb.Errorf("delete topic %s: %v", topic, err)
		}
	}()
	s := send(topic)
	ends := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	for p := range kafkaPartitions {
		ends.Topics[topic] = append(ends.Topics[topic], kafka.FirstOffsetOf(p), kafka.LastOffsetOf(p))
	}
	end, err := client.ListOffsets(ctx, ends)
	if err != nil {
		tb.Fatal(err)
	}
	held := int64(0)
	for _, p := range end.Topics[topic] {
		if p.Error != nil {
			tb.Fatal(p.Error)
		}
		held += p.LastOffset - p.FirstOffset
	}
	if held != int64(n) {
		tb.Fatalf("the topic holds %d messages, want %d", held, n)
	}
	return s
}

// kafkaRecord is the record both sides write: what the OutboxPublisher
// writes (the ordering key as the key, the id in the Message-Id header).
func kafkaRecord(topic string, e outboxEvent) kafka.Message {
	return kafka.Message{Topic: topic, Key: []byte(e.key), Value: e.body,
		Headers: []kafka.Header{{Key: dedupkafka.HeaderMessageID, Value: []byte(e.id)}}}
}

// bareKafkaAsync is the pipelined loop: an asynchronous writer, at most
// outboxWindow messages written and not yet acknowledged (its Completion
// frees their room); a failed batch fails the run.
func bareKafkaAsync(tb testing.TB, brokers []string, topic string, evs []outboxEvent) sample {
	room := make(chan struct{}, outboxWindow)
	failed := make(chan error, 1)
	w, done := outboxKafkaWriter(brokers, true, func(msgs []kafka.Message, err error) {
		if err != nil {
			select {
			case failed <- err:
			default:
			}
		}
		for range msgs {
			<-room
		}
	})
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
	defer cancel()
	msgs := make([]kafka.Message, len(evs))
	for i, e := range evs {
		msgs[i] = kafkaRecord(topic, e)
	}
	return rate(len(evs), func() {
		for i := range msgs {
			select {
			case room <- struct{}{}:
			case err := <-failed:
				tb.Fatal(err)
			case <-ctx.Done():
				tb.Fatal(ctx.Err())
			}
			if err := w.WriteMessages(ctx, msgs[i]); err != nil {
				tb.Fatal(err)
			}
		}
		for range outboxWindow {
			select {
			case room <- struct{}{}:
			case err := <-failed:
				tb.Fatal(err)
			case <-ctx.Done():
				tb.Fatal(ctx.Err())
			}
		}
	})
}

func init() {
	register(row{
		name: "outbox relay to Kafka (kfake, 3 partitions; PostgreSQL outbox, 1 relay)",
		unit: "msgs/s", n: 20000,
		setup: func(tb testing.TB) []side {
			brokers := startKafka(tb)
			pool := openPostgres(tb)
			evs := outboxEvents(20000)
			// relayOn runs a relay through an OutboxPublisher: over an
			// asynchronous writer that reports each message's
			// acknowledgement, or (sync) the synchronous one, call by
			// call.
			relayOn := func(tb testing.TB, n int, sync bool, buckets, batch int, evs []outboxEvent) sample {
				return kafkaOutboxRun(tb, brokers, n, func(topic string) sample {
					w, done := outboxKafkaWriter(brokers, !sync, nil)
					defer done()
					newPub := dedupkafka.NewAsyncOutboxPublisher
					if sync {
						newPub = dedupkafka.NewOutboxPublisher
					}
					pub, err := newPub(w)
					if err != nil {
						tb.Fatal(err)
					}
					return relayRun(tb, pool, pub, buckets, pgoutbox.RelayOptions{BatchSize: batch}, evs[:n], topic)
				})
			}
			relay := func(buckets, batch int) side {
				return side{name: fmt.Sprintf("pgoutbox relay, Buckets %d, BatchSize %d", buckets, batch), run: func(tb testing.TB, n int) sample {
					return relayOn(tb, n, false, buckets, batch, evs)
				}}
			}
			return []side{
				{name: fmt.Sprintf("bare kafka-go Writer, async, %d acks in flight", outboxWindow), run: func(tb testing.TB, n int) sample {
					return kafkaOutboxRun(tb, brokers, n, func(topic string) sample { return bareKafkaAsync(tb, brokers, topic, evs[:n]) })
				}},
				relay(64, 256), relay(64, 1024), relay(64, 4096), relay(8, 4096),
				{name: "pgoutbox relay, Buckets 64, BatchSize 4096, every message a key of its own (no order to keep)", run: func(tb testing.TB, n int) sample {
					return relayOn(tb, n, false, 64, 4096, ownKeys(evs))
				}},
				{name: "pgoutbox relay, Buckets 64, BatchSize 4096, the synchronous writer (NewOutboxPublisher, acknowledged call by call)", run: func(tb testing.TB, n int) sample {
					return relayOn(tb, n, true, 64, 4096, evs)
				}},
				{name: "pgoutbox relay, Buckets 64, BatchSize 4096, a publisher that acknowledges at once (the relay's ceiling)", run: func(tb testing.TB, n int) sample {
					return relayRun(tb, pool, ackAtOnce{}, 64, pgoutbox.RelayOptions{BatchSize: 4096}, evs[:n], "unsent.nowhere")
				}},
			}
		},
	})
}
