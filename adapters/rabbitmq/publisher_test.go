package dedupamqp_test

import (
	"context"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupamqp "github.com/dedup-go/dedup/adapters/rabbitmq"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/testenv"
)

// TestPublisher: every message gets a MessageId (its own, a derived one,
// or a fresh one) and Publish returns once the broker confirmed it; an
// unroutable message is ErrReturned, and a publish that closes the channel
// (an exchange that does not exist) does not break the next one.
func TestPublisher(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ.Addr(t)
	top := declare(t, url, dedupamqp.Topology{})
	conn := dial(t, url)
	ctx := t.Context()

	p, err := dedupamqp.NewPublisher(conn, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	id1, err := p.Publish(ctx, "", top.Queue, amqp.Publishing{Body: []byte(`{"id":"o-1"}`)})
	require.NoError(t, err)
	require.Regexp(t, "^[0-9a-f]{32}$", id1)
	id2, err := p.Publish(ctx, "", top.Queue, amqp.Publishing{Body: []byte(`{"id":"o-1"}`)})
	require.NoError(t, err)
	require.NotEqual(t, id1, id2, "fresh ids")
	own, err := p.Publish(ctx, "", top.Queue, amqp.Publishing{MessageId: "mine", Body: []byte(`{}`)})
	require.NoError(t, err)
	require.Equal(t, "mine", own)

	_, err = p.Publish(ctx, "", top.Queue+".nobody", amqp.Publishing{Body: []byte(`{}`)})
	require.ErrorIs(t, err, dedupamqp.ErrReturned)
	_, err = p.Publish(ctx, top.Queue+".no-such-exchange", "k", amqp.Publishing{Body: []byte(`{}`)})
	require.Error(t, err)
	require.NotErrorIs(t, err, dedupamqp.ErrReturned)

	hashed, err := dedupamqp.NewPublisher(conn, &dedupamqp.PublisherOptions{
		MessageID: idstrategy.ContentHash(func(p amqp.Publishing) ([]byte, error) { return p.Body, nil }),
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = hashed.Close(context.Background()) })
	h1, err := hashed.Publish(ctx, "", top.Queue, amqp.Publishing{Body: []byte(`{"id":"o-2"}`)})
	require.NoError(t, err)
	h2, err := hashed.Publish(ctx, "", top.Queue, amqp.Publishing{Body: []byte(`{"id":"o-2"}`)})
	require.NoError(t, err)
	require.Equal(t, h1, h2, "the same body, the same derived id")
	_, err = hashed.Publish(ctx, "", top.Queue, amqp.Publishing{})
	require.ErrorIs(t, err, dedup.ErrNoKey, "an empty body has no content hash")

	got := getAll(t, conn, top.Queue, 5)
	var ids []string
	for _, d := range got {
		ids = append(ids, d.MessageId)
	}
	require.Equal(t, []string{id1, id2, "mine", h1, h2}, ids)
	require.Zero(t, depth(t, conn, top.Queue), "the returned and failed publishes stored nothing")
}

// TestPublisherClose: Close closes the Publisher's channel once, leaves
// the caller's connection open, and a Publish after it fails with
// ErrPublisherClosed; a Close whose context already ended still closes.
func TestPublisherClose(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ.Addr(t)
	top := declare(t, url, dedupamqp.Topology{})
	conn := dial(t, url)

	p, err := dedupamqp.NewPublisher(conn, nil)
	require.NoError(t, err)
	_, err = p.Publish(t.Context(), "", top.Queue, amqp.Publishing{Body: []byte(`{"id":"o-1"}`)})
	require.NoError(t, err)
	require.NoError(t, p.Close(t.Context()))
	require.NoError(t, p.Close(t.Context()), "idempotent")
	_, err = p.Publish(t.Context(), "", top.Queue, amqp.Publishing{Body: []byte(`{"id":"o-2"}`)})
	require.ErrorIs(t, err, dedupamqp.ErrPublisherClosed)
	require.False(t, conn.IsClosed(), "the caller's connection")

	ended, cancel := context.WithCancel(t.Context())
	cancel()
	q, err := dedupamqp.NewPublisher(conn, nil)
	require.NoError(t, err)
	_, err = q.Publish(t.Context(), "", top.Queue, amqp.Publishing{Body: []byte(`{"id":"o-3"}`)})
	require.NoError(t, err)
	require.NoError(t, q.Close(ended), "nothing in flight: the turn is free")
	_, err = q.Publish(t.Context(), "", top.Queue, amqp.Publishing{Body: []byte(`{"id":"o-4"}`)})
	require.ErrorIs(t, err, dedupamqp.ErrPublisherClosed)
	require.Equal(t, 2, depth(t, conn, top.Queue))
}
