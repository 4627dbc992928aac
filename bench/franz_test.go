package bench

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedup-go/dedup"
	dedupfranz "github.com/dedup-go/dedup/adapters/franz"
	dedupkafka "github.com/dedup-go/dedup/adapters/kafka"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/testenv"
)

// franzOpts are the client options of every franz-go side: the timeouts
// the kafka-go sides' reader has (kafkaReaderConfig), reading from the
// start (kgo's default, as kafka.FirstOffset).
func franzOpts(brokers []string) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.FetchMaxWait(50 * time.Millisecond),
		kgo.SessionTimeout(time.Second), kgo.HeartbeatInterval(100 * time.Millisecond),
		kgo.RebalanceTimeout(2 * time.Second),
		kgo.RetryBackoffFn(func(int) time.Duration { return 10 * time.Millisecond }),
	}
}

// bareFranz is a plain franz-go group consumer (the group named as the
// topic): one goroutine polling, decoding, handling and committing. With
// interval 0 it commits each record once handled, synchronously
// (CommitRecords), before the next. With an interval it marks each record
// once handled (kgo.AutoCommitMarks), and kgo commits what was marked
// every interval (kgo.AutoCommitInterval); the marks left are committed,
// synchronously, after the last order (outside the clock). With receive,
// each order goes through a Receiver over memstore (Handle), whose handler
// counts it: the same loop with dedup's receiver in it and no adapter, the
// floor the dedupfranz Consumer can reach.
func bareFranz(tb testing.TB, brokers []string, topic string, interval time.Duration, receive bool, t *tally) {
	opts := append(franzOpts(brokers), kgo.ConsumerGroup(topic), kgo.ConsumeTopics(topic))
	if interval > 0 {
		opts = append(opts, kgo.AutoCommitMarks(), kgo.AutoCommitInterval(interval))
	} else {
		opts = append(opts, kgo.DisableAutoCommit())
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
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
	for handled := 0; handled < t.n; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			tb.Fatal(err)
		}
		if err := fs.Err0(); err != nil {
			tb.Fatal(err)
		}
		for it := fs.RecordIter(); !it.Done(); {
			r := it.Next()
			o, err := decode(r.Value)
			if err != nil {
				tb.Fatal(err)
			}
			if err := handle(o); err != nil {
				tb.Fatal(err)
			}
			handled++
			if interval > 0 {
				cl.MarkCommitRecords(r)
				continue
			}
			if err := cl.CommitRecords(ctx, r); err != nil {
				tb.Fatal(err)
			}
		}
	}
	if interval > 0 {
		if err := cl.CommitMarkedOffsets(ctx); err != nil && !errors.Is(err, context.Canceled) {
			tb.Fatal(err)
		}
	}
}

// dedupFranz is the adapter's Consumer over memstore with opts, the group
// named as the topic; Stop commits what is settled and closes the client.
func dedupFranz(tb testing.TB, brokers []string, topic string, opts *dedupfranz.Options, t *tally) {
	rcv, err := dedup.NewReceiver(orderStore(tb, t.n), idstrategy.BodyField("id", func(o order) string { return o.ID }),
		func(_ context.Context, m *dedup.Message[order]) (struct{}, error) {
			t.add(m.Body)
			return struct{}{}, nil
		}, &dedup.Config{Retention: 7 * 24 * time.Hour})
	if err != nil {
		tb.Fatal(err)
	}
	c, err := dedupfranz.NewConsumer(franzOpts(brokers), topic, []string{topic}, rcv, opts)
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

func init() {
	run := func(brokers []string, side string, consume func(tb testing.TB, topic string, t *tally)) func(tb testing.TB, n int) sample {
		return func(tb testing.TB, n int) sample {
			return kafkaRun(tb, brokers, n, side, func(topic string, t *tally) { consume(tb, topic, t) })
		}
	}
	register(row{
		name: fmt.Sprintf("Kafka consumer on franz-go (kfake, %d partitions), commit after every message, memstore, trivial handler", kafkaPartitions),
		unit: "msgs/s", n: 40000, cpu: true,
		setup: func(tb testing.TB) []side {
			brokers := startKafka(tb)
			return []side{
				{name: "bare franz-go group consumer, synchronous CommitRecords after every message", run: run(brokers, "franz bare/1", func(tb testing.TB, topic string, t *tally) {
					bareFranz(tb, brokers, topic, 0, false, t)
				})},
				{name: "bare franz-go group consumer calling Receiver.Handle over memstore, same commits", run: run(brokers, "franz bare+handle/1", func(tb testing.TB, topic string, t *tally) {
					bareFranz(tb, brokers, topic, 0, true, t)
				})},
				{name: "dedupfranz Consumer, memstore, CommitEveryOutcome", run: run(brokers, "dedupfranz/every", func(tb testing.TB, topic string, t *tally) {
					dedupFranz(tb, brokers, topic, &dedupfranz.Options{DropPoison: true, CommitInterval: dedupfranz.CommitEveryOutcome}, t)
				})},
				{name: "dedupkafka Consumer (kafka-go), memstore, CommitEveryOutcome", run: run(brokers, "dedupkafka/every", func(tb testing.TB, topic string, t *tally) {
					dedupKafka(tb, brokers, topic, &dedupkafka.Options{DropPoison: true, CommitInterval: dedupkafka.CommitEveryOutcome}, t)
				})},
			}
		},
		versus: []versus{
			{name: "dedupfranz over bare franz-go + Handle, paired", a: 2, b: 1},
			{name: "dedupfranz over dedupkafka, paired", a: 2, b: 3},
		},
	}, row{
		name: fmt.Sprintf("Kafka consumer on franz-go (kfake, %d partitions), commit every %v, memstore, trivial handler", kafkaPartitions, kafkaInterval),
		unit: "msgs/s", n: 300_000, cpu: true,
		setup: func(tb testing.TB) []side {
			brokers := startKafka(tb)
			return []side{
				{name: fmt.Sprintf("bare franz-go group consumer, marks committed every %v (kgo.AutoCommitMarks, AutoCommitInterval)", kafkaInterval), run: run(brokers, "franz bare/interval", func(tb testing.TB, topic string, t *tally) {
					bareFranz(tb, brokers, topic, kafkaInterval, false, t)
				})},
				{name: "bare franz-go group consumer calling Receiver.Handle over memstore, same commits", run: run(brokers, "franz bare+handle/interval", func(tb testing.TB, topic string, t *tally) {
					bareFranz(tb, brokers, topic, kafkaInterval, true, t)
				})},
				{name: fmt.Sprintf("dedupfranz Consumer, memstore, CommitInterval %v (default 1s)", kafkaInterval), run: run(brokers, "dedupfranz/interval", func(tb testing.TB, topic string, t *tally) {
					dedupFranz(tb, brokers, topic, &dedupfranz.Options{DropPoison: true, CommitInterval: kafkaInterval}, t)
				})},
				{name: fmt.Sprintf("dedupkafka Consumer (kafka-go), memstore, CommitInterval %v", kafkaInterval), run: run(brokers, "dedupkafka/interval", func(tb testing.TB, topic string, t *tally) {
					dedupKafka(tb, brokers, topic, &dedupkafka.Options{DropPoison: true, CommitInterval: kafkaInterval}, t)
				})},
			}
		},
		versus: []versus{
			{name: "dedupfranz over bare franz-go + Handle, paired", a: 2, b: 1},
			{name: "dedupfranz over dedupkafka, paired", a: 2, b: 3},
		},
	})
}
