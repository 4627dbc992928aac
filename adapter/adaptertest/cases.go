package adaptertest

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/delivery"
)

// testLifecycle: Start once; Stop drains a running handler, whose delivery
// is settled before Stop returns; Stopped, a second Stop, Err. Nothing is
// acked while its handler runs.
func testLifecycle(t *testing.T, f *fixture) {
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	outcome := make(chan string, 1)
	c := f.consumer(t, func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
		select {
		case entered <- struct{}{}:
		default:
		}
		select {
		case <-release:
			outcome <- "released"
			return f.effect(m.Body.ID), nil
		case <-ctx.Done():
			outcome <- "canceled"
			return Receipt{}, ctx.Err()
		}
	})
	f.start(t, c)
	require.Error(t, c.Start(t.Context()), "a second Start must fail")
	require.NoError(t, c.Err(), "Err of a running consumer")
	select {
	case <-c.Stopped():
		t.Fatal("Stopped is closed while the consumer runs")
	default:
	}

	f.publish(t, Message{Data: order(t, Order{ID: "lifecycle"})})
	f.recv(t, entered, "the handler to start")
	require.Zero(t, c.Stats().Acked, "a delivery was acked while its handler ran: an ack must wait for the outcome to be recorded")
	settled, _ := f.obs.events()
	require.Empty(t, settled, "a delivery was settled while its handler ran")

	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
		defer cancel()
		stopped <- c.Stop(ctx)
	}()
	// A Stop that does not drain returns while the handler runs: give it
	// the time to.
	grace := time.NewTimer(f.grace)
	select {
	case err := <-stopped:
		grace.Stop()
		t.Fatalf("Stop returned (%v) while a handler was running: Stop must wait for the deliveries handed out", err)
	case <-grace.C:
	}
	close(release)

	timer := time.NewTimer(f.timeout)
	defer timer.Stop()
	select {
	case err := <-stopped:
		require.NoError(t, err, "Stop")
	case <-timer.C:
		t.Fatalf("Stop did not return within %v after the handler was released", f.timeout)
	}
	// Settled before Stop returned: read at once, not waited for.
	settled, _ = f.obs.events()
	require.Equal(t, 1, count(settled, acked(key("lifecycle"))),
		"the delivery whose handler ran when Stop was called must be acked and settled before Stop returns; settled:\n%s", describe(settled))
	select {
	case how := <-outcome:
		require.Equal(t, "released", how, "Stop cancelled the handler's context: Stop must let running handlers finish")
	default:
		t.Fatal("Stop returned before the running handler did")
	}

	f.recv(t, c.Stopped(), "Stopped to close after Stop returned")
	require.NoError(t, c.Err(), "Err after Stop")
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	require.NoError(t, c.Stop(ctx), "a second Stop must do nothing")
	require.NoError(t, c.Err(), "Err after a second Stop")

	st := c.Stats()
	require.Equal(t, uint64(1), st.Delivered, "Stats().Delivered")
	require.Equal(t, uint64(1), st.Acked, "Stats().Acked")
	effects, calls := f.counts("lifecycle")
	require.Equal(t, 1, effects, "effects")
	require.Equal(t, 1, calls, "handler calls")
}

// testDuplicate: a message published twice has one effect, and both
// deliveries are acked.
func testDuplicate(t *testing.T, f *fixture) {
	c := f.consumer(t, f.succeed)
	f.start(t, c)
	data := order(t, Order{ID: "duplicate", Cents: 100})
	f.publish(t, Message{Data: data})
	f.publish(t, Message{Data: data})
	f.waitFor(t, "both deliveries of the message to be acked", func(s []delivery.Event) bool {
		return count(s, acked(key("duplicate"))) >= 2
	})
	f.stop(t, c)

	settled, unsettled := f.obs.events()
	require.Empty(t, unsettled, "events of deliveries not settled")
	require.Equal(t, 2, count(settled, acked(key("duplicate"))), "acked deliveries; settled:\n%s", describe(settled))
	require.Equal(t, 1, count(settled, func(e delivery.Event) bool { return e.Key == key("duplicate") && e.Status == delivery.StatusDuplicate }),
		"one of the two deliveries must be answered as a duplicate; settled:\n%s", describe(settled))
	effects, _ := f.counts("duplicate")
	require.Equal(t, 1, effects, "a message published twice must have one effect")

	st := c.Stats()
	require.Equal(t, uint64(len(settled)), st.Delivered, "Stats().Delivered must count every delivery")
	require.Equal(t, uint64(2), st.Acked, "Stats().Acked must count both deliveries")
}

// testUndecodable: an undecodable body is dead-lettered, with the
// vocabulary's headers, its data and its headers; the handler never runs.
func testUndecodable(t *testing.T, f *fixture) {
	c := f.consumer(t, f.succeed)
	f.start(t, c)
	data := []byte(`{"id": "undecodable", not json`)
	m := Message{Data: data, Header: map[string]string{"Adaptertest-Mark": "kept"}}
	if !f.h.NoMessageID {
		m.ID = "adaptertest-undecodable"
	}
	f.publish(t, m)
	settled := f.waitSettled(t, 1, "the undecodable message to be settled")
	f.stop(t, c)

	e := settled[0]
	require.Equal(t, delivery.ReasonUndecodable, e.Decision.Reason, "reason of the undecodable message's decision")
	require.NoError(t, e.SettleErr, "the settlement of the undecodable message")
	require.Equal(t, f.src.Name, e.Source, "Event.Source")
	_, calls := f.counts("undecodable")
	require.Zero(t, calls, "the handler ran for an undecodable body")
	settled, unsettled := f.obs.events()
	require.Equal(t, 1, len(settled), "settled events: one per delivery; settled:\n%s", describe(settled))
	require.Empty(t, unsettled, "events of deliveries not settled")

	st := c.Stats()
	require.Equal(t, uint64(1), st.Delivered, "Stats().Delivered")
	require.Zero(t, st.Acked, "Stats().Acked: poison is not acked as done")
	if f.h.DropPoison {
		require.Equal(t, uint64(1), st.PoisonDropped, "Stats().PoisonDropped")
		require.Zero(t, st.DeadLettered, "Stats().DeadLettered")
		return
	}
	require.Equal(t, delivery.DeadLetter, e.Decision.Action, "the undecodable message's decision")
	require.Equal(t, uint64(1), st.DeadLettered, "Stats().DeadLettered")
	require.Zero(t, st.PoisonDropped, "Stats().PoisonDropped")

	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	letters, err := f.src.DeadLetters(ctx, 1)
	require.NoError(t, err, "Source.DeadLetters: the dead letter settled did not reach the dead-letter target")
	require.Len(t, letters, 1, "dead letters")
	dl := letters[0]
	require.True(t, bytes.Equal(data, dl.Data), "the dead letter's data is %q, want the original's %q", dl.Data, data)
	require.NotNil(t, dl.Header, "the dead letter has no headers")
	requireHeader(t, dl.Header, delivery.HeaderReason, string(delivery.ReasonUndecodable))
	requireHeader(t, dl.Header, delivery.HeaderSource, f.src.Name)
	requireHeader(t, dl.Header, "Adaptertest-Mark", "kept")
	if !f.h.NoMessageID {
		requireHeader(t, dl.Header, delivery.HeaderOriginalMessageID, m.ID)
	}
}

// requireHeader requires h to carry name with value want (read with
// delivery.LookupHeader, as the tools that read dead letters do).
func requireHeader(t *testing.T, h delivery.Header, name, want string) {
	t.Helper()
	got, ok := delivery.LookupHeader(h, name)
	require.True(t, ok, "the dead letter has no %s header; it has:\n%s", name, headers(h))
	require.Equal(t, want, got, "the dead letter's %s header", name)
}

func headers(h delivery.Header) string {
	var s string
	for k, v := range h.All() {
		s += fmt.Sprintf("  %s: %s\n", k, v)
	}
	return s
}

// testRetry: a handler error is retried; the retry succeeds, with the
// message's one effect.
func testRetry(t *testing.T, f *fixture) {
	c := f.consumer(t, func(_ context.Context, m *dedup.Message[Order]) (Receipt, error) {
		if _, calls := f.counts(m.Body.ID); calls == 1 {
			return Receipt{}, errTransient
		}
		return f.effect(m.Body.ID), nil
	})
	f.start(t, c)
	f.publish(t, Message{Data: order(t, Order{ID: "retry"})})
	f.waitFor(t, "the retried message to be acked", func(s []delivery.Event) bool { return count(s, acked(key("retry"))) >= 1 })
	f.stop(t, c)

	settled, unsettled := f.obs.events()
	require.Empty(t, unsettled, "events of deliveries not settled")
	require.Equal(t, 1, count(settled, acked(key("retry"))), "acks; settled:\n%s", describe(settled))
	retried := count(settled, func(e delivery.Event) bool {
		return e.Key == key("retry") && e.Decision.Action == delivery.Retry && e.Decision.Reason == delivery.ReasonHandlerError
	})
	require.Equal(t, 1, retried, "the failed delivery must be settled as a retry for a handler error; settled:\n%s", describe(settled))
	effects, calls := f.counts("retry")
	require.Equal(t, 1, effects, "effects")
	require.Equal(t, 2, calls, "handler calls: the failure, then the success")

	st := c.Stats()
	if f.h.RetryLater {
		require.Equal(t, uint64(1), st.RetriedLater, "Stats().RetriedLater (Harness.RetryLater)")
		require.Zero(t, st.RetriedInPlace, "Stats().RetriedInPlace (Harness.RetryLater)")
	} else {
		require.Equal(t, uint64(1), st.RetriedInPlace, "Stats().RetriedInPlace")
		require.Zero(t, st.RetriedLater, "Stats().RetriedLater")
	}
	require.Equal(t, uint64(1), st.Acked, "Stats().Acked")
	require.Zero(t, st.DeadLettered, "Stats().DeadLettered")
	// A retry in place may hand the held message to the receiver again
	// without a delivery of the broker's: Delivered is not pinned here.
	require.NotZero(t, st.Delivered, "Stats().Delivered")
}

// testSettledOnce: one settled event per delivery, whatever became of it,
// and the consumer's counters agree.
func testSettledOnce(t *testing.T, f *fixture) {
	c := f.consumer(t, f.succeed)
	f.start(t, c)
	const orders = 5
	for i := range orders {
		f.publish(t, Message{Data: order(t, Order{ID: fmt.Sprintf("once-%d", i), Cents: i})})
	}
	f.publish(t, Message{Data: order(t, Order{ID: "once-0"})})
	f.publish(t, Message{Data: []byte("not json")})
	const deliveries = orders + 2
	f.waitSettled(t, deliveries, fmt.Sprintf("%d deliveries to be settled", deliveries))
	f.stop(t, c)

	settled, unsettled := f.obs.events()
	require.Empty(t, unsettled, "events of deliveries not settled")
	require.Equal(t, deliveries, len(settled), "settled events: one per delivery, and only one; settled:\n%s", describe(settled))
	for i := range orders {
		id := fmt.Sprintf("once-%d", i)
		want := 1
		if i == 0 {
			want = 2
		}
		require.Equal(t, want, count(settled, acked(key(id))), "settled acks of %s; settled:\n%s", id, describe(settled))
		effects, _ := f.counts(id)
		require.Equal(t, 1, effects, "effects of %s", id)
	}
	require.Equal(t, 1, count(settled, func(e delivery.Event) bool { return e.Decision.Reason == delivery.ReasonUndecodable }),
		"settled undecodable deliveries; settled:\n%s", describe(settled))

	st := c.Stats()
	require.Equal(t, uint64(deliveries), st.Delivered, "Stats().Delivered")
	require.Equal(t, uint64(orders+1), st.Acked, "Stats().Acked")
	require.Equal(t, uint64(1), st.DeadLettered+st.PoisonDropped, "Stats(): DeadLettered + PoisonDropped")
	require.Zero(t, st.SettleFailures, "Stats().SettleFailures")
}

// testHardStop: a Stop whose context ended leaves the delivery it cut
// short to the broker, which hands it to the next consumer: nothing was
// acked before its outcome was recorded.
func testHardStop(t *testing.T, f *fixture) {
	entered := make(chan struct{}, 1)
	first := f.consumer(t, func(ctx context.Context, _ *dedup.Message[Order]) (Receipt, error) {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-ctx.Done() // until the hard stop
		return Receipt{}, ctx.Err()
	})
	f.start(t, first)
	f.publish(t, Message{Data: order(t, Order{ID: "hard-stop"})})
	f.recv(t, entered, "the handler to start")
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	_ = first.Stop(ended) // its error is ctx's, or nil if the handler was quick to return
	f.recv(t, first.Stopped(), "Stopped to close after a Stop whose context ended")

	second := f.consumer(t, f.succeed)
	f.start(t, second)
	f.waitFor(t, "the delivery cut short by the hard stop to reach the next consumer and be acked",
		func(s []delivery.Event) bool { return count(s, acked(key("hard-stop"))) >= 1 })
	f.stop(t, second)

	effects, _ := f.counts("hard-stop")
	require.Equal(t, 1, effects, "effects")
	settled, _ := f.obs.events()
	require.Equal(t, 1, count(settled, acked(key("hard-stop"))), "acks; settled:\n%s", describe(settled))
}

// testNoLeaks: no goroutine the consumer started outlives Stop.
func testNoLeaks(t *testing.T, f *fixture) {
	// What the source made, publishing included, is the harness's: a
	// first message (which a broker without a queue drops: nobody
	// subscribes yet) starts whatever publishing starts.
	f.publish(t, Message{Data: order(t, Order{ID: "leak-0"})})
	rcv := f.receiver(t, f.succeed)
	before := goleak.IgnoreCurrent()

	c, err := f.src.NewConsumer(rcv)
	require.NoError(t, err, "Source.NewConsumer")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
		defer cancel()
		_ = c.Stop(ctx)
	})
	f.start(t, c)
	f.publish(t, Message{Data: order(t, Order{ID: "leak-1"})})
	f.waitFor(t, "the message to be acked", func(s []delivery.Event) bool { return count(s, acked(key("leak-1"))) >= 1 })
	f.stop(t, c)
	opts := []goleak.Option{before}
	for _, fn := range f.h.IgnoreGoroutines {
		opts = append(opts, goleak.IgnoreAnyFunction(fn))
	}
	require.NoError(t, goleak.Find(opts...), "goroutines left after Stop")
}
