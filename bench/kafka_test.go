package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	wkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/dedup-go/dedup"
	dedupkafka "github.com/dedup-go/dedup/adapters/kafka"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/testenv"
)

// kafkaPartitions is the partition count of every topic: the parallelism
// of every Kafka side.
const kafkaPartitions = 3

// startKafka starts an in-process cluster (kfake) for the row and returns
// its brokers' addresses.
func startKafka(tb testing.TB) []string {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(500*time.Millisecond))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c.ListenAddrs()
}

// toPartition writes each message to its Partition field.
type toPartition struct{}

func (toPartition) Balance(m kafka.Message, _ ...int) int { return m.Partition }

// kafkaClient is a kafka-go client for the row's administration.
func kafkaClient(tb testing.TB, brokers []string) *kafka.Client {
	tr := &kafka.Transport{}
	tb.Cleanup(tr.CloseIdleConnections)
	return &kafka.Client{Addr: kafka.TCP(brokers...), Transport: tr}
}

// kafkaReaderConfig is the reader of the kafka-go sides: the group is the
// topic's name, short timeouts as the adapter's tests use.
func kafkaReaderConfig(brokers []string, topic string) kafka.ReaderConfig {
	return kafka.ReaderConfig{
		Brokers: brokers, GroupID: topic, Topic: topic,
		MaxWait: 50 * time.Millisecond, SessionTimeout: time.Second, HeartbeatInterval: 100 * time.Millisecond,
		RebalanceTimeout: 2 * time.Second, JoinGroupBackoff: 100 * time.Millisecond,
		ReadBackoffMin: 10 * time.Millisecond, ReadBackoffMax: 100 * time.Millisecond,
		StartOffset: kafka.FirstOffset,
	}
}

// kafkaRun creates a topic of its own, produces n orders round-robin over
// its partitions (each with its id as Watermill's UUID header), runs
// consume on it, checks that every order was handled once and that the
// group committed every partition to its end, and deletes the topic. The
// rate is the tally's, from the first order handled to the last: joining
// the group before (a second or more on kfake, not the same for kafka-go
// and sarama), the last commit and closing after, are outside the clock;
// so is the CPU per order, the whole process's (kfake's included) over
// the same span.
func kafkaRun(tb testing.TB, brokers []string, n int, side string, consume func(topic string, t *tally)) sample {
	ctx := context.Background()
	client := kafkaClient(tb, brokers)
	topic := uniqueName("kafka")
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
	bodies, keys := ordersJSON(n)
	msgs := make([]kafka.Message, n)
	for i := range msgs {
		msgs[i] = kafka.Message{Topic: topic, Partition: i % kafkaPartitions, Value: bodies[i],
			Headers: []kafka.Header{{Key: wkafka.UUIDHeaderKey, Value: []byte(keys[i])}}}
	}
	produceKafka(tb, brokers, msgs)
	t := newTally(n)
	consume(topic, t)
	s := t.sample()
	t.check(tb, side)
	committedToEnd(tb, client, topic, side)
	return s
}

// produceKafka writes msgs, each to its partition. A writer of its own:
// a transport caches the cluster's metadata, which would not know the
// run's new topic.
func produceKafka(tb testing.TB, brokers []string, msgs []kafka.Message) {
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Balancer: toPartition{}, RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond, BatchSize: 1000, Transport: tr}
	defer func() { _ = w.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		tb.Fatal(err)
	}
}

// behind returns a description of the first partition the group (named
// as the topic) has not committed to its end, or "" when none.
func behind(ctx context.Context, client *kafka.Client, topic string) (string, error) {
	ends := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	ps := make([]int, kafkaPartitions)
	for p := range ps {
		ps[p] = p
		ends.Topics[topic] = append(ends.Topics[topic], kafka.LastOffsetOf(p))
	}
	end, err := client.ListOffsets(ctx, ends)
	if err != nil {
		return "", err
	}
	got, err := client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: topic, Topics: map[string][]int{topic: ps}})
	if err != nil {
		return "", err
	}
	committed := map[int]int64{}
	for _, p := range got.Topics[topic] {
		committed[p.Partition] = p.CommittedOffset
	}
	for _, p := range end.Topics[topic] {
		if committed[p.Partition] != p.LastOffset {
			return fmt.Sprintf("partition %d committed to %d, its end is %d", p.Partition, committed[p.Partition], p.LastOffset), nil
		}
	}
	return "", nil
}

// awaitCommitted waits, at most testenv.WaitTimeout, until the group
// (named as the topic) has committed every partition to its end, for a
// side whose commits trail its handling; committedToEnd then says whether
// it got there.
func awaitCommitted(brokers []string, topic string) {
	client := &kafka.Client{Addr: kafka.TCP(brokers...)}
	ctx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
	defer cancel()
	for {
		if lag, err := behind(ctx, client, topic); err == nil && lag == "" {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// committedToEnd fails tb unless the group (named as the topic) committed
// every partition to its end.
func committedToEnd(tb testing.TB, client *kafka.Client, topic, side string) {
	lag, err := behind(context.Background(), client, topic)
	if err != nil {
		tb.Fatal(err)
	}
	if lag != "" {
		tb.Fatalf("%s: %s", side, lag)
	}
}

// bareKafka is a plain kafka-go consumer: one goroutine fetching,
// decoding, handling and committing. With interval 0 it commits the last
// message of each partition itself, synchronously, every commitEvery
// messages and at the end. With an interval it hands every message to
// CommitMessages, and the reader commits what it was handed every interval
// (kafka-go's CommitInterval) and when it closes. With receive, the loop
// hands each order to a Receiver over memstore (Handle), whose handler
// counts it: the same loop with dedup's receiver in it and no adapter, the
// floor the dedupkafka Consumer can reach.
func bareKafka(tb testing.TB, brokers []string, topic string, commitEvery int, interval time.Duration, receive bool, t *tally) {
	cfg := kafkaReaderConfig(brokers, topic)
	cfg.CommitInterval = interval
	r := kafka.NewReader(cfg)
	defer func() {
		if err := r.Close(); err != nil {
			tb.Errorf("close the reader: %v", err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
	defer cancel()
	handle := func(o order) error { t.add(o); return nil }
	if receive {
		rcv, err := dedup.NewReceiver(orderStore(tb, t.n), func(o order) (string, error) { return o.ID, nil },
			func(_ context.Context, o order) (struct{}, error) {
				t.add(o)
				return struct{}{}, nil
			}, &dedup.Config{Retention: 7 * 24 * time.Hour})
		if err != nil {
			tb.Fatal(err)
		}
		handle = func(o order) error {
			_, err := rcv.Handle(ctx, o)
			return err
		}
	}
	last := map[int]kafka.Message{}
	for i := range t.n {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			tb.Fatal(err)
		}
		o, err := decode(m.Value)
		if err != nil {
			tb.Fatal(err)
		}
		if err := handle(o); err != nil {
			tb.Fatal(err)
		}
		if interval > 0 {
			if err := r.CommitMessages(ctx, m); err != nil {
				tb.Fatal(err)
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
				tb.Fatal(err)
			}
		}
	}
}

// dedupKafka is the adapter's Consumer over memstore with opts; Stop
// commits what is settled.
func dedupKafka(tb testing.TB, brokers []string, topic string, opts *dedupkafka.Options, t *tally) {
	rcv, err := dedup.NewReceiver(orderStore(tb, t.n), idstrategy.BodyField("id", func(o order) string { return o.ID }),
		func(_ context.Context, m *dedup.Message[order]) (struct{}, error) {
			t.add(m.Body)
			return struct{}{}, nil
		}, &dedup.Config{Retention: 7 * 24 * time.Hour})
	if err != nil {
		tb.Fatal(err)
	}
	r := kafka.NewReader(kafkaReaderConfig(brokers, topic))
	defer func() { _ = r.Close() }() // after Stop: the Consumer leaves the reader to its maker
	c, err := dedupkafka.NewConsumer(r, rcv, opts)
	if err != nil {
		tb.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	testenv.Recv(tb, t.done, "every order consumed")
	ctx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
	defer cancel()
	if err := c.Stop(ctx); err != nil {
		tb.Fatal(err)
	}
}

// watermillKafka is Watermill's Kafka subscriber (sarama, a consumer
// group, auto-commit every interval) under a router with its Deduplicator.
// One subscription: it hands over one message per partition at a time,
// which the router handles concurrently.
func watermillKafka(tb testing.TB, brokers []string, topic string, interval time.Duration, t *tally) {
	cfg := wkafka.DefaultSaramaSubscriberConfig()
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest // the topic is filled before the group exists
	cfg.Consumer.Offsets.AutoCommit.Interval = interval
	sub, err := wkafka.NewSubscriber(wkafka.SubscriberConfig{
		Brokers: brokers, Unmarshaler: wkafka.DefaultMarshaler{}, OverwriteSaramaConfig: cfg, ConsumerGroup: topic,
	}, watermill.NopLogger{})
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = sub.Close() }()
	runWatermill(tb, topic, sub, 1, t)
	// The clock stopped at the last order handled; the router acks it and
	// the subscriber marks its offset a moment later. A close before the
	// mark would leave it uncommitted (a redelivery after a restart, not a
	// loss), so wait, outside the clock, for the auto-commit to reach every
	// partition's end, then close (about 500 ms, also outside the clock).
	awaitCommitted(brokers, topic)
	if err := sub.Close(); err != nil {
		tb.Fatal(err)
	}
}

// kafkaInterval is the commit cadence of every side of the Kafka row that
// commits on a timer. The adapter's default is 1s, but the bare reader
// handles 300,000 to 600,000 messages a second here: for several commits
// a run at 1s would need millions of messages a side and the row minutes a
// round. At 100ms a run of 300,000 holds several commits on every side,
// each side commits ten times as often as at the default (a cost the
// default would not pay), and the row stays about a minute.
const kafkaInterval = 100 * time.Millisecond

func init() {
	// run makes a side's run: kafkaRun on the row's cluster, consuming with
	// consume.
	run := func(brokers []string, side string, consume func(tb testing.TB, topic string, t *tally)) func(tb testing.TB, n int) sample {
		return func(tb testing.TB, n int) sample {
			return kafkaRun(tb, brokers, n, side, func(topic string, t *tally) { consume(tb, topic, t) })
		}
	}
	register(row{
		name: fmt.Sprintf("Kafka consumer (kfake, %d partitions), commit after every message, memstore, trivial handler", kafkaPartitions),
		unit: "msgs/s", n: 40000, cpu: true,
		setup: func(tb testing.TB) []side {
			brokers := startKafka(tb)
			return []side{
				{name: "bare kafka-go reader, synchronous commit after every message", run: run(brokers, "bare/1", func(tb testing.TB, topic string, t *tally) {
					bareKafka(tb, brokers, topic, 1, 0, false, t)
				})},
				{name: "bare kafka-go reader calling Receiver.Handle over memstore, same commits", run: run(brokers, "bare+handle/1", func(tb testing.TB, topic string, t *tally) {
					bareKafka(tb, brokers, topic, 1, 0, true, t)
				})},
				{name: "dedupkafka Consumer, memstore, CommitEveryOutcome", run: run(brokers, "dedup/every", func(tb testing.TB, topic string, t *tally) {
					dedupKafka(tb, brokers, topic, &dedupkafka.Options{DropPoison: true, CommitInterval: dedupkafka.CommitEveryOutcome}, t)
				})},
			}
		},
		versus: []versus{{name: "dedupkafka over bare + Handle, paired", a: 2, b: 1}},
	}, row{
		name: fmt.Sprintf("Kafka consumer (kfake, %d partitions), commit every %v, memstore, trivial handler", kafkaPartitions, kafkaInterval),
		unit: "msgs/s", n: 300_000, cpu: true, // the fastest side's run holds about 7 commit intervals
		setup: func(tb testing.TB) []side {
			brokers := startKafka(tb)
			return []side{
				{name: fmt.Sprintf("bare kafka-go reader, CommitInterval %v (kafka-go's own)", kafkaInterval), run: run(brokers, "bare/interval", func(tb testing.TB, topic string, t *tally) {
					bareKafka(tb, brokers, topic, 0, kafkaInterval, false, t)
				})},
				{name: "bare kafka-go reader, synchronous commit every 100 messages", run: run(brokers, "bare/100", func(tb testing.TB, topic string, t *tally) {
					bareKafka(tb, brokers, topic, 100, 0, false, t)
				})},
				{name: fmt.Sprintf("bare kafka-go reader calling Receiver.Handle over memstore, CommitInterval %v", kafkaInterval), run: run(brokers, "bare+handle/interval", func(tb testing.TB, topic string, t *tally) {
					bareKafka(tb, brokers, topic, 0, kafkaInterval, true, t)
				})},
				{name: fmt.Sprintf("dedupkafka Consumer, memstore, CommitInterval %v (default 1s)", kafkaInterval), run: run(brokers, "dedup/interval", func(tb testing.TB, topic string, t *tally) {
					dedupKafka(tb, brokers, topic, &dedupkafka.Options{DropPoison: true, CommitInterval: kafkaInterval}, t)
				})},
				{name: fmt.Sprintf("Watermill Kafka subscriber (sarama, auto-commit every %v) + Deduplicator", kafkaInterval), run: run(brokers, "watermill", func(tb testing.TB, topic string, t *tally) {
					watermillKafka(tb, brokers, topic, kafkaInterval, t)
				})},
			}
		},
		versus: []versus{
			{name: "dedupkafka over bare + Handle, paired", a: 3, b: 2},
			{name: "dedupkafka Consumer over Watermill, paired", a: 3, b: 4},
		},
	})
}
