// Package outboxtest checks an [outbox.Publisher] against its broker: what
// every publisher must do for a relay to keep the outbox's promises, and,
// when it is an [outbox.AckPublisher], what its reports must say. An
// adapter's tests run it on a real broker:
//
//	func TestOutboxPublisher(t *testing.T) {
//		outboxtest.Run(t, func(t *testing.T) outboxtest.Target {
//			// a fresh destination of the broker, and a reader of it
//		})
//	}
package outboxtest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/outbox"
)

// Timeout bounds each publish and read of the suite.
const Timeout = 20 * time.Second

// Target is what one test of the suite publishes to.
type Target struct {
	// Publisher is the implementation under test.
	Publisher outbox.Publisher
	// Destination is where the broker stores what is published (a
	// subject a stream captures, a routing key bound to a queue, a
	// topic), empty when the test starts, and read by Read.
	Destination string
	// Unroutable is a destination the broker refuses or cannot store at
	// (no stream captures the subject, no queue is bound to the key, no
	// such topic): a refusal that the broker's configuration can end, so
	// not one for good (outbox.ErrPermanent). Empty skips the test of
	// refusals.
	Unroutable string
	// Invalid is a destination the publisher refuses for good (one that
	// is not a subject, a routing key or a topic name at all): its
	// messages fail with an error matching outbox.ErrPermanent. Empty
	// skips the test of permanent refusals.
	Invalid string
	// Read returns what the broker stored at Destination, in the broker's
	// order, once it holds at least n messages, or ctx's error.
	Read func(ctx context.Context, n int) ([]Received, error)
}

// Received is a message as the broker stored it.
type Received struct {
	// ID is the producer id the broker carries (Nats-Msg-Id, the AMQP
	// message-id, the Kafka Message-Id header).
	ID string
	// Body is the data.
	Body []byte
	// Header holds the message's headers (a broker's own may be among
	// them).
	Header map[string]string
}

// Run runs the suite, each test on a Target of its own.
func Run(t *testing.T, newTarget func(t *testing.T) Target) {
	t.Run("Batch", func(t *testing.T) { testBatch(t, newTarget(t)) })
	t.Run("Empty", func(t *testing.T) { testEmpty(t, newTarget(t)) })
	t.Run("OrderOfCalls", func(t *testing.T) { testOrderOfCalls(t, newTarget(t)) })
	t.Run("Refused", func(t *testing.T) { testRefused(t, newTarget(t)) })
	t.Run("RefusedForGood", func(t *testing.T) { testRefusedForGood(t, newTarget(t)) })
	t.Run("ContextEnded", func(t *testing.T) { testContextEnded(t, newTarget(t)) })
	t.Run("Each", func(t *testing.T) { testEach(t, newTarget(t)) })
	t.Run("EachRefused", func(t *testing.T) { testEachRefused(t, newTarget(t)) })
	t.Run("EachContextEnded", func(t *testing.T) { testEachContextEnded(t, newTarget(t)) })
}

// binary is a body of every byte value.
func binary() []byte {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

// testBatch: one call with messages of many keys, of none, empty and
// binary bodies, headers: nil, every message stored, each with its id,
// body and headers as given.
func testBatch(t *testing.T, tg Target) {
	var msgs []outbox.Message
	for i := range 24 {
		m := outbox.Message{
			ID:          outbox.MessageID("outboxtest:batch", fmt.Sprint(i)),
			Destination: tg.Destination,
			Body:        fmt.Appendf(nil, `{"n":%d}`, i),
		}
		switch i % 4 {
		case 0:
			m.OrderingKey = fmt.Sprintf("key-%d", i)
		case 1:
			m.Header = map[string]string{"Event-Type": "order.created", "Trace": fmt.Sprint(i)}
		case 2:
			m.Body = binary()
		case 3:
			m.Body = []byte{}
		}
		msgs = append(msgs, m)
	}
	ctx, cancel := context.WithTimeout(t.Context(), Timeout)
	defer cancel()
	require.NoError(t, tg.Publisher.Publish(ctx, msgs))
	got, err := tg.Read(ctx, len(msgs))
	require.NoError(t, err)
	byID := map[string]Received{}
	for _, r := range got {
		_, dup := byID[r.ID]
		require.False(t, dup, "message %s stored twice", r.ID)
		byID[r.ID] = r
	}
	for _, m := range msgs {
		r, ok := byID[m.ID]
		require.True(t, ok, "message %s not stored, or stored without its id", m.ID)
		require.Equal(t, len(m.Body), len(r.Body), "message %s: body length", m.ID)
		if len(m.Body) > 0 {
			require.Equal(t, m.Body, r.Body, "message %s: body", m.ID)
		}
		for k, v := range m.Header {
			require.Equal(t, v, r.Header[k], "message %s: header %s", m.ID, k)
		}
	}
	require.Len(t, got, len(msgs))
}

// testEmpty: nothing to publish is no error.
func testEmpty(t *testing.T, tg Target) {
	ctx, cancel := context.WithTimeout(t.Context(), Timeout)
	defer cancel()
	require.NoError(t, tg.Publisher.Publish(ctx, nil))
	require.NoError(t, tg.Publisher.Publish(ctx, []outbox.Message{}))
}

// testOrderOfCalls: what one call acknowledged is stored before what the
// next call publishes: the order the relay keeps per key.
func testOrderOfCalls(t *testing.T, tg Target) {
	ctx, cancel := context.WithTimeout(t.Context(), Timeout)
	defer cancel()
	var ids []string
	for i := range 10 {
		m := outbox.Message{ID: outbox.MessageID("outboxtest:order", fmt.Sprint(i)), Destination: tg.Destination,
			OrderingKey: "one-key", Body: fmt.Appendf(nil, "%d", i)}
		require.NoError(t, tg.Publisher.Publish(ctx, []outbox.Message{m}))
		ids = append(ids, m.ID)
	}
	got, err := tg.Read(ctx, len(ids))
	require.NoError(t, err)
	var order []string
	for _, r := range got {
		order = append(order, r.ID)
	}
	require.Equal(t, ids, order)
}

// testRefused: a message the broker cannot store fails alone, in a
// *BatchError that says which, and the others of the call are stored.
func testRefused(t *testing.T, tg Target) {
	if tg.Unroutable == "" {
		t.Skip("the target has no unroutable destination")
	}
	ctx, cancel := context.WithTimeout(t.Context(), Timeout)
	defer cancel()
	msgs := []outbox.Message{
		{ID: outbox.MessageID("outboxtest:refused", "1"), Destination: tg.Destination, Body: []byte("a")},
		{ID: outbox.MessageID("outboxtest:refused", "2"), Destination: tg.Unroutable, Body: []byte("b")},
		{ID: outbox.MessageID("outboxtest:refused", "3"), Destination: tg.Destination, Body: []byte("c")},
	}
	err := tg.Publisher.Publish(ctx, msgs)
	var be *outbox.BatchError
	require.ErrorAs(t, err, &be)
	require.Len(t, be.Errs, len(msgs))
	require.Equal(t, []bool{true, false, true}, outbox.Acknowledged(err, len(msgs)), "%v", err)
	require.NotErrorIs(t, be.Errs[1], outbox.ErrPermanent, "a destination the broker's configuration can fix is not refused for good")
	got, err := tg.Read(ctx, 2)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.ElementsMatch(t, []string{msgs[0].ID, msgs[2].ID}, []string{got[0].ID, got[1].ID})

	// Alone, it is an error too, of either shape, never nil.
	err = tg.Publisher.Publish(ctx, msgs[1:2])
	require.Error(t, err)
	require.Equal(t, []bool{false}, outbox.Acknowledged(err, 1))
}

// testRefusedForGood: a message to a destination that can never be valid
// fails alone, with an error matching outbox.ErrPermanent, and the
// others of the call are stored.
func testRefusedForGood(t *testing.T, tg Target) {
	if tg.Invalid == "" {
		t.Skip("the target has no invalid destination")
	}
	ctx, cancel := context.WithTimeout(t.Context(), Timeout)
	defer cancel()
	msgs := []outbox.Message{
		{ID: outbox.MessageID("outboxtest:invalid", "1"), Destination: tg.Destination, Body: []byte("a")},
		{ID: outbox.MessageID("outboxtest:invalid", "2"), Destination: tg.Invalid, Body: []byte("b")},
	}
	err := tg.Publisher.Publish(ctx, msgs)
	var be *outbox.BatchError
	require.ErrorAs(t, err, &be)
	require.Equal(t, []bool{true, false}, outbox.Acknowledged(err, len(msgs)), "%v", err)
	require.ErrorIs(t, be.Errs[1], outbox.ErrPermanent)
	require.NoError(t, be.Errs[0])
	got, err := tg.Read(ctx, 1)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, msgs[0].ID, got[0].ID)
}

// testContextEnded: a context that ended before the call is its error,
// and no message counts as acknowledged.
func testContextEnded(t *testing.T, tg Target) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	msgs := []outbox.Message{{ID: outbox.MessageID("outboxtest:cancelled", "1"), Destination: tg.Destination, Body: []byte("x")}}
	err := tg.Publisher.Publish(ctx, msgs)
	require.True(t, errors.Is(err, context.Canceled), "Publish with an ended context: %v", err)
	require.Equal(t, []bool{false}, outbox.Acknowledged(err, 1))
}
