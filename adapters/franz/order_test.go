package dedupfranz_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedup-go/dedup"
	dedupfranz "github.com/dedup-go/dedup/adapters/franz"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/adaptertest"
	"github.com/dedup-go/dedup/store/memstore"
)

// keyedStream is a stream of orders over many keys: order i belongs to
// key i%keys, is that key's (i/keys)-th order, and goes to the key's
// partition (key%partitions), so that each key's orders are in one
// partition in their order. One order in copyEvery of each key (spread
// over the keys, so over the partitions) is produced again copyLag orders
// later (a producer's retry: same id, another offset).
type keyedStream struct {
	orders, keys       int
	partitions         int32
	copyEvery, copyLag int
}

func (s keyedStream) key(i int) int         { return i % s.keys }
func (s keyedStream) seq(i int) int         { return i / s.keys }
func (s keyedStream) partition(i int) int32 { return int32(s.key(i)) % s.partitions }
func (s keyedStream) keyName(k int) string  { return fmt.Sprintf("k-%04d", k) }
func (s keyedStream) copied(i int) bool     { return (s.key(i)+s.seq(i))%s.copyEvery == 0 }

// ids returns the ids of the stream's orders.
func (s keyedStream) ids() (ids []string) {
	for i := range s.orders {
		ids = append(ids, orderID(i))
	}
	return ids
}

// copies returns how many orders are produced twice.
func (s keyedStream) copies() (n int) {
	for i := range s.orders {
		if s.copied(i) {
			n++
		}
	}
	return n
}

// records returns the records of the stream, in produce order: each
// order, and the copies whose time has come after it.
func (s keyedStream) records(t testing.TB, topic string) []*kgo.Record {
	rec := func(i int) *kgo.Record {
		return &kgo.Record{Topic: topic, Partition: s.partition(i), Key: []byte(s.keyName(s.key(i))),
			Value: orderJSON(t, Order{ID: orderID(i), Cents: i})}
	}
	var out []*kgo.Record
	for i := range s.orders {
		out = append(out, rec(i))
		if j := i - s.copyLag; j >= 0 && s.copied(j) {
			out = append(out, rec(j))
		}
	}
	for j := max(0, s.orders-s.copyLag); j < s.orders; j++ {
		if s.copied(j) {
			out = append(out, rec(j))
		}
	}
	return out
}

// ledger records the effects of a keyedStream's orders: how many each had,
// each key's orders in the order of their first effects, and when each
// partition had its effects.
type ledger struct {
	s      keyedStream
	delay  time.Duration // how long each handler works
	mu     sync.Mutex
	n      map[string]int
	firsts map[int][]int         // key -> seqs in the order of their first effect
	times  map[int32][]time.Time // partition -> times of its effects
}

func newLedger(s keyedStream) *ledger {
	return &ledger{s: s, n: map[string]int{}, firsts: map[int][]int{}, times: map[int32][]time.Time{}}
}

// handler is the orders' handler: one effect per call that succeeds.
func (l *ledger) handler(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
	if l.delay > 0 {
		t := time.NewTimer(l.delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return Receipt{}, ctx.Err()
		}
	}
	if err := ctx.Err(); err != nil {
		return Receipt{}, err
	}
	i := m.Body.Cents
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[m.Body.ID] == 0 {
		l.firsts[l.s.key(i)] = append(l.firsts[l.s.key(i)], l.s.seq(i))
	}
	l.n[m.Body.ID]++
	l.times[int32(m.Partition)] = append(l.times[int32(m.Partition)], time.Now())
	return Receipt{OrderID: m.Body.ID}, nil
}

// distinct returns how many orders had an effect.
func (l *ledger) distinct() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.n)
}

// awaitAll waits up to within for every order to have had an effect; the
// tally that follows says what is missing when some never does.
func (l *ledger) awaitAll(within time.Duration) {
	deadline := time.Now().Add(within)
	for l.distinct() < l.s.orders && time.Now().Before(deadline) {
		<-time.After(10 * time.Millisecond)
	}
}

// tally counts the doubles (orders with more than one effect), the lost
// (orders of ids with none), the unexpected (effects of ids not in ids)
// and the keys whose first effects are out of order.
type tally struct{ effects, doubles, lost, unexpected, outOfOrder int }

func (l *ledger) tally(ids []string) tally {
	l.mu.Lock()
	defer l.mu.Unlock()
	var r tally
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
		switch n := l.n[id]; {
		case n == 0:
			r.lost++
		case n > 1:
			r.doubles++
		}
	}
	for id, n := range l.n {
		r.effects += n
		if !want[id] {
			r.unexpected++
		}
	}
	for _, seqs := range l.firsts {
		if !slices.IsSorted(seqs) {
			r.outOfOrder++
		}
	}
	return r
}

// stall returns the longest any partition went without an effect in the
// window after from (the gap between two effects, the later one within
// the window), and how long after ready the last partition to have an
// effect again had its first.
func (l *ledger) stall(from time.Time, window time.Duration, ready time.Time) (longest, resumed time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ts := range l.times {
		for k := 1; k < len(ts); k++ {
			if ts[k].After(from) && ts[k].Before(from.Add(window)) {
				longest = max(longest, ts[k].Sub(ts[k-1]))
			}
		}
		if k, _ := slices.BinarySearchFunc(ts, ready, func(a, b time.Time) int { return a.Compare(b) }); k < len(ts) {
			resumed = max(resumed, ts[k].Sub(ready))
		}
	}
	return longest, resumed
}

// reasons counts settled deliveries by reason.
type reasons struct {
	mu sync.Mutex
	n  map[delivery.Reason]int
}

func (r *reasons) observer() delivery.Observer {
	r.n = map[delivery.Reason]int{}
	return adaptertest.OnSettled(func(e delivery.Event) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.n[e.Decision.Reason]++
	})
}

func (r *reasons) get(reason delivery.Reason) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[reason]
}

// endOffsets returns the end offset of each partition of topic, which
// has partitions of them.
func endOffsets(ctx context.Context, addrs []string, topic string, partitions int32) (map[int32]int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ends, err := topicEnds(ctx, cl, topic)
	if err == nil && len(ends) != int(partitions) {
		err = fmt.Errorf("%s has %d partitions, not %d", topic, len(ends), partitions)
	}
	return ends, err
}

// committedToEnd reports whether group has committed every partition of
// topic to its end, with both maps for a message.
func committedToEnd(addrs []string, group, topic string, partitions int32) (ok bool, got, end map[int32]int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	end, err := endOffsets(ctx, addrs, topic, partitions)
	if err != nil {
		return false, nil, nil
	}
	got, err = committed(ctx, addrs, group, topic, partitions)
	if err != nil {
		return false, nil, end
	}
	for p := range partitions {
		if got[p] != end[p] {
			return false, got, end
		}
	}
	return true, got, end
}

// orderConsumer is a consumer of the order tests: one message at a time
// (so that a partition's first effects are in offset order), commits
// every 100ms.
func orderConsumer(t testing.TB, addrs []string, group, topic string, st *memstore.Store, l *ledger, obs delivery.Observer, extra ...kgo.Opt) *dedupfranz.Consumer[Order, Receipt] {
	t.Helper()
	cfg := fastConfig("orders")
	cfg.Observer = obs
	rcv, err := dedup.NewReceiver(st, idstrategy.BodyField("id", func(o Order) string { return o.ID }), l.handler, cfg)
	require.NoError(t, err)
	c, err := dedupfranz.NewConsumer(clientOpts(addrs, extra...), group, []string{topic}, rcv,
		&dedupfranz.Options{DropPoison: true, CommitInterval: 100 * time.Millisecond, MinRetryDelay: 10 * time.Millisecond})
	require.NoError(t, err)
	return c
}

// TestOrdersRebalance: three consumers of one group over one store read
// 3,000 orders of 60 keys on 6 partitions, a fifth of them produced twice,
// while the stream is produced: the third consumer joins a third of the
// way in, the first leaves two thirds of the way in (cooperative
// rebalances each time). Every order has its effect once, each key's
// orders have their first effects in order, and the group commits every
// partition to its end.
func TestOrdersRebalance(t *testing.T) {
	const topic, group = "orders-rebalance", "g-orders-rebalance"
	s := keyedStream{orders: 3000, keys: 60, partitions: 6, copyEvery: 5, copyLag: 13}
	cluster := startCluster(t, s.partitions, topic)
	addrs := cluster.ListenAddrs()
	prod := newProducer(t, addrs)
	st, err := memstore.New(&memstore.Options{Capacity: 4 * s.orders})
	require.NoError(t, err)
	l := newLedger(s)
	l.delay = 2 * time.Millisecond
	var rs reasons
	obs := rs.observer()
	var evA, evB, evC events
	a := orderConsumer(t, addrs, group, topic, st, l, obs)
	b := orderConsumer(t, addrs, group, topic, st, l, obs)
	c := orderConsumer(t, addrs, group, topic, st, l, obs)
	dedupfranz.OnRebalance(a, evA.record)
	dedupfranz.OnRebalance(b, evB.record)
	dedupfranz.OnRebalance(c, evC.record)
	start(t, a)
	start(t, b)

	records := s.records(t, topic)
	chunks := slices.Collect(slices.Chunk(records, 100))
	tick := time.NewTicker(60 * time.Millisecond) // the stream's pace
	defer tick.Stop()
	for k, chunk := range chunks {
		switch k {
		case len(chunks) / 3:
			start(t, c)
		case 2 * len(chunks) / 3:
			// The leaver stops while records wait in its queues, fetched
			// and not started: they are the next owner's.
			produce(t, prod, chunk...)
			queued := func() (n int) {
				for p := range s.partitions {
					n += dedupfranz.Buffered(a, topic, p)
				}
				return n
			}
			for deadline := time.Now().Add(2 * time.Second); queued() == 0 && time.Now().Before(deadline); {
				<-time.After(time.Millisecond)
			}
			t.Logf("the leaver stops with %d records queued", queued())
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			require.NoError(t, a.Stop(ctx))
			cancel()
			<-tick.C
			continue
		}
		produce(t, prod, chunk...)
		<-tick.C
	}
	l.awaitAll(20 * time.Second)
	r := l.tally(s.ids())
	t.Logf("orders %d, copies %d, records %d, effects %d, doubles %d, lost %d, unexpected %d, keys out of order %d, duplicates answered %d",
		s.orders, s.copies(), len(records), r.effects, r.doubles, r.lost, r.unexpected, r.outOfOrder, rs.get(delivery.ReasonDuplicate))
	eventually(t, 15*time.Second, func() bool {
		ok, _, _ := committedToEnd(addrs, group, topic, s.partitions)
		return ok
	}, "every partition committed to its end")
	require.Equal(t, tally{effects: s.orders}, r, "effects: exactly once per order, each key's first effects in order")
	require.GreaterOrEqual(t, rs.get(delivery.ReasonDuplicate), s.copies(), "every copy answered as a duplicate")
	t.Logf("delivered: a (left) %d, b %d, c (joined) %d", a.Stats().Delivered, b.Stats().Delivered, c.Stats().Delivered)
	require.NotZero(t, a.Stats().Delivered, "the leaver handled nothing before it left")
	require.NotZero(t, b.Stats().Delivered, "the member that stays handled nothing")
	require.NotZero(t, c.Stats().Delivered, "the joiner handled nothing")

	// The rebalances happened, cooperatively: the joiner took partitions
	// from the members, the leaver's went to the others, none was lost.
	_, ok := evC.first("assigned", topic)
	require.True(t, ok, "the joiner was assigned partitions")
	_, ok = evA.first("revoked", topic)
	require.True(t, ok, "the leaver's partitions were revoked")
	for name, ev := range map[string]*events{"a": &evA, "b": &evB, "c": &evC} {
		_, lost := ev.first("lost", topic)
		require.False(t, lost, "consumer %s lost partitions", name)
	}
	ok, got, end := committedToEnd(addrs, group, topic, s.partitions)
	require.True(t, ok, "committed %v, end %v", got, end)
}
