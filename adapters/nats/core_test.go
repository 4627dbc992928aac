package dedupnats_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupnats "github.com/dedup-go/dedup/adapters/nats"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/memstore"
)

func request(t testing.TB, nc *natsgo.Conn, subject, id string, data []byte) *natsgo.Msg {
	t.Helper()
	m := natsgo.NewMsg(subject)
	m.Data = data
	if id != "" {
		m.Header.Set("Request-Id", id)
	}
	reply, err := nc.RequestMsg(m, 10*time.Second)
	require.NoError(t, err)
	return reply
}

// TestCoreRequestTwice: a request sent twice with the same id gets the same
// reply, and the handler runs once; concurrent copies too. A failing
// request is answered with a retry, a poison one with its reason, and the
// poison is dead-lettered.
func TestCoreRequestTwice(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, url string) {
		nc, _ := connect(t, url)
		n := newNames()
		fx := newEffects()
		var failNext atomic.Bool
		charge := func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
			if failNext.CompareAndSwap(true, false) {
				return Receipt{}, errors.New("gateway timeout")
			}
			return Receipt{OrderID: m.Body.ID, Charge: fx.add(m.Body.ID)}, nil
		}
		store, err := memstore.New(nil)
		require.NoError(t, err)
		rcv, err := dedup.NewReceiver(store, idstrategy.MessageHeader[Order]("Request-Id"), charge, fastConfig("api"))
		require.NoError(t, err)
		sub, err := dedupnats.NewSubscriber(nc, n.subject, "", rcv, &dedupnats.Options{DeadLetterSubject: n.dlq, CoreDeadLetters: true})
		require.NoError(t, err)
		dlq, err := nc.SubscribeSync(n.dlq)
		require.NoError(t, err)
		require.NoError(t, sub.Start(t.Context()))
		stopAtCleanup(t, sub)

		// The same request twice.
		first := request(t, nc, n.subject, "r-1", orderJSON(t, Order{ID: "o-1", Cents: 100}))
		second := request(t, nc, n.subject, "r-1", orderJSON(t, Order{ID: "o-1", Cents: 100}))
		require.NoError(t, dedupnats.ReplyErrorOf(first))
		require.Equal(t, "processed", first.Header.Get(dedupnats.HeaderStatus))
		require.Equal(t, "duplicate", second.Header.Get(dedupnats.HeaderStatus))
		require.JSONEq(t, string(first.Data), string(second.Data))
		var r Receipt
		require.NoError(t, json.Unmarshal(first.Data, &r))
		require.Equal(t, Receipt{OrderID: "o-1", Charge: 1}, r)

		// Ten copies at once.
		var wg sync.WaitGroup
		replies := make([]*natsgo.Msg, 10)
		for i := range replies {
			wg.Go(func() { replies[i] = request(t, nc, n.subject, "r-2", orderJSON(t, Order{ID: "o-2"})) })
		}
		testenv.Wait(t, &wg, "the deliveries to return")
		for _, rep := range replies {
			require.NoError(t, dedupnats.ReplyErrorOf(rep))
			require.JSONEq(t, string(replies[0].Data), string(rep.Data))
		}

		// A transient failure asks the requester to retry; the retry works.
		failNext.Store(true)
		failed := request(t, nc, n.subject, "r-3", orderJSON(t, Order{ID: "o-3"}))
		var re *dedupnats.ReplyError
		require.ErrorAs(t, dedupnats.ReplyErrorOf(failed), &re)
		require.Equal(t, delivery.ReasonHandlerError, re.Reason)
		require.Positive(t, re.RetryAfter)
		require.Contains(t, re.Message, "gateway timeout")
		retried := request(t, nc, n.subject, "r-3", orderJSON(t, Order{ID: "o-3"}))
		require.NoError(t, dedupnats.ReplyErrorOf(retried))
		require.Equal(t, "processed", retried.Header.Get(dedupnats.HeaderStatus))

		// Poison: an undecodable request and a plain message without an id.
		bad := request(t, nc, n.subject, "r-4", []byte("{oops"))
		require.ErrorAs(t, dedupnats.ReplyErrorOf(bad), &re)
		require.Equal(t, delivery.ReasonUndecodable, re.Reason)
		require.Zero(t, re.RetryAfter)
		require.NoError(t, nc.Publish(n.subject, orderJSON(t, Order{ID: "o-5"})))
		reasons := map[string]string{}
		for range 2 {
			m, err := dlq.NextMsg(10 * time.Second)
			require.NoError(t, err)
			reasons[m.Header.Get(delivery.HeaderReason)] = string(m.Data)
			require.Equal(t, n.subject, m.Header.Get(delivery.HeaderSource))
			require.NotEmpty(t, m.Header.Get(delivery.HeaderError))
		}
		require.Equal(t, map[string]string{"undecodable": "{oops", "no-key": string(orderJSON(t, Order{ID: "o-5"}))}, reasons)

		fx.ExactlyOnce("o-1", "o-2", "o-3").Check(t)
	})
}

// TestCoreQueueGroupDropsDuplicates: two subscribers in one queue group
// sharing a store; every order published twice is charged once.
func TestCoreQueueGroupDropsDuplicates(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, url string) {
		const orders = 300
		nc, _ := connect(t, url)
		n := newNames()
		fx := newEffects()
		var deliveries atomic.Int64
		charge := func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
			return Receipt{OrderID: m.Body.ID, Charge: fx.add(m.Body.ID)}, nil
		}
		store, err := memstore.New(nil)
		require.NoError(t, err)
		for range 2 {
			rcv, err := dedup.NewReceiver(store, idstrategy.BodyField("id", func(o Order) string { return o.ID }), charge,
				observed(fastConfig("q"), onSettled(func(delivery.Event) { deliveries.Add(1) })))
			require.NoError(t, err)
			own, _ := connect(t, url)
			sub, err := dedupnats.NewSubscriber(own, n.subject, "workers", rcv, &dedupnats.Options{Concurrency: 4, DropPoison: true})
			require.NoError(t, err)
			require.NoError(t, sub.Start(t.Context()))
			stopAtCleanup(t, sub)
		}
		var want []string
		for i := range orders {
			o := Order{ID: fmt.Sprintf("o-%04d", i)}
			want = append(want, o.ID)
			require.NoError(t, nc.Publish(n.subject, orderJSON(t, o)))
			require.NoError(t, nc.Publish(n.subject, orderJSON(t, o)))
		}
		require.NoError(t, nc.Flush())
		require.Eventually(t, func() bool { return deliveries.Load() == 2*orders }, 30*time.Second, 20*time.Millisecond)
		fx.ExactlyOnce(want...).Check(t)
	})
}
