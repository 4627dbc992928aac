package dedupkafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupkafka "github.com/dedup-go/dedup/adapters/kafka"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/store/memstore"
)

func orderReceiver(t testing.TB, cfg *dedup.Config) *dedup.Receiver[*dedup.Message[Order], Receipt] {
	t.Helper()
	s, err := memstore.New(nil)
	require.NoError(t, err)
	rcv, err := dedup.NewReceiver(s, idstrategy.BodyField("id", func(o Order) string { return o.ID }),
		func(context.Context, *dedup.Message[Order]) (Receipt, error) { return Receipt{}, nil }, cfg)
	require.NoError(t, err)
	return rcv
}

// TestOptionsRefused: options out of range are refused by NewConsumer with
// dedup.ErrInvalidConfig.
func TestOptionsRefused(t *testing.T) {
	t.Parallel()
	r := kafka.NewReader(readerConfig([]string{"127.0.0.1:1"}, "g", "t"))
	t.Cleanup(func() { _ = r.Close() })
	rcv := orderReceiver(t, fastConfig("billing"))
	for name, o := range map[string]dedupkafka.Options{
		"negative concurrency":    {Concurrency: -1},
		"negative batch":          {BatchSize: -1},
		"negative linger":         {Linger: -1},
		"negative buffer":         {PartitionBuffer: -1},
		"negative commit":         {CommitInterval: -2},
		"negative retry delay":    {MinRetryDelay: -1},
		"negative settle timeout": {SettleTimeout: -1},
		"writer without topic":    {DeadLetterWriter: &kafka.Writer{RequiredAcks: kafka.RequireAll}},
		"writer with a topic":     {DeadLetterTopic: "dlq", DeadLetterWriter: &kafka.Writer{Topic: "x", RequiredAcks: kafka.RequireAll}},
		"writer acks one":         {DeadLetterTopic: "dlq", DeadLetterWriter: &kafka.Writer{RequiredAcks: kafka.RequireOne}},
		"writer async":            {DeadLetterTopic: "dlq", DeadLetterWriter: &kafka.Writer{RequiredAcks: kafka.RequireAll, Async: true}},
	} {
		o.DropPoison = o.DeadLetterTopic == "" // each case breaks one rule only
		_, err := dedupkafka.NewConsumer(r, rcv, &o)
		require.ErrorIs(t, err, dedup.ErrInvalidConfig, name)
	}
	// Poison must land somewhere, or be dropped on purpose: never both.
	_, err := dedupkafka.NewConsumer(r, rcv, &dedupkafka.Options{})
	require.ErrorIs(t, err, dedup.ErrInvalidConfig, "no DeadLetterTopic and no DropPoison")
	require.ErrorContains(t, err, "DropPoison")
	// nil means all defaults, and where poison goes has none: refused, with
	// an error naming both choices.
	_, err = dedupkafka.NewConsumer(r, rcv, nil)
	require.ErrorIs(t, err, dedup.ErrInvalidConfig, "nil options: no DeadLetterTopic")
	require.ErrorContains(t, err, "Options.DeadLetterTopic")
	require.ErrorContains(t, err, "Options.DropPoison")
	_, err = dedupkafka.NewConsumer(r, rcv, &dedupkafka.Options{DeadLetterTopic: "dlq", DropPoison: true})
	require.ErrorIs(t, err, dedup.ErrInvalidConfig, "both")
	_, err = dedupkafka.NewConsumer[Order, Receipt](nil, rcv, nil)
	require.ErrorIs(t, err, dedup.ErrInvalidConfig)
	_, err = dedupkafka.NewConsumer[Order, Receipt](r, nil, nil)
	require.ErrorIs(t, err, dedup.ErrInvalidConfig)
	c, err := dedupkafka.NewConsumer(r, rcv, &dedupkafka.Options{DropPoison: true, CommitInterval: dedupkafka.CommitEveryOutcome})
	require.NoError(t, err)
	require.ErrorIs(t, c.Stop(t.Context()), dedupkafka.ErrNotStarted)
}

// TestStartRefuses: Start refuses a reader it cannot commit for safely,
// and, with StrictHorizon, a receiver whose retention is shorter than the
// topic's when the reader starts at the first offset. A Consumer starts
// once.
func TestStartRefuses(t *testing.T) {
	t.Parallel()
	const topic = "orders"
	brokers := startKafka(t, 1, topic) // kfake's default retention.ms: 7 days
	start := func(cfg kafka.ReaderConfig, retention time.Duration, strict bool) (*dedupkafka.Consumer[Order, Receipt], error) {
		r := kafka.NewReader(cfg)
		t.Cleanup(func() { _ = r.Close() })
		dc := fastConfig("billing")
		dc.Retention = retention
		c, err := dedupkafka.NewConsumer(r, orderReceiver(t, dc), &dedupkafka.Options{DropPoison: true, StrictHorizon: strict})
		require.NoError(t, err)
		return c, c.Start(t.Context())
	}
	week := 7 * 24 * time.Hour

	cfg := readerConfig(brokers, "", topic)
	cfg.GroupID = ""
	cfg.Partition = 0
	_, err := start(cfg, week, false)
	require.ErrorIs(t, err, dedupkafka.ErrReaderConfig, "no GroupID")
	require.ErrorIs(t, err, dedup.ErrInvalidConfig)

	cfg = readerConfig(brokers, "g", topic)
	cfg.CommitInterval = time.Second
	_, err = start(cfg, week, false)
	require.ErrorIs(t, err, dedupkafka.ErrReaderConfig, "asynchronous commits")

	_, err = start(readerConfig(brokers, "g", topic), 24*time.Hour, true)
	require.ErrorIs(t, err, dedupkafka.ErrHorizon, "a day of retention for a week of topic, from the first offset")
	require.ErrorIs(t, err, dedup.ErrInvalidConfig)

	cfg = readerConfig(brokers, "g", topic)
	cfg.StartOffset = kafka.LastOffset
	c, err := start(cfg, 24*time.Hour, true)
	require.NoError(t, err, "from the last offset, re-reads go back to the last commit only")
	stopAtCleanup(t, c)
	require.ErrorIs(t, c.Start(t.Context()), dedupkafka.ErrStarted)

	c, err = start(readerConfig(brokers, "g2", topic), week, true)
	require.NoError(t, err, "a week of retention covers a week of topic")
	stopAtCleanup(t, c)
}

func TestHorizon(t *testing.T) {
	t.Parallel()
	h, ok := dedupkafka.Horizon(kafka.FirstOffset, time.Hour)
	require.True(t, ok)
	require.Equal(t, time.Hour, h)
	_, ok = dedupkafka.Horizon(kafka.FirstOffset, -1)
	require.False(t, ok, "retention.ms -1 keeps messages forever")
	h, ok = dedupkafka.Horizon(kafka.LastOffset, -1)
	require.True(t, ok)
	require.Zero(t, h)
}
