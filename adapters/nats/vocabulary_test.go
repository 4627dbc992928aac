package dedupnats_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupnats "github.com/dedup-go/dedup/adapters/nats"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/outbox"
	"github.com/dedup-go/dedup/store/memstore"
)

// tagEncoder encodes a result as "tag:" and its text, to tell its replies
// from the default encoder's.
type tagEncoder struct{}

func (tagEncoder) Marshal(v any) ([]byte, error) { return []byte("tag:" + v.(Receipt).OrderID), nil }

// TestReplyEncoderOption: Options.ReplyEncoder encodes the replies of a
// request and of its duplicate (the stored result); without it, results go
// out as JSON.
func TestReplyEncoderOption(t *testing.T) {
	t.Parallel()
	nc, _ := connect(t, testenv.NATS.Addr(t))
	for _, tc := range []struct {
		name string
		enc  dedupnats.ReplyEncoder
		want string
	}{
		{"given", tagEncoder{}, "tag:o-1"},
		{"default", nil, `{"order_id":"o-1","charge":1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNames()
			fx := newEffects()
			store, err := memstore.New(nil)
			require.NoError(t, err)
			rcv, err := dedup.NewReceiver(store, idstrategy.MessageHeader[Order]("Request-Id"),
				func(_ context.Context, m *dedup.Message[Order]) (Receipt, error) {
					return Receipt{OrderID: m.Body.ID, Charge: fx.add(m.Body.ID)}, nil
				}, fastConfig("enc"))
			require.NoError(t, err)
			sub, err := dedupnats.NewSubscriber(nc, n.subject, "", rcv, &dedupnats.Options{DropPoison: true, ReplyEncoder: tc.enc})
			require.NoError(t, err)
			require.NoError(t, sub.Start(t.Context()))
			stopAtCleanup(t, sub)

			first := request(t, nc, n.subject, "r-1", orderJSON(t, Order{ID: "o-1", Cents: 1}))
			second := request(t, nc, n.subject, "r-1", orderJSON(t, Order{ID: "o-1", Cents: 1}))
			require.Equal(t, "processed", first.Header.Get(dedupnats.HeaderStatus))
			require.Equal(t, "duplicate", second.Header.Get(dedupnats.HeaderStatus))
			if tc.enc == nil {
				require.JSONEq(t, tc.want, string(first.Data))
				require.JSONEq(t, tc.want, string(second.Data))
			} else {
				require.Equal(t, tc.want, string(first.Data))
				require.Equal(t, tc.want, string(second.Data))
			}
		})
	}
}

// TestOutboxPublisherClose: Close waits for the calls in flight (here a
// PublishEach whose ack callback is held) up to its context, refuses new
// calls with ErrPublisherClosed, and is idempotent; the connection stays
// open, the caller's.
func TestOutboxPublisherClose(t *testing.T) {
	t.Parallel()
	nc, js := connect(t, testenv.NATS.Addr(t))
	n := newNames()
	streams(t, js, n)
	p, err := dedupnats.NewOutboxPublisher(js, nil)
	require.NoError(t, err)
	require.NoError(t, p.Publish(t.Context(), []outbox.Message{{ID: outbox.NewMessageID(), Destination: n.subject, Body: []byte("a")}}))

	inAck, release := make(chan struct{}), make(chan struct{})
	eachDone := make(chan error, 1)
	go func() {
		eachDone <- p.PublishEach(context.Background(), []outbox.Message{{ID: outbox.NewMessageID(), Destination: n.subject, Body: []byte("b")}},
			func(int, error) {
				close(inAck)
				<-release
			})
	}()
	testenv.Recv(t, inAck, "the PublishEach's ack")

	// A Close whose context has ended returns at once, the call still in
	// flight; new calls are refused from then on.
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, p.Close(ended), context.Canceled)
	require.ErrorIs(t, p.Publish(t.Context(), []outbox.Message{{ID: outbox.NewMessageID(), Destination: n.subject, Body: []byte("c")}}), dedupnats.ErrPublisherClosed)
	require.ErrorIs(t, p.PublishEach(t.Context(), nil, func(int, error) {}), dedupnats.ErrPublisherClosed)

	closed := make(chan error, 1)
	go func() { closed <- p.Close(context.Background()) }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned %v with a call in flight", err)
	default:
	}
	close(release)
	require.NoError(t, testenv.Recv(t, eachDone, "PublishEach to return"))
	require.NoError(t, testenv.Recv(t, closed, "Close to return"))
	require.NoError(t, p.Close(t.Context()), "a second Close")
	require.False(t, nc.IsClosed(), "the connection stays the caller's")
	got, err := readStream(t.Context(), js, n.stream, 2)
	require.NoError(t, err)
	require.Len(t, got, 2, "a and b, not c")
}
