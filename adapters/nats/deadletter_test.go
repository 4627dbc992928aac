package dedupnats_test

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupnats "github.com/dedup-go/dedup/adapters/nats"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/store/memstore"
)

// okReceiver is a receiver keyed on the order id whose handler counts its
// effects in fx.
func okReceiver(t testing.TB, fx *effects, cfg *dedup.Config) *dedup.Receiver[*dedup.Message[Order], Receipt] {
	t.Helper()
	store, err := memstore.New(nil)
	require.NoError(t, err)
	rcv, err := dedup.NewReceiver(store, bodyID, func(_ context.Context, m *dedup.Message[Order]) (Receipt, error) {
		return Receipt{OrderID: m.Body.ID, Charge: fx.add(m.Body.ID)}, nil
	}, cfg)
	require.NoError(t, err)
	return rcv
}

// TestStartRefusesLostDeadLetters: a consumer or subscriber whose poison
// would be lost does not start: no dead-letter subject (unless DropPoison;
// the constructor refuses it), a subject no stream captures (unless CoreDeadLetters, which warns), a
// subject the consumer's own stream captures (it would read its dead
// letters back), a subscriber whose subject matches its dead-letter
// subject, and a subject with wildcards.
func TestStartRefusesLostDeadLetters(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, url string) {
		nc, js := connect(t, url)
		n := newNames()
		streams(t, js, n)
		cons := consumer(t, js, n, jetstream.ConsumerConfig{AckWait: 30 * time.Second, MaxDeliver: 5})
		rcv := okReceiver(t, newEffects(), fastConfig("dl"))
		uncaptured := "dedupt." + suffix() + ".nostream"

		// A second stream whose subjects include its own dead letters.
		both := newNames()
		_, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: both.stream, Subjects: []string{both.subject, both.dlq}, Storage: jetstream.MemoryStorage})
		require.NoError(t, err)
		t.Cleanup(func() { _ = js.DeleteStream(context.Background(), both.stream) })
		bothCons := consumer(t, js, both, jetstream.ConsumerConfig{AckWait: 30 * time.Second, MaxDeliver: 5, FilterSubject: both.subject})

		startConsumer := func(cons jetstream.Consumer, o *dedupnats.Options) error {
			c, err := dedupnats.NewConsumer(js, cons, rcv, o)
			if err != nil {
				return err
			}
			err = c.Start(t.Context())
			if err == nil {
				require.NoError(t, c.Stop(t.Context()))
			}
			return err
		}
		startSubscriber := func(o *dedupnats.Options) error {
			s, err := dedupnats.NewSubscriber(nc, n.subject, "", rcv, o)
			if err != nil {
				return err
			}
			err = s.Start(t.Context())
			if err == nil {
				require.NoError(t, s.Stop(t.Context()))
			}
			return err
		}

		for name, tc := range map[string]struct {
			err   error
			start func() error
		}{
			"consumer without dead-letter subject":   {dedupnats.ErrNoDeadLetter, func() error { return startConsumer(cons, nil) }},
			"subscriber without dead-letter subject": {dedupnats.ErrNoDeadLetter, func() error { return startSubscriber(nil) }},
			"consumer, no stream captures it": {dedupnats.ErrDeadLetterStream, func() error {
				return startConsumer(cons, &dedupnats.Options{DeadLetterSubject: uncaptured})
			}},
			"subscriber, no stream captures it": {dedupnats.ErrDeadLetterStream, func() error {
				return startSubscriber(&dedupnats.Options{DeadLetterSubject: uncaptured})
			}},
			"the consumer's own stream captures it": {dedupnats.ErrDeadLetterStream, func() error {
				return startConsumer(bothCons, &dedupnats.Options{DeadLetterSubject: both.dlq})
			}},
			"the subscription matches it": {dedupnats.ErrDeadLetterStream, func() error {
				_, err := dedupnats.NewSubscriber(nc, "dedupt.>", "", rcv, &dedupnats.Options{DeadLetterSubject: n.dlq})
				return err
			}},
			"wildcard dead-letter subject": {dedup.ErrInvalidConfig, func() error {
				return startConsumer(cons, &dedupnats.Options{DeadLetterSubject: "dedupt.*.dlq"})
			}},
			"both DropPoison and a dead-letter subject": {dedup.ErrInvalidConfig, func() error {
				return startConsumer(cons, &dedupnats.Options{DeadLetterSubject: n.dlq, DropPoison: true})
			}},
		} {
			err := tc.start()
			require.ErrorIs(t, err, tc.err, name)
			require.ErrorIs(t, err, dedup.ErrInvalidConfig, name)
		}

		// Explicit choices start: a captured subject, DropPoison, and core
		// dead letters (with a warning).
		require.NoError(t, startConsumer(cons, &dedupnats.Options{DeadLetterSubject: n.dlq}))
		require.NoError(t, startConsumer(cons, &dedupnats.Options{DropPoison: true}))
		require.NoError(t, startSubscriber(&dedupnats.Options{DeadLetterSubject: n.dlq}))
		var logs syncBuffer
		logger := slog.New(slog.NewTextHandler(&logs, nil))
		require.NoError(t, startConsumer(cons, &dedupnats.Options{DeadLetterSubject: uncaptured, CoreDeadLetters: true, Logger: logger}))
		require.NoError(t, startSubscriber(&dedupnats.Options{DeadLetterSubject: uncaptured, CoreDeadLetters: true, Logger: logger}))
		require.Equal(t, 2, strings.Count(logs.String(), "level=WARN msg=\"dedupnats: no stream captures the dead-letter subject"), logs.String())
	})
}

// TestDropPoisonLogsAndCounts: with DropPoison, a poison message is
// terminated, logged at error level with its stream and sequence, and
// counted; the valid one beside it is processed.
func TestDropPoisonLogsAndCounts(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, url string) {
		_, js := connect(t, url)
		n := newNames()
		streams(t, js, n)
		cons := consumer(t, js, n, jetstream.ConsumerConfig{AckWait: 30 * time.Second, MaxDeliver: 5})
		fx := newEffects()
		rcv := okReceiver(t, fx, fastConfig("drop"))
		var logs syncBuffer
		c, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{DropPoison: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		require.NoError(t, err)
		_, err = js.Publish(t.Context(), n.subject, []byte("not json"))
		require.NoError(t, err)
		_, err = js.Publish(t.Context(), n.subject, orderJSON(t, Order{ID: "o-1"}))
		require.NoError(t, err)
		require.NoError(t, c.Start(t.Context()))
		stopAtCleanup(t, c)

		settled(t, cons, 20*time.Second)
		require.Eventually(t, func() bool { return c.Stats().PoisonDropped == 1 }, 10*time.Second, 10*time.Millisecond)
		fx.ExactlyOnce("o-1").Check(t)
		require.Contains(t, logs.String(), "level=ERROR msg=\"dedupnats: poison message dropped")
		require.Contains(t, logs.String(), "stream="+n.stream+" sequence=1 ")
		require.Contains(t, logs.String(), "reason=undecodable")
	})
}

// TestDeadLetterAtMaxPayload: a poison message as large as the server's max
// payload cannot be dead-lettered whole (the Dedup-* headers do not fit):
// it is dead-lettered as a cut copy saying so, instead of being Nak'd until
// MaxDeliver and lost.
func TestDeadLetterAtMaxPayload(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, url string) {
		nc, js := connect(t, url)
		n := newNames()
		streams(t, js, n)
		cons := consumer(t, js, n, jetstream.ConsumerConfig{AckWait: 30 * time.Second, MaxDeliver: 3})
		cfg := fastConfig("big")
		var failed atomic.Int64
		cfg.Observer = onSettled(func(e delivery.Event) {
			if e.SettleErr != nil && e.Decision.Action == delivery.DeadLetter {
				failed.Add(1)
			}
		})
		rcv := okReceiver(t, newEffects(), cfg)
		c, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{DeadLetterSubject: n.dlq, StrictHorizon: false})
		require.NoError(t, err)

		size := int(nc.MaxPayload())
		big := bytes.Repeat([]byte("x"), size) // not JSON
		_, err = js.Publish(t.Context(), n.subject, big)
		require.NoError(t, err)
		require.NoError(t, c.Start(t.Context()))
		stopAtCleanup(t, c)

		dead := deadLetters(t, js, n, 1, 20*time.Second)
		settled(t, cons, 20*time.Second)
		require.Len(t, dead, 1)
		h := dead[0].Headers()
		require.Equal(t, "undecodable", h.Get(delivery.HeaderReason))
		require.Equal(t, strconv.Itoa(size), h.Get(dedupnats.HeaderOriginalSize))
		require.Contains(t, h.Get(dedupnats.HeaderTruncated), "data cut from "+strconv.Itoa(size)+" bytes")
		require.Equal(t, "1", h.Get(delivery.HeaderDeliveryCount), "dead-lettered on the first delivery")
		require.NotEmpty(t, dead[0].Data())
		require.Less(t, len(dead[0].Data()), size)
		require.True(t, bytes.HasPrefix(big, dead[0].Data()))
		require.EqualValues(t, 1, c.Stats().DeadLettersTruncated)
		require.Zero(t, failed.Load())
	})
}

// TestDeadLetterMovesServerHeaders: an original published with
// Nats-Expected-Stream and Nats-Expected-Last-Sequence (both true of its
// own stream) would make the dead-letter stream refuse the dead letter on
// every delivery; they are moved aside like Nats-Msg-Id, and the dead
// letter lands.
func TestDeadLetterMovesServerHeaders(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, url string) {
		_, js := connect(t, url)
		n := newNames()
		streams(t, js, n)
		cons := consumer(t, js, n, jetstream.ConsumerConfig{AckWait: 30 * time.Second, MaxDeliver: 3})
		rcv := okReceiver(t, newEffects(), fastConfig("hdr"))
		c, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{DeadLetterSubject: n.dlq})
		require.NoError(t, err)

		// The dead-letter stream already holds a message: its last sequence
		// is 1, not the 0 the original expected of its own stream.
		_, err = js.Publish(t.Context(), n.dlq, []byte("an earlier dead letter"))
		require.NoError(t, err)
		m := natsgo.NewMsg(n.subject)
		m.Data = []byte(`{"cents": 5}`) // no id: poison
		m.Header.Set(jetstream.MsgIDHeader, "m-1")
		m.Header.Set(jetstream.ExpectedStreamHeader, n.stream)
		m.Header.Set(jetstream.ExpectedLastSeqHeader, "0")
		_, err = js.PublishMsg(t.Context(), m)
		require.NoError(t, err)
		require.NoError(t, c.Start(t.Context()))
		stopAtCleanup(t, c)

		dead := deadLetters(t, js, n, 2, 20*time.Second)
		settled(t, cons, 20*time.Second)
		require.Len(t, dead, 2)
		h := dead[1].Headers()
		require.Equal(t, "no-key", h.Get(delivery.HeaderReason))
		require.Equal(t, "m-1", h.Get(delivery.HeaderOriginalMessageID))
		require.Equal(t, n.stream, h.Get(dedupnats.HeaderOriginalPrefix+jetstream.ExpectedStreamHeader))
		require.Equal(t, "0", h.Get(dedupnats.HeaderOriginalPrefix+jetstream.ExpectedLastSeqHeader))
		require.Equal(t, n.dlqStream, h.Get(jetstream.ExpectedStreamHeader), "the adapter's own expectation")
		require.Empty(t, h.Get(jetstream.ExpectedLastSeqHeader))
		require.Equal(t, "1", h.Get(delivery.HeaderDeliveryCount))
		// The names of package delivery, not those of 0.1.
		require.Equal(t, n.subject, h.Get(delivery.HeaderSource))
		require.Equal(t, n.stream, h.Get(delivery.HeaderStream))
		require.Equal(t, cons.CachedInfo().Name, h.Get(delivery.HeaderConsumerGroup))
		require.Equal(t, "1", h.Get(delivery.HeaderOffset))
		for _, former := range []string{"Dedup-Subject", "Dedup-Consumer", "Dedup-Sequence", "Dedup-Msg-Id"} {
			require.NotContains(t, h, former)
		}
	})
}

// TestDeadLetterIDsAcrossRecreatedStream: the first poison message of a
// stream that was deleted and recreated under the same name has the same
// stream sequence as the first one of the old stream; its dead letter must
// not be dropped by the dead-letter stream's duplicate window as a copy of
// the old one.
func TestDeadLetterIDsAcrossRecreatedStream(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, url string) {
		_, js := connect(t, url)
		n := newNames()
		streams(t, js, n)
		for i, body := range []string{"first poison", "second poison"} {
			if i > 0 {
				require.NoError(t, js.DeleteStream(t.Context(), n.stream))
				_, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: n.stream, Subjects: []string{n.subject}, Storage: jetstream.MemoryStorage})
				require.NoError(t, err)
			}
			cons := consumer(t, js, n, jetstream.ConsumerConfig{AckWait: 30 * time.Second, MaxDeliver: 3})
			c, err := dedupnats.NewConsumer(js, cons, okReceiver(t, newEffects(), fastConfig("re")), &dedupnats.Options{DeadLetterSubject: n.dlq})
			require.NoError(t, err)
			_, err = js.Publish(t.Context(), n.subject, []byte(body))
			require.NoError(t, err)
			require.NoError(t, c.Start(t.Context()))
			settled(t, cons, 20*time.Second)
			require.NoError(t, c.Stop(t.Context()))
		}
		dead := deadLetters(t, js, n, 2, 20*time.Second)
		require.Len(t, dead, 2)
		require.Equal(t, "first poison", string(dead[0].Data()))
		require.Equal(t, "second poison", string(dead[1].Data()))
		for _, d := range dead {
			require.Equal(t, "1", d.Headers().Get(delivery.HeaderOffset))
		}
	})
}
