package dedupkafka_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupkafka "github.com/dedup-go/dedup/adapters/kafka"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/memstore"
)

// TestDeadLetterTopicChecked: Start refuses a dead-letter topic that does
// not exist, with ErrDeadLetterTopic (and dedup.ErrInvalidConfig) and an
// error naming it, instead of stalling a partition at the first poison
// message. It is looked for where dead letters are written: the
// DeadLetterWriter's cluster when one is given, else the reader's.
func TestDeadLetterTopicChecked(t *testing.T) {
	t.Parallel()
	const topic, dlq = "orders", "orders.dlq"
	without := startKafka(t, 1, topic)   // no dead-letter topic
	with := startKafka(t, 1, topic, dlq) // a dead-letter topic
	writerOf := func(brokers []string) *kafka.Writer {
		w := &kafka.Writer{Addr: kafka.TCP(brokers...), RequiredAcks: kafka.RequireAll, Transport: closedAtCleanup(t)}
		t.Cleanup(func() { _ = w.Close() })
		return w
	}
	start := func(readFrom []string, w *kafka.Writer) (*dedupkafka.Consumer[Order, Receipt], error) {
		dc := fastConfig("billing")
		dc.Retention = 7 * 24 * time.Hour
		c, err := dedupkafka.NewConsumer(newReader(t, readFrom, "g", topic), orderReceiver(t, dc),
			&dedupkafka.Options{DeadLetterTopic: dlq, DeadLetterWriter: w})
		require.NoError(t, err)
		return c, c.Start(t.Context())
	}

	for name, tc := range map[string]struct {
		reader []string
		writer *kafka.Writer
		ok     bool
	}{
		"reader's cluster without it":                {reader: without},
		"reader's cluster with it":                   {reader: with, ok: true},
		"writer's cluster without it":                {reader: with, writer: writerOf(without)},
		"writer's cluster with it, reader's without": {reader: without, writer: writerOf(with), ok: true},
	} {
		c, err := start(tc.reader, tc.writer)
		if tc.ok {
			require.NoError(t, err, name)
			stopAtCleanup(t, c)
			continue
		}
		require.ErrorIs(t, err, dedupkafka.ErrDeadLetterTopic, name)
		require.ErrorIs(t, err, dedup.ErrInvalidConfig, name)
		require.ErrorContains(t, err, `"`+dlq+`"`, name)
		require.ErrorIs(t, c.Stop(t.Context()), dedupkafka.ErrNotStarted, "%s: a refused Start starts nothing", name)
	}
}

// TestStartContextEndIsUnasked: when the context given to Start ends
// without Stop (a timeout, a cancellation with a cause), the consumer
// stops, logs it at error level, and Err matches ErrStoppedUnasked and the
// context's cause. After Stop, the same context ending is no error.
func TestStartContextEndIsUnasked(t *testing.T) {
	t.Parallel()
	const topic = "orders"
	brokers := startKafka(t, 1, topic)
	errShutdown := errors.New("the service is shutting down")
	for _, how := range []string{"cancel with a cause", "timeout", "Stop first"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			var logs lockedBuffer
			group := "g-" + how
			c, err := dedupkafka.NewConsumer(newReader(t, brokers, group, topic), orderReceiver(t, fastConfig("billing")),
				&dedupkafka.Options{DropPoison: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			require.NoError(t, err)
			stopAtCleanup(t, c)
			var want error
			switch how {
			case "cancel with a cause":
				ctx, cancel := context.WithCancelCause(context.Background())
				require.NoError(t, c.Start(ctx))
				require.NoError(t, c.Err(), "running")
				cancel(errShutdown)
				want = errShutdown
			case "timeout":
				// Start may or may not finish its checks before the deadline
				// (their failure is a warning): either way the consumer runs
				// until the context ends.
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				defer cancel()
				require.NoError(t, c.Start(ctx))
				want = context.DeadlineExceeded
			default:
				ctx, cancel := context.WithCancelCause(context.Background())
				defer cancel(nil)
				require.NoError(t, c.Start(ctx))
				stopCtx, stopCancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
				defer stopCancel()
				require.NoError(t, c.Stop(stopCtx))
				cancel(errShutdown)
			}
			testenv.Recv(t, c.Stopped(), "the consumer to stop")
			if want == nil {
				require.NoError(t, c.Err(), "a stop asked for is no error")
				require.NotContains(t, logs.String(), "level=ERROR")
				return
			}
			require.ErrorIs(t, c.Err(), dedupkafka.ErrStoppedUnasked)
			require.ErrorIs(t, c.Err(), want)
			require.Contains(t, logs.String(), `level=ERROR msg="dedupkafka: the consumer stopped without Stop"`)
		})
	}
}

// TestReaderLeftToCaller: the reader is the caller's. Stop stops fetching,
// finishes and commits, and leaves the reader open: it still fetches, and
// its member is still in the group. The caller's Close then leaves the
// group at once (no session timeout to wait for).
func TestReaderLeftToCaller(t *testing.T) {
	t.Parallel()
	const topic, group = "orders", "billing"
	brokers := startKafka(t, 1, topic)
	w := newWriter(t, brokers)
	produce(t, w, topic, []kafka.Message{{Value: orderJSON(t, Order{ID: orderID(0)})}, {Value: orderJSON(t, Order{ID: orderID(1)})}})
	fx := newEffects()
	cfg := fastConfig("billing")
	rcv := orderReceiverWith(t, cfg, fx)
	r := kafka.NewReader(readerConfig(brokers, group, topic))
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = r.Close()
		}
	})
	c, err := dedupkafka.NewConsumer(r, rcv, &dedupkafka.Options{DropPoison: true, CommitInterval: time.Hour})
	require.NoError(t, err)
	require.NoError(t, c.Start(t.Context()))
	stopAtCleanup(t, c)
	eventually(t, 30*time.Second, func() bool { return fx.Len() == 2 }, "both orders handled")
	ctx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
	defer cancel()
	require.NoError(t, c.Stop(ctx))
	require.Equal(t, map[int]int64{0: 2}, committed(t, brokers, group, topic, 1), "Stop commits")
	require.NoError(t, c.Err())

	// The reader is still open: it fetches what comes next, and its member
	// is in the group.
	require.Equal(t, 1, members(t, brokers, group), "the member left the group at Stop")
	produce(t, w, topic, []kafka.Message{{Value: orderJSON(t, Order{ID: orderID(2)})}})
	fctx, fcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer fcancel()
	m, err := r.FetchMessage(fctx)
	require.NoError(t, err, "the reader was closed by the consumer")
	require.Equal(t, int64(2), m.Offset)
	require.Equal(t, 2, fx.Len(), "the consumer handled a message after Stop")

	// The caller's Close leaves the group.
	closed = true
	require.NoError(t, r.Close())
	require.Zero(t, members(t, brokers, group), "the member is still in the group after Close")
	_, err = r.FetchMessage(fctx)
	require.ErrorIs(t, err, io.EOF)
}

// members returns how many members group has.
func members(t testing.TB, brokers []string, group string) int {
	t.Helper()
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: closedAtCleanup(t)}
	resp, err := client.DescribeGroups(t.Context(), &kafka.DescribeGroupsRequest{GroupIDs: []string{group}})
	require.NoError(t, err)
	require.Len(t, resp.Groups, 1)
	require.NoError(t, resp.Groups[0].Error)
	return len(resp.Groups[0].Members)
}

// orderReceiverWith is orderReceiver whose handler records its effects in
// fx.
func orderReceiverWith(t testing.TB, cfg *dedup.Config, fx *effects) *dedup.Receiver[*dedup.Message[Order], Receipt] {
	t.Helper()
	s, err := memstore.New(nil)
	require.NoError(t, err)
	rcv, err := dedup.NewReceiver(s, idstrategy.BodyField("id", func(o Order) string { return o.ID }),
		func(_ context.Context, m *dedup.Message[Order]) (Receipt, error) {
			return Receipt{OrderID: m.Body.ID, Charge: fx.add(m.Partition, m.Body.ID)}, nil
		}, cfg)
	require.NoError(t, err)
	return rcv
}
