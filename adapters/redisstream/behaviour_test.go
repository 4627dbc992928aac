package dedupredisstream_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupredisstream "github.com/dedup-go/dedup/adapters/redisstream"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/outbox"
)

// events records the events a receiver's Observer hears.
type events struct {
	mu  sync.Mutex
	all []delivery.Event
}

func (e *events) Observe(_ context.Context, ev delivery.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
}

func (e *events) trimmed() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var ids []string
	for _, ev := range e.all {
		if errors.Is(ev.Err, dedupredisstream.ErrTrimmed) && ev.Decision.Reason == dedupredisstream.ReasonTrimmed {
			id, _ := ev.Header.Get(delivery.HeaderOffset)
			ids = append(ids, id)
		}
	}
	return ids
}

// A failed entry is not run again before its delay, whichever consumer
// takes it up: here the one that failed it dies (a hard stop) while it
// waits, and another, whose claim idle time is far shorter than the delay,
// takes it over.
func TestRetryDelayHeldAcrossTakeover(t *testing.T) {
	t.Parallel()
	c, stream, dl := streams(t)
	const delay = 1500 * time.Millisecond
	var mu sync.Mutex
	var runs []time.Time
	h := func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
		mu.Lock()
		defer mu.Unlock()
		runs = append(runs, time.Now())
		if len(runs) == 1 {
			return Receipt{}, errors.New("payment service timed out")
		}
		return Receipt{OrderID: m.Body.ID}, nil
	}
	cfg := fastConfig("billing")
	cfg.Backoff = dedup.BackoffFunc(func(int) time.Duration { return delay })
	rcv := newReceiver(t, h, cfg)
	opts := func(name string) *dedupredisstream.Options {
		return &dedupredisstream.Options{Consumer: name, CreateGroup: true, DeadLetterStream: dl, Block: 50 * time.Millisecond,
			ClaimIdle: 100 * time.Millisecond, ClaimInterval: 50 * time.Millisecond}
	}
	a, err := dedupredisstream.NewConsumer(c, stream, "billing", rcv, opts("a"))
	require.NoError(t, err)
	actx, kill := context.WithCancel(context.Background())
	require.NoError(t, a.Start(actx))
	add(t, c, stream, "o-1", `{"id":"o-1"}`)
	eventually(t, func() bool { return a.Stats().RetriedInPlace == 1 }, "the first run to fail")
	kill() // a dies holding the entry, its delay running
	<-a.Stopped()
	b, err := dedupredisstream.NewConsumer(c, stream, "billing", rcv, opts("b"))
	require.NoError(t, err)
	start(t, b)
	eventually(t, func() bool { return b.Stats().Acked == 1 }, "the retry to succeed on b")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, runs, 2)
	require.GreaterOrEqual(t, runs[1].Sub(runs[0]), delay, "the retry ran before its delay")
}

// A live consumer whose handler runs longer than the claim idle time keeps
// its entry: another consumer of the group never gets it. The holder
// resets the entry's idle time every quarter of ClaimIdle once it is idle
// half of it, so its upkeep may run up to a quarter of ClaimIdle late
// before the other consumer can take the entry: ClaimIdle is long enough
// (1.6s) that a machine busy with the whole suite does not delay it that
// much (at 300ms, 75ms of slack, it once did).
func TestLiveHolderNotRaced(t *testing.T) {
	t.Parallel()
	c, stream, dl := streams(t)
	var calls atomic.Int32
	h := func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
		calls.Add(1)
		select {
		case <-time.After(3200 * time.Millisecond): // 2 claim idle times
		case <-ctx.Done():
			return Receipt{}, ctx.Err()
		}
		return Receipt{OrderID: m.Body.ID}, nil
	}
	rcv := newReceiver(t, h, fastConfig("billing"))
	// a scans for idle entries once, at its start: its own XAUTOCLAIM
	// would otherwise win the entry back now and then, and hide a holder
	// that does not reset its idle time. b scans every 20ms.
	opts := func(name string, claimInterval time.Duration) *dedupredisstream.Options {
		return &dedupredisstream.Options{Consumer: name, CreateGroup: true, DeadLetterStream: dl, Block: 50 * time.Millisecond,
			ClaimIdle: 1600 * time.Millisecond, ClaimInterval: claimInterval}
	}
	a, err := dedupredisstream.NewConsumer(c, stream, "billing", rcv, opts("a", time.Hour))
	require.NoError(t, err)
	start(t, a)
	add(t, c, stream, "o-1", `{"id":"o-1"}`)
	eventually(t, func() bool { return calls.Load() == 1 }, "a to run the handler")
	b, err := dedupredisstream.NewConsumer(c, stream, "billing", rcv, opts("b", 20*time.Millisecond))
	require.NoError(t, err)
	start(t, b)
	eventually(t, func() bool { return a.Stats().Acked == 1 }, "a to finish")
	require.Zero(t, b.Stats().Delivered, "b took over an entry its live holder was running")
	require.EqualValues(t, 1, calls.Load())
}

// Entries deleted from the stream while pending are reported, by id: those
// of a dead consumer (XAUTOCLAIM's deleted ids) and this consumer's own,
// read back from its pending list without fields.
func TestTrimmedPendingReported(t *testing.T) {
	t.Parallel()
	c, stream, dl := streams(t)
	ctx := context.Background()
	require.NoError(t, c.XGroupCreateMkStream(ctx, stream, "billing", "0").Err())
	var ids []string
	for i := range 6 {
		ids = append(ids, add(t, c, stream, fmt.Sprint("o-", i), fmt.Sprintf(`{"id":"o-%d"}`, i)))
	}
	// A dead consumer read the first three, this consumer's name (an
	// earlier run) the next two; the last stays new.
	read := func(name string, n int64) {
		require.NoError(t, c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "billing", Consumer: name, Streams: []string{stream, ">"}, Count: n, Block: -1}).Err())
	}
	read("ghost", 3)
	read("me", 2)
	// Delete two of the ghost's and one of mine.
	require.NoError(t, c.XDel(ctx, stream, ids[0], ids[2], ids[3]).Err())
	var handled sync.Map
	h := func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
		handled.Store(m.Body.ID, true)
		return Receipt{OrderID: m.Body.ID}, nil
	}
	obs := &events{}
	cfg := fastConfig("billing")
	cfg.Observer = obs
	rcv := newReceiver(t, h, cfg)
	k, err := dedupredisstream.NewConsumer(c, stream, "billing", rcv, &dedupredisstream.Options{Consumer: "me", DeadLetterStream: dl,
		Block: 50 * time.Millisecond, ClaimIdle: 50 * time.Millisecond, ClaimInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	start(t, k)
	eventually(t, func() bool { return k.Stats().Acked == 3 && k.Stats().Trimmed == 3 }, "3 entries handled and 3 reported trimmed")
	require.ElementsMatch(t, []string{ids[0], ids[2], ids[3]}, obs.trimmed())
	for _, id := range []string{"o-1", "o-4", "o-5"} {
		_, ok := handled.Load(id)
		require.True(t, ok, id)
	}
	pending, err := c.XPending(ctx, stream, "billing").Result()
	require.NoError(t, err)
	require.Zero(t, pending.Count, "entries left pending")
}

// A poison entry becomes a dead letter with the reason, the original's
// fields and entry id, and the original is acknowledged only once the
// dead letter was added: while the dead-letter stream refuses it, the
// original stays pending.
func TestDeadLetterBeforeAck(t *testing.T) {
	t.Parallel()
	c, stream, dl := streams(t)
	ctx := context.Background()
	require.NoError(t, c.Set(ctx, dl, "not a stream", 0).Err()) // XADD fails: WRONGTYPE
	h := func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
		return Receipt{}, dedup.Permanent(errors.New("card declined"))
	}
	rcv := newReceiver(t, h, fastConfig("billing"))
	k, err := dedupredisstream.NewConsumer(c, stream, "billing", rcv, &dedupredisstream.Options{Consumer: "me", CreateGroup: true,
		DeadLetterStream: dl, Block: 50 * time.Millisecond})
	require.NoError(t, err)
	start(t, k)
	p, err := dedupredisstream.NewProducer(c, stream, nil)
	require.NoError(t, err)
	eid, _, err := p.Add(ctx, "o-1", []byte(`{"id":"o-1"}`), map[string]string{"tenant": "acme"})
	require.NoError(t, err)
	eventually(t, func() bool { return k.Stats().SettleFailures >= 1 }, "the dead letter to fail")
	pending, err := c.XPending(ctx, stream, "billing").Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, pending.Count, "the original was acknowledged without its dead letter")
	require.NoError(t, c.Del(ctx, dl).Err())
	eventually(t, func() bool { return k.Stats().DeadLettered == 1 }, "the dead letter")
	letters, err := c.XRange(ctx, dl, "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, letters, 1)
	v := letters[0].Values
	require.Equal(t, string(delivery.ReasonPermanent), v[delivery.HeaderReason])
	require.Equal(t, eid, v[delivery.HeaderOffset])
	require.Equal(t, "o-1", v[delivery.HeaderOriginalMessageID])
	require.Equal(t, "o-1", v["message-id"])
	require.Equal(t, `{"id":"o-1"}`, v["data"])
	require.Equal(t, "acme", v["tenant"])
	require.Equal(t, stream, v[delivery.HeaderSource])
	require.Equal(t, "billing", v[delivery.HeaderConsumerGroup])
	require.Contains(t, v[delivery.HeaderError], "card declined")
	eventually(t, func() bool {
		p, err := c.XPending(ctx, stream, "billing").Result()
		return err == nil && p.Count == 0
	}, "the original to be acknowledged")
}

// A consumer silent for DeadConsumerIdle that owns nothing is removed from
// the group; one that owns pending entries is not.
func TestDeadConsumersRemoved(t *testing.T) {
	t.Parallel()
	c, stream, dl := streams(t)
	ctx := context.Background()
	require.NoError(t, c.XGroupCreateMkStream(ctx, stream, "billing", "0").Err())
	require.NoError(t, c.XGroupCreateConsumer(ctx, stream, "billing", "gone").Err())
	add(t, c, stream, "o-1", `{"id":"o-1"}`)
	require.NoError(t, c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "billing", Consumer: "owner", Streams: []string{stream, ">"}, Count: 1, Block: -1}).Err())
	rcv := newReceiver(t, func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) { return Receipt{}, nil }, fastConfig("billing"))
	k, err := dedupredisstream.NewConsumer(c, stream, "billing", rcv, &dedupredisstream.Options{Consumer: "me", DeadLetterStream: dl,
		Block: 50 * time.Millisecond, ClaimIdle: time.Hour, ClaimInterval: 20 * time.Millisecond, DeadConsumerIdle: 50 * time.Millisecond})
	require.NoError(t, err)
	start(t, k)
	names := func() []string {
		cs, err := c.XInfoConsumers(ctx, stream, "billing").Result()
		require.NoError(t, err)
		var out []string
		for _, x := range cs {
			out = append(out, x.Name)
		}
		return out
	}
	eventually(t, func() bool { return !contains(names(), "gone") }, "the dead consumer to be removed")
	require.Contains(t, names(), "owner", "a consumer owning a pending entry was removed")
	// The script refuses it too, in the same step as it looks (a consumer
	// may read an entry between XINFO CONSUMERS and DELCONSUMER).
	n, err := dedupredisstream.DelConsumer(ctx, c, stream, "billing", "owner")
	require.NoError(t, err)
	require.Zero(t, n)
	require.Contains(t, names(), "owner", "the script removed a consumer owning a pending entry")
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// Stats carries the group's lag, as XINFO GROUPS says.
func TestLagInStats(t *testing.T) {
	t.Parallel()
	c, stream, dl := streams(t)
	ctx := context.Background()
	require.NoError(t, c.XGroupCreateMkStream(ctx, stream, "billing", "0").Err())
	for i := range 5 {
		add(t, c, stream, fmt.Sprint("o-", i), fmt.Sprintf(`{"id":"o-%d"}`, i))
	}
	release := make(chan struct{})
	rcv := newReceiver(t, func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
		select {
		case <-release:
		case <-ctx.Done():
			return Receipt{}, ctx.Err()
		}
		return Receipt{}, nil
	}, fastConfig("billing"))
	k, err := dedupredisstream.NewConsumer(c, stream, "billing", rcv, &dedupredisstream.Options{Consumer: "me", DeadLetterStream: dl,
		Block: 50 * time.Millisecond, ClaimInterval: 20 * time.Millisecond, Concurrency: 1, Batch: 1})
	require.NoError(t, err)
	require.EqualValues(t, 5, k.Stats().Lag+5, "before Start") // zero
	start(t, k)
	require.EqualValues(t, 5, k.Stats().Lag, "the lag Start read")
	close(release)
	eventually(t, func() bool { return k.Stats().Acked == 5 && k.Stats().Lag == 0 }, "the lag to drop to 0")
}

// Two processes cannot share a consumer name; one process's name is the
// same from one Consumer to the next.
func TestConsumerNames(t *testing.T) {
	t.Parallel()
	c, stream, dl := streams(t)
	rcv := newReceiver(t, func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) { return Receipt{}, nil }, fastConfig("billing"))
	opts := &dedupredisstream.Options{CreateGroup: true, DeadLetterStream: dl, Block: 50 * time.Millisecond}
	a, err := dedupredisstream.NewConsumer(c, stream, "billing", rcv, opts)
	require.NoError(t, err)
	b, err := dedupredisstream.NewConsumer(c, stream, "billing", rcv, opts)
	require.NoError(t, err)
	require.Equal(t, a.Name(), b.Name(), "the default name is not stable")
	start(t, a)
	err = b.Start(context.Background())
	require.ErrorIs(t, err, dedupredisstream.ErrConsumerInUse)
	require.ErrorIs(t, err, dedup.ErrInvalidConfig)
}

// Each entry added twice by a producer (a retried XADD) has one effect;
// both are acknowledged. The outbox publisher's entries are consumed alike.
func TestProducerDuplicatesAndOutbox(t *testing.T) {
	t.Parallel()
	c, stream, dl := streams(t)
	ctx := context.Background()
	var effects sync.Map
	var runs atomic.Int32
	rcv := newReceiver(t, func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
		runs.Add(1)
		if _, dup := effects.LoadOrStore(m.Body.ID, true); dup {
			t.Errorf("second effect of %s", m.Body.ID)
		}
		return Receipt{OrderID: m.Body.ID}, nil
	}, fastConfig("billing"))
	k, err := dedupredisstream.NewConsumer(c, stream, "billing", rcv, &dedupredisstream.Options{Consumer: "me", CreateGroup: true,
		DeadLetterStream: dl, Block: 50 * time.Millisecond})
	require.NoError(t, err)
	start(t, k)
	p, err := dedupredisstream.NewProducer(c, stream, nil)
	require.NoError(t, err)
	for i := range 20 {
		_, id, err := p.Add(ctx, "", fmt.Appendf(nil, `{"id":"p-%d"}`, i), nil)
		require.NoError(t, err)
		_, again, err := p.Add(ctx, id, fmt.Appendf(nil, `{"id":"p-%d"}`, i), nil)
		require.NoError(t, err)
		require.Equal(t, id, again)
	}
	pub, err := dedupredisstream.NewOutboxPublisher(c, nil)
	require.NoError(t, err)
	var msgs []outbox.Message
	for i := range 10 {
		msgs = append(msgs, outbox.Message{ID: fmt.Sprint("ob-", i), Destination: stream, Body: fmt.Appendf(nil, `{"id":"ob-%d"}`, i)})
	}
	require.NoError(t, pub.Publish(ctx, msgs))
	require.NoError(t, pub.Publish(ctx, msgs)) // the relay again, after a lost reply
	var be *outbox.BatchError
	err = pub.Publish(ctx, []outbox.Message{{ID: "x", Body: []byte("{}")}})
	require.ErrorAs(t, err, &be)
	require.ErrorIs(t, err, outbox.ErrPermanent)
	require.NoError(t, pub.Close(ctx))
	require.ErrorIs(t, pub.Publish(ctx, msgs), dedupredisstream.ErrPublisherClosed)
	eventually(t, func() bool { return k.Stats().Acked == 60 }, "every entry acknowledged")
	require.EqualValues(t, 30, runs.Load())
}

// Bad input is an error, never a panic.
func TestBadInput(t *testing.T) {
	t.Parallel()
	c, stream, dl := streams(t)
	rcv := newReceiver(t, func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) { return Receipt{}, nil }, fastConfig("billing"))
	for name, f := range map[string]func() error{
		"nil client": func() error {
			_, err := dedupredisstream.NewConsumer(nil, stream, "g", rcv, &dedupredisstream.Options{DropPoison: true})
			return err
		},
		"no stream": func() error {
			_, err := dedupredisstream.NewConsumer(c, "", "g", rcv, &dedupredisstream.Options{DropPoison: true})
			return err
		},
		"no group": func() error {
			_, err := dedupredisstream.NewConsumer(c, stream, "", rcv, &dedupredisstream.Options{DropPoison: true})
			return err
		},
		"nil receiver": func() error {
			_, err := dedupredisstream.NewConsumer[Order, Receipt](c, stream, "g", nil, nil)
			return err
		},
		"no dead letter": func() error {
			_, err := dedupredisstream.NewConsumer(c, stream, "g", rcv, nil)
			if !errors.Is(err, dedupredisstream.ErrNoDeadLetter) {
				return nil
			}
			return err
		},
		"own stream": func() error {
			_, err := dedupredisstream.NewConsumer(c, stream, "g", rcv, &dedupredisstream.Options{DeadLetterStream: stream})
			return err
		},
		"missing group": func() error {
			k, err := dedupredisstream.NewConsumer(c, stream, "g", rcv, &dedupredisstream.Options{DeadLetterStream: dl})
			require.NoError(t, err)
			err = k.Start(context.Background())
			if !errors.Is(err, dedupredisstream.ErrNoGroup) {
				return nil
			}
			return err
		},
	} {
		require.ErrorIs(t, f(), dedup.ErrInvalidConfig, name)
	}
}

// The next-attempt time is recorded in whole milliseconds, rounded up: a
// consumer that takes the entry over waits at least the delay, never up to
// a millisecond less.
func TestNextAttemptTimeRoundedUp(t *testing.T) {
	base := time.UnixMilli(1_795_994_657_669)
	for _, c := range []struct {
		at   time.Time
		want int64
	}{
		{base, base.UnixMilli()},
		{base.Add(time.Nanosecond), base.UnixMilli() + 1},
		{base.Add(999_999 * time.Nanosecond), base.UnixMilli() + 1},
		{base.Add(time.Millisecond), base.UnixMilli() + 1},
	} {
		got := dedupredisstream.DueMilli(c.at)
		require.Equal(t, c.want, got, "DueMilli(%v)", c.at)
		require.False(t, time.UnixMilli(got).Before(c.at), "recorded %d is before %v", got, c.at)
	}
}
