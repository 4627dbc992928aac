package dedupnats_test

import (
	"context"
	"errors"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupnats "github.com/dedup-go/dedup/adapters/nats"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/outbox"
	"github.com/dedup-go/dedup/outbox/outboxtest"
)

// TestOutboxPublisher runs the outbox publishers' suite on JetStream: a
// stream of its own per test, read back with an ordered consumer.
func TestOutboxPublisher(t *testing.T) {
	forEachServer(t, func(t *testing.T, url string) {
		_, js := connect(t, url)
		outboxtest.Run(t, func(t *testing.T) outboxtest.Target {
			n := newNames()
			streams(t, js, n)
			p, err := dedupnats.NewOutboxPublisher(js, nil)
			require.NoError(t, err)
			return outboxtest.Target{
				Publisher:   p,
				Destination: n.subject,
				Unroutable:  "dedupt.nostream." + suffix(),
				Invalid:     "dedupt.*.wildcard",
				Read: func(ctx context.Context, want int) ([]outboxtest.Received, error) {
					return readStream(ctx, js, n.stream, want)
				},
			}
		})
	})
}

// readStream returns every message of stream once it holds at least n.
func readStream(ctx context.Context, js jetstream.JetStream, stream string, n int) ([]outboxtest.Received, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	for {
		info, err := s.Info(ctx)
		if err != nil {
			return nil, err
		}
		if info.State.Msgs >= uint64(n) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, err
	}
	var out []outboxtest.Received
	for uint64(len(out)) < info.State.Msgs {
		batch, err := c.Fetch(int(info.State.Msgs)-len(out), jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return nil, err
		}
		for m := range batch.Messages() {
			r := outboxtest.Received{ID: m.Headers().Get("Nats-Msg-Id"), Body: m.Data(), Header: map[string]string{}}
			for k, vs := range m.Headers() {
				r.Header[k] = vs[0]
			}
			out = append(out, r)
		}
		if err := batch.Error(); err != nil {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return out, nil
}

// TestOutboxPublisherRefusals: bad arguments and subjects.
func TestOutboxPublisherRefusals(t *testing.T) {
	t.Parallel()
	_, err := dedupnats.NewOutboxPublisher(nil, nil)
	require.ErrorIs(t, err, dedup.ErrInvalidConfig)

	_, js := connect(t, testenv.NATS.Addr(t))
	n := newNames()
	streams(t, js, n)
	p, err := dedupnats.NewOutboxPublisher(js, &dedupnats.OutboxOptions{ExpectStream: "NOT_" + n.stream})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err = p.Publish(ctx, []outbox.Message{
		{ID: "a", Destination: "dedupt.*", Body: []byte("x")},
		{ID: "b", Destination: n.subject, Body: []byte("x")},
	})
	var be *outbox.BatchError
	require.ErrorAs(t, err, &be)
	require.ErrorIs(t, be.Errs[0], dedupnats.ErrInvalidSubject)
	require.Error(t, be.Errs[1], "stored by another stream than the one expected")
	require.False(t, errors.Is(be.Errs[1], dedupnats.ErrInvalidSubject))
	require.ErrorIs(t, be.Errs[0], outbox.ErrPermanent, "a wildcard is never a subject to publish to")
	require.NotErrorIs(t, be.Errs[1], outbox.ErrPermanent, "the streams can be fixed")
}

// TestOutboxPublisherTooLarge: a message over the server's max_payload or
// over its stream's max_msg_size is refused for good (outbox.ErrPermanent),
// alone; the others of the call are stored.
func TestOutboxPublisherTooLarge(t *testing.T) {
	t.Parallel()
	nc, js := connect(t, testenv.NATS.Addr(t))
	n := newNames()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: n.stream, Subjects: []string{n.subject}, Storage: jetstream.MemoryStorage, MaxMsgSize: 1024})
	require.NoError(t, err)
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), n.stream) })
	p, err := dedupnats.NewOutboxPublisher(js, nil)
	require.NoError(t, err)
	err = p.Publish(ctx, []outbox.Message{
		{ID: "small", Destination: n.subject, Body: []byte("x")},
		{ID: "over-stream", Destination: n.subject, Body: make([]byte, 2048)},
		{ID: "over-server", Destination: n.subject, Body: make([]byte, nc.MaxPayload()+1)},
	})
	var be *outbox.BatchError
	require.ErrorAs(t, err, &be)
	require.NoError(t, be.Errs[0])
	require.ErrorIs(t, be.Errs[1], jetstream.ErrStreamMessageExceedsMaximum)
	require.ErrorIs(t, be.Errs[1], outbox.ErrPermanent)
	require.ErrorIs(t, be.Errs[2], natsgo.ErrMaxPayload)
	require.ErrorIs(t, be.Errs[2], outbox.ErrPermanent)
}
