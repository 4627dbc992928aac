package dedupkafka_test

import (
	"context"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	dedupkafka "github.com/dedup-go/dedup/adapters/kafka"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/outbox"
)

// TestOutboxPublisherClose: the asynchronous publisher's Close waits for
// the messages in flight (a produce the broker refuses, retriable, until
// the test lets it through) up to its context, which ends first; a later
// Close waits again and returns once they are written, and PublishEach
// has reported each acknowledged. Close again returns the same; a
// publish after Close fails.
func TestOutboxPublisherClose(t *testing.T) {
	t.Parallel()
	cluster := startCluster(t, 1, "a")
	var held atomic.Bool
	held.Store(true)
	refused := make(chan struct{}, 1)
	cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if !held.Load() {
			return nil, nil, false
		}
		select {
		case refused <- struct{}{}:
		default:
		}
		pr := req.(*kmsg.ProduceRequest)
		resp := pr.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range pr.Topics {
			t := kmsg.NewProduceResponseTopic()
			t.Topic = rt.Topic
			for _, p := range rt.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition = p.Partition
				rp.ErrorCode = kerr.NotLeaderForPartition.Code
				t.Partitions = append(t.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, t)
		}
		return resp, nil, true
	})
	w := asyncOutboxWriter(t, cluster.ListenAddrs(), nil)
	w.MaxAttempts, w.WriteBackoffMin, w.WriteBackoffMax = 1000, 5*time.Millisecond, 5*time.Millisecond
	p := newAsyncOutboxPublisher(t, w)
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	msgs := []outbox.Message{{ID: "1", Destination: "a", Body: []byte("x")}, {ID: "2", Destination: "a", Body: []byte("y")}}
	acked := make(chan error, len(msgs))
	done := make(chan error, 1)
	go func() {
		done <- p.PublishEach(ctx, msgs, func(_ int, err error) { acked <- err })
	}()

	testenv.Recv(t, refused, "the messages' produce")
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	require.ErrorIs(t, p.Close(short), context.DeadlineExceeded, "Close returned while the messages were in flight")
	select {
	case err := <-done:
		t.Fatalf("PublishEach returned (%v) before its messages were written", err)
	default:
	}

	held.Store(false)
	require.NoError(t, p.Close(ctx), "Close, once the messages in flight are written")
	require.NoError(t, testenv.Recv(t, done, "PublishEach to return"))
	for range msgs {
		require.NoError(t, testenv.Recv(t, acked, "a report"), "acknowledged")
	}
	require.NoError(t, p.Close(ctx), "Close again")
	got, err := readTopic(ctx, cluster.ListenAddrs(), "a", 2)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.ErrorIs(t, p.Publish(ctx, msgs), io.ErrClosedPipe, "a publish after Close")
	require.ErrorIs(t, p.PublishEach(ctx, msgs, func(int, error) { t.Error("a report after Close") }), io.ErrClosedPipe)

	sync := newOutboxPublisher(t, outboxWriter(t, cluster.ListenAddrs(), nil))
	require.NoError(t, sync.Publish(ctx, msgs[:1]))
	require.NoError(t, sync.Close(ctx))
	require.NoError(t, sync.Close(ctx), "Close again")
	require.ErrorIs(t, sync.Publish(ctx, msgs[:1]), io.ErrClosedPipe, "a publish after Close")
}

// TestWriterClose: Close closes the kafka.Writer, after the message an
// asynchronous one still holds is written; Close again returns the same,
// and a write after it fails.
func TestWriterClose(t *testing.T) {
	t.Parallel()
	const topic = "orders"
	brokers := startKafka(t, 1, topic)
	tr := closedAtCleanup(t)
	w := &dedupkafka.Writer{W: &kafka.Writer{
		Addr: kafka.TCP(brokers...), Topic: topic, RequiredAcks: kafka.RequireAll, Async: true,
		BatchTimeout: time.Hour, BatchSize: 100, Transport: tr, // held until Close
	}}
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	require.NoError(t, w.WriteMessages(ctx, kafka.Message{Value: []byte(`{"id":"o-1"}`)}))
	require.NoError(t, w.Close(ctx))
	require.NoError(t, w.Close(ctx), "Close again")
	got := readAll(t, brokers, topic, 1)
	_, ok := dedupkafka.Header(got[0].Headers).Get(dedupkafka.HeaderMessageID)
	require.True(t, ok, "stamped")
	require.ErrorIs(t, w.WriteMessages(ctx, kafka.Message{Value: []byte(`{"id":"o-2"}`)}), io.ErrClosedPipe)
	require.NoError(t, (&dedupkafka.Writer{}).Close(ctx), "a Writer without a kafka.Writer has nothing to close")
}
