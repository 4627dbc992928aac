package outboxtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/outbox"
)

// Reports records what an AckPublisher's PublishEach reports, for a
// test of a publisher of one's own: pass its Ack as PublishEach's ack,
// and call Done once PublishEach returned. It fails the test on a report
// that breaks outbox.AckPublisher's contract: an index out of range, a
// message reported twice, a report after PublishEach returned. It is safe
// for concurrent use.
type Reports struct {
	t        testing.TB
	mu       sync.Mutex
	errs     map[int]error
	returned bool
	n        int
}

// NewReports returns the Reports of a PublishEach of n messages.
func NewReports(t testing.TB, n int) *Reports { return &Reports{t: t, errs: map[int]error{}, n: n} }

// Ack records message i's report: nil for an acknowledgement, else why
// not.
func (r *Reports) Ack(i int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch _, twice := r.errs[i]; {
	case i < 0 || i >= r.n:
		r.t.Errorf("report of message %d of %d", i, r.n)
	case twice:
		r.t.Errorf("message %d reported twice", i)
	case r.returned:
		r.t.Errorf("message %d reported after PublishEach returned", i)
	}
	r.errs[i] = err
}

// Done records that PublishEach returned, and returns the reports by
// message index; a message not in the map was not reported.
func (r *Reports) Done() map[int]error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.returned = true
	return r.errs
}

// ackPublisher returns tg's publisher as an AckPublisher, or skips the
// test.
func ackPublisher(t *testing.T, tg Target) outbox.AckPublisher {
	p, ok := tg.Publisher.(outbox.AckPublisher)
	if !ok {
		t.Skip("the publisher reports no acknowledgement per message (not an outbox.AckPublisher)")
	}
	return p
}

// testEach: PublishEach reports every message once, acknowledged, and
// returns nil; the broker stores each once.
func testEach(t *testing.T, tg Target) {
	p := ackPublisher(t, tg)
	ctx, cancel := context.WithTimeout(t.Context(), Timeout)
	defer cancel()
	var msgs []outbox.Message
	for i := range 40 {
		msgs = append(msgs, outbox.Message{ID: outbox.MessageID("outboxtest:each", fmt.Sprint(i)), Destination: tg.Destination,
			OrderingKey: fmt.Sprintf("key-%d", i), Body: fmt.Appendf(nil, "%d", i)})
	}
	r := NewReports(t, len(msgs))
	require.NoError(t, p.PublishEach(ctx, msgs, r.Ack))
	errs := r.Done()
	require.Len(t, errs, len(msgs), "every message reported")
	for i, err := range errs {
		require.NoError(t, err, "message %d", i)
	}
	require.NoError(t, p.PublishEach(ctx, nil, r.Ack), "nothing to publish")
	got, err := tg.Read(ctx, len(msgs))
	require.NoError(t, err)
	require.Len(t, got, len(msgs))
}

// testEachRefused: a message refused for good is reported alone, with an
// error matching outbox.ErrPermanent; one the broker's configuration can
// fix alone, with an error that does not; the others acknowledged.
func testEachRefused(t *testing.T, tg Target) {
	p := ackPublisher(t, tg)
	ctx, cancel := context.WithTimeout(t.Context(), Timeout)
	defer cancel()
	msgs := []outbox.Message{
		{ID: outbox.MessageID("outboxtest:eachrefused", "1"), Destination: tg.Destination, Body: []byte("a")},
		{ID: outbox.MessageID("outboxtest:eachrefused", "2"), Destination: tg.Invalid, Body: []byte("b")},
		{ID: outbox.MessageID("outboxtest:eachrefused", "3"), Destination: tg.Unroutable, Body: []byte("c")},
		{ID: outbox.MessageID("outboxtest:eachrefused", "4"), Destination: tg.Destination, Body: []byte("d")},
	}
	want := []string{"acknowledged", "for good", "refused", "acknowledged"}
	switch {
	case tg.Invalid == "" && tg.Unroutable == "":
		t.Skip("the target has neither an invalid nor an unroutable destination")
	case tg.Invalid == "":
		msgs, want = append(msgs[:1], msgs[2:]...), append(want[:1], want[2:]...)
	case tg.Unroutable == "":
		msgs, want = append(msgs[:2], msgs[3]), append(want[:2], want[3])
	}
	r := NewReports(t, len(msgs))
	require.NoError(t, p.PublishEach(ctx, msgs, r.Ack))
	errs := r.Done()
	require.Len(t, errs, len(msgs), "every message reported")
	for i, w := range want {
		err := errs[i]
		switch w {
		case "acknowledged":
			require.NoError(t, err, "message %d", i)
		case "for good":
			require.ErrorIs(t, err, outbox.ErrPermanent, "message %d", i)
		case "refused":
			require.Error(t, err, "message %d", i)
			require.NotErrorIs(t, err, outbox.ErrPermanent, "message %d: a destination the broker's configuration can fix", i)
		}
	}
	got, err := tg.Read(ctx, 2)
	require.NoError(t, err)
	require.Len(t, got, 2)
}

// testEachContextEnded: a context that ended before the call is its
// error, and no message is reported.
func testEachContextEnded(t *testing.T, tg Target) {
	p := ackPublisher(t, tg)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	msgs := []outbox.Message{{ID: outbox.MessageID("outboxtest:eachcancelled", "1"), Destination: tg.Destination, Body: []byte("x")}}
	r := NewReports(t, len(msgs))
	err := p.PublishEach(ctx, msgs, r.Ack)
	require.True(t, errors.Is(err, context.Canceled), "PublishEach with an ended context: %v", err)
	require.Empty(t, r.Done(), "nothing reported")
}
