package dedupkafka_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupkafka "github.com/dedup-go/dedup/adapters/kafka"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/memstore"
)

type position struct {
	partition int
	offset    int64
}

// settlements records the adapter's decisions by message position.
type settlements struct {
	mu  sync.Mutex
	got map[position][]delivery.Reason
}

func newSettlements() *settlements { return &settlements{got: map[position][]delivery.Reason{}} }

func (s *settlements) observer() delivery.Observer {
	return onSettled(func(e delivery.Event) {
		s.mu.Lock()
		defer s.mu.Unlock()
		p := position{e.Partition, e.Offset}
		s.got[p] = append(s.got[p], e.Decision.Reason)
	})
}

func (s *settlements) snapshot() map[position][]delivery.Reason {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[position][]delivery.Reason, len(s.got))
	for k, v := range s.got {
		out[k] = append([]delivery.Reason(nil), v...)
	}
	return out
}

// produceOrders writes count distinct orders, order i to partition
// i%partitions, and returns their ids.
func produceOrders(t testing.TB, brokers []string, topic string, count int) []string {
	t.Helper()
	var msgs []kafka.Message
	var ids []string
	for i := range count {
		ids = append(ids, orderID(i))
		msgs = append(msgs, kafka.Message{Partition: i % partitions, Key: []byte(orderID(i)), Value: orderJSON(t, Order{ID: orderID(i), Cents: i})})
	}
	produce(t, newWriter(t, brokers), topic, msgs)
	return ids
}

// TestKillRereadsFromLastCommit cuts a consumer off in the middle of the
// stream without a clean stop (its reader is closed under it, so that
// nothing more is committed, as after a SIGKILL), and starts another on the
// same group and store: the new one re-reads each partition from exactly
// the last commit, and every message it re-reads that the first had
// finished is answered as a duplicate. Every order has its effect once.
// Committing after every outcome, at most two finished messages per
// partition are re-read: the one whose commit the kill cut off, and the one
// in flight then.
func TestKillRereadsFromLastCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("a slow fault test (a server or process killed or restarted): skipped under -short")
	}
	t.Parallel()
	t.Run("commit-every-50ms", func(t *testing.T) {
		t.Parallel()
		testKillRereads(t, 50*time.Millisecond)
	})
	t.Run("commit-every-outcome", func(t *testing.T) {
		t.Parallel()
		testKillRereads(t, dedupkafka.CommitEveryOutcome)
	})
}

func testKillRereads(t *testing.T, every time.Duration) {
	const topic, group, count = "orders", "billing", 900
	brokers := startKafka(t, partitions, topic)
	want := produceOrders(t, brokers, topic, count)
	s, err := memstore.New(nil)
	require.NoError(t, err)
	fx := newEffects()
	handler := func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
		time.Sleep(500 * time.Microsecond)
		return Receipt{OrderID: m.Body.ID, Charge: fx.add(m.Partition, m.Body.ID)}, nil
	}
	key := idstrategy.BodyField("id", func(o Order) string { return o.ID })
	opts := &dedupkafka.Options{DropPoison: true, Concurrency: 3, CommitInterval: every}

	first := newSettlements()
	cfg := fastConfig("billing")
	cfg.Observer = first.observer()
	rcv1, err := dedup.NewReceiver(s, key, handler, cfg)
	require.NoError(t, err)
	r1 := newReader(t, brokers, group, topic)
	c1, err := dedupkafka.NewConsumer(r1, rcv1, opts)
	require.NoError(t, err)
	require.NoError(t, c1.Start(t.Context()))
	eventually(t, time.Minute, func() bool { return fx.total.Load() >= count/3 }, "the first consumer's progress")
	require.NoError(t, r1.Close()) // the kill: no more commits
	select {
	case <-c1.Stopped():
	case <-time.After(30 * time.Second):
		t.Fatal("the consumer did not stop when its reader closed")
	}
	require.ErrorIs(t, c1.Err(), dedupkafka.ErrStoppedUnasked, "a closed reader is reported")
	before := committed(t, brokers, group, topic, partitions)
	done1 := first.snapshot()
	require.Less(t, len(done1), count, "the kill came too late to test anything")

	second := newSettlements()
	cfg = fastConfig("billing")
	cfg.Observer = second.observer()
	rcv2, err := dedup.NewReceiver(s, key, handler, cfg)
	require.NoError(t, err)
	c2, err := dedupkafka.NewConsumer(newReader(t, brokers, group, topic), rcv2, opts)
	require.NoError(t, err)
	require.NoError(t, c2.Start(t.Context()))
	stopAtCleanup(t, c2)
	// Wait for the second consumer's outcomes, not for the effects: a
	// commit that ran ahead of its effects then shows as orders without one.
	eventually(t, time.Minute, func() bool {
		n := 0
		for p, off := range endOffsets(t, brokers, topic, partitions) {
			n += int(off - max(before[p], 0))
		}
		return len(second.snapshot()) >= n
	}, "the second consumer settled every message from the last commit on")

	fx.ExactlyOnce(want...).Check(t)
	reread := 0
	lowest := map[int]int64{}
	for pos, reasons := range second.snapshot() {
		if l, ok := lowest[pos.partition]; !ok || pos.offset < l {
			lowest[pos.partition] = pos.offset
		}
		if _, ok := done1[pos]; ok {
			reread++
			require.Equal(t, []delivery.Reason{delivery.ReasonDuplicate}, reasons, "message %v finished by the first consumer", pos)
		} else {
			require.Equal(t, []delivery.Reason{delivery.ReasonProcessed}, reasons, "message %v", pos)
		}
	}
	for p := range partitions {
		require.Equal(t, max(before[p], 0), lowest[p], "partition %d: the second consumer started at offset %d, the last commit was %d", p, lowest[p], before[p])
	}
	if every == dedupkafka.CommitEveryOutcome {
		// Per partition: the message whose commit the kill cut off, and the
		// one in flight then.
		require.LessOrEqual(t, reread, 2*partitions, "finished messages re-read although each was committed before the next")
	} else {
		require.Positive(t, reread, "nothing finished after the last commit was re-read: the test shows nothing")
	}
	t.Logf("re-read after the kill: %d messages, all answered as duplicates (commits before the kill: %v)", reread, before)
}

// TestStopCommitsInFlight stops a consumer while a handler runs: Stop waits
// for it, commits it, and leaves fetched messages not started for the next
// owner; Stop with a deadline that passes cancels the handler and returns
// the context's error.
func TestStopCommitsInFlight(t *testing.T) {
	t.Parallel()
	const topic, group = "orders", "billing"
	brokers := startKafka(t, 1, topic)
	produceOrders1 := func(n int) {
		var msgs []kafka.Message
		for i := range n {
			msgs = append(msgs, kafka.Message{Value: orderJSON(t, Order{ID: orderID(i), Cents: i})})
		}
		produce(t, newWriter(t, brokers), topic, msgs)
	}
	produceOrders1(10)
	s, err := memstore.New(nil)
	require.NoError(t, err)
	running := make(chan string, 10)
	release := make(chan struct{})
	handler := func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
		running <- m.Body.ID
		select {
		case <-release:
			return Receipt{OrderID: m.Body.ID}, nil
		case <-ctx.Done():
			return Receipt{}, ctx.Err()
		}
	}
	rcv, err := dedup.NewReceiver(s, idstrategy.BodyField("id", func(o Order) string { return o.ID }), handler, fastConfig("billing"))
	require.NoError(t, err)
	r := newReader(t, brokers, group, topic)
	c, err := dedupkafka.NewConsumer(r, rcv, &dedupkafka.Options{DropPoison: true, CommitInterval: time.Hour})
	require.NoError(t, err)
	require.NoError(t, c.Start(t.Context()))
	require.Equal(t, orderID(0), testenv.Recv(t, running, "a handler"))

	stopped := make(chan error, 1)
	go func() { stopped <- c.Stop(context.Background()) }()
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) while a handler ran", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	require.NoError(t, testenv.Recv(t, stopped, "Stop"))
	require.Equal(t, map[int]int64{0: 1}, committed(t, brokers, group, topic, 1), "the handled message is committed, the rest left")
	select {
	case id := <-running:
		t.Fatalf("order %s started after Stop", id)
	default:
	}
	require.NoError(t, r.Close()) // the reader is ours: closing it leaves the group to the next consumer

	// A deadline that passes cancels the handler.
	rcv2, err := dedup.NewReceiver(s, idstrategy.BodyField("id", func(o Order) string { return o.ID }),
		func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
			running <- m.Body.ID
			<-ctx.Done()
			return Receipt{}, ctx.Err()
		}, fastConfig("billing"))
	require.NoError(t, err)
	c2, err := dedupkafka.NewConsumer(newReader(t, brokers, group, topic), rcv2, &dedupkafka.Options{DropPoison: true})
	require.NoError(t, err)
	require.NoError(t, c2.Start(t.Context()))
	require.Equal(t, orderID(1), testenv.Recv(t, running, "a handler"))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, c2.Stop(ctx), context.DeadlineExceeded)
	testenv.Recv(t, c2.Stopped(), "the consumer stopped")
	require.Equal(t, map[int]int64{0: 1}, committed(t, brokers, group, topic, 1), "the cancelled message is not committed")
	require.NoError(t, c2.Stop(context.Background()), "Stop after the consumer stopped")
}
