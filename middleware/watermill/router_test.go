package dedupwatermill_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/testenv"
	dedupwatermill "github.com/dedup-go/dedup/middleware/watermill"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/redisstore"
)

// redisStore returns a redisstore of the test's own prefix, on a client of
// its own (as a second instance of a service has).
func redisStore(t testing.TB, prefix string) store.Store {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: testenv.Redis.Addr(t), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	st, err := redisstore.New(context.Background(), client, &redisstore.Options{Prefix: prefix})
	require.NoError(t, err)
	return st
}

// transform is the handler of the first stage: it records its effect and
// produces one message with a fresh UUID, naming its input in the
// metadata.
func transform(effects *counts) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		if err := msg.Context().Err(); err != nil {
			return nil, err
		}
		effects.add(msg.UUID)
		out := message.NewMessage(watermill.NewUUID(), append([]byte("out:"), msg.Payload...))
		out.Metadata.Set("in", msg.UUID)
		return message.Messages{out}, nil
	}
}

// downstream is the next consumer: raw deliveries of out by UUID (with
// their input), and its own effects behind its own middleware.
type downstream struct {
	deliveries *counts
	effects    *counts
	mu         sync.Mutex
	in         map[string]map[string]bool // input UUID -> out UUIDs
	seen       map[string][]*message.Message
}

func startDownstream(t *testing.T, url, out string, st store.Store, wantDeliveries, wantEffects int) *downstream {
	d := &downstream{deliveries: newCounts(wantDeliveries), effects: newCounts(wantEffects),
		in: map[string]map[string]bool{}, seen: map[string][]*message.Message{}}
	r := newRouter(t)
	mw := newMiddleware(t, st, "stage2", nil)
	r.AddConsumerHandler("stage2", out, subscriber(t, url), func(msg *message.Message) error {
		d.effects.add(msg.UUID)
		return nil
	}).AddMiddleware(func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			d.mu.Lock()
			in := msg.Metadata.Get("in")
			if d.in[in] == nil {
				d.in[in] = map[string]bool{}
			}
			d.in[in][msg.UUID] = true
			d.seen[msg.UUID] = append(d.seen[msg.UUID], msg.Copy())
			d.mu.Unlock()
			d.deliveries.add(msg.UUID)
			return h(msg)
		}
	}, mw.Middleware)
	startRouter(t, r)
	return d
}

// TestTwoRoutersProducerDuplicates runs two router instances (each its own
// subscriber and its own Redis client) on one queue, fed every message
// twice by its producer: each input has one effect, and the output it
// produced reaches the next consumer once per input copy with one UUID,
// which the next consumer's middleware runs once.
func TestTwoRoutersProducerDuplicates(t *testing.T) {
	t.Parallel()
	url := rabbitURL(t)
	in, out := topic(t, url, "in"), topic(t, url, "out")
	prefix := "dedupwatermill-test:" + suffix() + ":"
	const n = 40
	effects := newCounts(n)
	pub := publisher(t, url)
	down := startDownstream(t, url, out, redisStore(t, prefix), 2*n, n)
	for i := range 2 {
		r := newRouter(t)
		mw := newMiddleware(t, redisStore(t, prefix), "stage1", nil)
		// A publisher of its own: a router closes its handlers' publishers
		// when it stops, and one shared with the other router would be
		// closed under that router's publishes (watermill-amqp's Publish
		// and Close then race).
		r.AddHandler(fmt.Sprintf("stage1-%d", i), in, subscriber(t, url), out, publisher(t, url), transform(effects)).AddMiddleware(mw.Middleware)
		startRouter(t, r)
	}
	ids := publishN(t, pub, in, n, 2)
	effects.await(t, "every input's effect")
	down.deliveries.await(t, "every produced message downstream")
	down.effects.await(t, "every downstream effect")

	down.mu.Lock()
	defer down.mu.Unlock()
	for _, id := range ids {
		require.Equal(t, 1, effects.get(id), "effects of input %s", id)
		require.Len(t, down.in[id], 1, "distinct produced UUIDs of input %s", id)
		for outID := range down.in[id] {
			require.Equal(t, 2, down.deliveries.get(outID), "deliveries downstream of %s's output", id)
			require.Equal(t, 1, down.effects.get(outID), "downstream effects of %s's output", id)
			copies := down.seen[outID]
			require.Equal(t, copies[0].Payload, copies[1].Payload)
			require.Equal(t, copies[0].Metadata.Get("in"), copies[1].Metadata.Get("in"))
		}
	}
	t.Logf("inputs %d (each published twice): effects %d, produced UUIDs %d, downstream deliveries %d, downstream effects %d",
		n, effects.total, len(down.in), down.deliveries.total, down.effects.total)
}

// TestFailOnceSideBySide runs the same handler, failing each message's
// first attempt, behind Watermill's Deduplicator and behind this
// middleware, each on a queue of its own with the same messages.
// Watermill's marks the key before the handler runs, so the redelivery of
// a failed message is dropped as a duplicate; ours records the outcome
// after the handler, and the redelivery runs it again.
func TestFailOnceSideBySide(t *testing.T) {
	t.Parallel()
	url := rabbitURL(t)
	const n = 20
	pub := publisher(t, url)

	type side struct {
		name     string
		queue    string
		calls    *counts // handler calls (the failing first ones too)
		effects  *counts // successful handler calls
		returned *counts // answers given to the router (nil: acked)
		acked    *counts
	}
	run := func(name string, dedupMW message.HandlerMiddleware) *side {
		s := &side{name: name, queue: topic(t, url, name), calls: newCounts(-1), effects: newCounts(n),
			returned: newCounts(-1), acked: newCounts(n)}
		failed := map[string]bool{}
		var mu sync.Mutex
		r := newRouter(t)
		r.AddConsumerHandler(name, s.queue, subscriber(t, url), func(msg *message.Message) error {
			s.calls.add(msg.UUID)
			mu.Lock()
			first := !failed[msg.UUID]
			failed[msg.UUID] = true
			mu.Unlock()
			if first {
				return errors.New("the first attempt fails")
			}
			s.effects.add(msg.UUID)
			return nil
		}).AddMiddleware(func(h message.HandlerFunc) message.HandlerFunc {
			return func(msg *message.Message) ([]*message.Message, error) {
				out, err := h(msg)
				s.returned.add(msg.UUID)
				if err == nil {
					s.acked.add(msg.UUID)
				}
				return out, err
			}
		}, dedupMW)
		startRouter(t, r)
		return s
	}
	repo, err := middleware.NewMapExpiringKeyRepository(time.Hour)
	require.NoError(t, err)
	wm := &middleware.Deduplicator{Repository: repo, Timeout: time.Minute,
		KeyFactory: func(m *message.Message) (string, error) { return m.UUID, nil }}
	theirs := run("watermill", wm.Middleware)
	ours := run("dedup", newMiddleware(t, newMemstore(t), "failonce", nil).Middleware)

	ids := make([]string, n)
	for i := range ids {
		ids[i] = watermill.NewUUID()
		for _, s := range []*side{theirs, ours} {
			require.NoError(t, pub.Publish(s.queue, message.NewMessage(ids[i], []byte(fmt.Sprint(i)))))
		}
	}
	// Every message ends acknowledged on both sides: Watermill's after its
	// redelivery was taken for a duplicate, ours after its second run.
	theirs.acked.await(t, "Watermill's side to acknowledge every message")
	ours.acked.await(t, "our side to acknowledge every message")
	ours.effects.await(t, "our side's effects")

	lost := func(s *side) int {
		l := 0
		for _, id := range ids {
			if s.effects.get(id) == 0 {
				l++
			}
			require.LessOrEqual(t, s.effects.get(id), 1, "%s: effects of %s", s.name, id)
		}
		return l
	}
	theirLoss, ourLoss := lost(theirs), lost(ours)
	t.Logf("fail once then succeed, %d messages: Watermill Deduplicator lost %d (handler calls %d, effects %d); dedupwatermill lost %d (handler calls %d, effects %d)",
		n, theirLoss, theirs.calls.total, theirs.effects.total, ourLoss, ours.calls.total, ours.effects.total)
	require.Equal(t, 0, ourLoss, "dedupwatermill lost messages")
	require.Equal(t, n, theirLoss, "Watermill's Deduplicator was expected to lose every fail-then-succeed message")
}

// failingOncePublisher publishes each message, then fails the call the
// first time it sees the message's UUID: the publish happened but the
// router cannot know (a broker that confirmed, then a connection lost).
type failingOncePublisher struct {
	message.Publisher
	mu   sync.Mutex
	seen map[string]bool
}

func (p *failingOncePublisher) Publish(topic string, msgs ...*message.Message) error {
	if err := p.Publisher.Publish(topic, msgs...); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range msgs {
		if !p.seen[m.UUID] {
			p.seen[m.UUID] = true
			return errors.New("the confirm was lost")
		}
	}
	return nil
}

// TestProducedMessagesReplayed loses the router's publish of each produced
// message once: the router nacks, the redelivery is a duplicate, and the
// middleware gives the router the same messages (UUID, metadata, payload)
// to publish again, without running the handler.
func TestProducedMessagesReplayed(t *testing.T) {
	t.Parallel()
	url := rabbitURL(t)
	in, out := topic(t, url, "replay-in"), topic(t, url, "replay-out")
	const n = 10
	effects := newCounts(n)
	down := startDownstream(t, url, out, newMemstore(t), 2*n, n)
	r := newRouter(t)
	mw := newMiddleware(t, newMemstore(t), "replay", nil)
	pub := publisher(t, url)
	r.AddHandler("replay", in, subscriber(t, url), out, &failingOncePublisher{Publisher: pub, seen: map[string]bool{}},
		func(msg *message.Message) ([]*message.Message, error) {
			effects.add(msg.UUID)
			o := message.NewMessage(watermill.NewUUID(), []byte("produced from "+msg.UUID))
			o.Metadata.Set("in", msg.UUID)
			o.Metadata.Set("k", "v")
			return message.Messages{o}, nil
		}).AddMiddleware(mw.Middleware)
	startRouter(t, r)
	ids := publishN(t, pub, in, n, 1)
	down.deliveries.await(t, "every produced message twice downstream")
	down.effects.await(t, "the downstream effects")

	down.mu.Lock()
	defer down.mu.Unlock()
	for _, id := range ids {
		require.Equal(t, 1, effects.get(id), "effects of %s", id)
		require.Len(t, down.in[id], 1, "produced UUIDs of %s", id)
		for outID := range down.in[id] {
			copies := down.seen[outID]
			require.Len(t, copies, 2)
			for _, c := range copies {
				require.Equal(t, outID, c.UUID)
				require.Equal(t, "produced from "+id, string(c.Payload))
				require.Equal(t, "v", c.Metadata.Get("k"))
			}
			require.Equal(t, 1, down.effects.get(outID))
		}
	}
	s := mw.Stats()
	t.Logf("inputs %d: effects %d, downstream deliveries %d (each UUID twice), downstream effects %d; stats %+v",
		n, effects.total, down.deliveries.total, down.effects.total, s)
}

// TestPoisonQueueAndRetry chains Watermill's PoisonQueueWithFilter
// outside the middleware and its Retry inside: a permanent error and a
// message that fails MaxAttempts times reach the poison queue with the
// Dedup-* metadata, and a message that fails twice then succeeds under
// Retry has one effect, under one claim.
func TestPoisonQueueAndRetry(t *testing.T) {
	t.Parallel()
	url := rabbitURL(t)
	in, poisonTopic := topic(t, url, "poison-in"), topic(t, url, "poison")
	pub := publisher(t, url)
	poison, err := middleware.PoisonQueueWithFilter(pub, poisonTopic, dedupwatermill.IsPoison)
	require.NoError(t, err)
	mw := newMiddleware(t, newMemstore(t), "poison", &dedupwatermill.Options{Config: &dedup.Config{MaxAttempts: 2}})

	permanent, exhausted, flaky := watermill.NewUUID(), watermill.NewUUID(), watermill.NewUUID()
	calls, effects := newCounts(-1), newCounts(1)
	r := newRouter(t)
	r.AddMiddleware(poison, mw.Middleware, middleware.Retry{MaxRetries: 2, InitialInterval: time.Millisecond,
		ShouldRetry: func(p middleware.RetryParams) bool { return !dedup.IsPermanent(p.Err) }}.Middleware)
	r.AddConsumerHandler("poison", in, subscriber(t, url), func(msg *message.Message) error {
		calls.add(msg.UUID)
		switch msg.UUID {
		case permanent:
			return dedup.Permanent(errors.New("malformed order"))
		case exhausted:
			return errors.New("always fails")
		case flaky:
			if calls.get(flaky) <= 2 {
				return errors.New("fails twice")
			}
		}
		effects.add(msg.UUID)
		return nil
	})
	poisoned := map[string]*message.Message{}
	var mu sync.Mutex
	got := newCounts(2)
	pr := newRouter(t)
	pr.AddConsumerHandler("poison-reader", poisonTopic, subscriber(t, url), func(msg *message.Message) error {
		mu.Lock()
		poisoned[msg.UUID] = msg.Copy()
		mu.Unlock()
		got.add(msg.UUID)
		return nil
	})
	startRouter(t, r)
	startRouter(t, pr)
	for _, id := range []string{permanent, exhausted, flaky} {
		require.NoError(t, pub.Publish(in, message.NewMessage(id, []byte(id))))
	}
	got.await(t, "two poison messages")
	effects.await(t, "the flaky message's effect")

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, string(delivery.ReasonPermanent), poisoned[permanent].Metadata.Get(delivery.HeaderReason))
	require.Equal(t, string(delivery.ReasonAttemptsExhausted), poisoned[exhausted].Metadata.Get(delivery.HeaderReason))
	for _, m := range poisoned {
		require.Equal(t, in, m.Metadata.Get(delivery.HeaderSource))
		require.Equal(t, m.UUID, m.Metadata.Get(delivery.HeaderOriginalMessageID))
		require.Equal(t, "poison:"+dedupwatermill.RecordID(in, m.UUID, 0), m.Metadata.Get(delivery.HeaderKey))
		require.Equal(t, in, m.Metadata.Get(middleware.PoisonedTopicKey))
		require.NotEmpty(t, m.Metadata.Get(middleware.ReasonForPoisonedKey))
	}
	require.Equal(t, 1, calls.get(permanent), "a permanent error is not retried")
	require.Equal(t, 6, calls.get(exhausted), "MaxAttempts 2, each attempt retried twice by Retry")
	require.Equal(t, 3, calls.get(flaky))
	require.Equal(t, 1, effects.get(flaky))
	t.Logf("poison: %d messages to the poison queue; handler calls: permanent %d, exhausted %d, flaky %d (effects %d)",
		len(poisoned), calls.get(permanent), calls.get(exhausted), calls.get(flaky), effects.get(flaky))
}
