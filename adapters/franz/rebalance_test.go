package dedupfranz_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dedup-go/dedup"
	dedupfranz "github.com/dedup-go/dedup/adapters/franz"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/store/memstore"
)

// commitLog records every OffsetCommit the cluster receives.
type commitLog struct {
	mu      sync.Mutex
	commits []commitSeen
}

type commitSeen struct {
	member    string
	partition int32
	offset    int64
	at        time.Time
}

func watchCommits(c *kfake.Cluster) *commitLog {
	l := &commitLog{}
	c.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.OffsetCommitRequest)
		now := time.Now()
		l.mu.Lock()
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				l.commits = append(l.commits, commitSeen{r.MemberID, p.Partition, p.Offset, now})
			}
		}
		l.mu.Unlock()
		return nil, nil, false
	})
	return l
}

// by returns the commits member sent for partition part after since.
// Recent OffsetCommit versions name topics by id, not name: the tests
// using it read one topic.
func (l *commitLog) by(member string, part int32, since time.Time) []commitSeen {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []commitSeen
	for _, c := range l.commits {
		if c.member == member && c.partition == part && !c.at.Before(since) {
			out = append(out, c)
		}
	}
	return out
}

// events records a consumer's group callbacks.
type events struct {
	mu  sync.Mutex
	all []event
}

type event struct {
	name  string
	parts map[string][]int32
	at    time.Time
}

func (e *events) record(name string, parts map[string][]int32) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, event{name, parts, time.Now()})
}

// first returns the first event named name that names a partition of
// topic, and whether there is one.
func (e *events) first(name, topic string) (event, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range e.all {
		if ev.name == name && len(ev.parts[topic]) > 0 {
			return ev, true
		}
	}
	return event{}, false
}

// blocker is a handler whose orders named in block wait until released
// (or their context ends); every handled order is counted in effects.
type blocker struct {
	fx      *effects
	release chan struct{}
	block   map[string]bool
	started chan string
}

func newBlocker(block ...string) *blocker {
	b := &blocker{fx: newEffects(), release: make(chan struct{}), block: map[string]bool{}, started: make(chan string, 16)}
	for _, id := range block {
		b.block[id] = true
	}
	return b
}

func (b *blocker) handle(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
	if b.block[m.Body.ID] {
		b.started <- m.Body.ID
		select {
		case <-b.release:
		case <-ctx.Done():
			return Receipt{}, ctx.Err()
		}
	}
	b.fx.add(m.Partition, m.Body.ID)
	return Receipt{OrderID: m.Body.ID}, nil
}

func newStore(t testing.TB) *memstore.Store {
	t.Helper()
	st, err := memstore.New(nil)
	require.NoError(t, err)
	return st
}

func newReceiver(t testing.TB, st *memstore.Store, ns string, h dedup.Handler[*dedup.Message[Order], Receipt]) *dedup.Receiver[*dedup.Message[Order], Receipt] {
	t.Helper()
	rcv, err := dedup.NewReceiver(st, idstrategy.BodyField("id", func(o Order) string { return o.ID }), h, fastConfig(ns))
	require.NoError(t, err)
	return rcv
}

func start(t testing.TB, c *dedupfranz.Consumer[Order, Receipt]) {
	t.Helper()
	require.NoError(t, c.Start(context.Background()))
	stopAtCleanup(t, c)
}

func waitFor[V any](t testing.TB, ch <-chan V, within time.Duration, what string) V {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(within):
		t.Fatalf("timed out after %v waiting for %s", within, what)
		panic("unreachable")
	}
}

// TestRevokeFencesCommits: a partition revoked while its handler runs
// (longer than RevokeTimeout) is never committed by its old owner once the
// revoke returned, even when the handler ends and the watermark moves
// (CommitEveryOutcome commits at once); the records of the revoked
// partition start no handler on the old owner after the revoke; the new
// owner takes the partition to its end.
func TestRevokeFencesCommits(t *testing.T) {
	const topic = "revoke"
	cluster := startCluster(t, 2, topic)
	addrs := cluster.ListenAddrs()
	log := watchCommits(cluster)
	prod := newProducer(t, addrs)
	produce(t, prod, orderRecord(t, topic, 0, 0), orderRecord(t, topic, 1, 1))
	for i := 2; i < 12; i++ {
		produce(t, prod, orderRecord(t, topic, int32(i%2), i))
	}
	st := newStore(t)
	b := newBlocker(orderID(0), orderID(1))
	opts := &dedupfranz.Options{DropPoison: true, CommitInterval: dedupfranz.CommitEveryOutcome, RevokeTimeout: 100 * time.Millisecond}
	a, err := dedupfranz.NewConsumer(clientOpts(addrs), "g-revoke", []string{topic}, newReceiver(t, st, "revoke", b.handle), opts)
	require.NoError(t, err)
	var aEvents events
	dedupfranz.OnRebalance(a, aEvents.record)
	start(t, a)
	waitFor(t, b.started, 10*time.Second, "the first blocked handler")
	waitFor(t, b.started, 10*time.Second, "the second blocked handler")
	member, _ := dedupfranz.Client(a).GroupMetadata()

	fx2 := newEffects()
	second, err := dedupfranz.NewConsumer(clientOpts(addrs), "g-revoke", []string{topic},
		newReceiver(t, st, "revoke", func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
			fx2.add(m.Partition, m.Body.ID)
			return Receipt{OrderID: m.Body.ID}, nil
		}), opts)
	require.NoError(t, err)
	start(t, second)
	var rev event
	eventually(t, 15*time.Second, func() bool {
		var ok bool
		rev, ok = aEvents.first("revoked", topic)
		return ok
	}, "a partition revoked from the first consumer")
	lostPart := rev.parts[topic][0]
	close(b.release) // the revoked partition's handler ends, its watermark moves
	// The second consumer finds the order done (or waits out its holder)
	// and takes the partition to its end.
	eventually(t, 20*time.Second, func() bool {
		offs, err := committed(context.Background(), addrs, "g-revoke", topic, 2)
		return err == nil && offs[lostPart] == 6
	}, "the revoked partition committed to its end by its new owner")
	require.Empty(t, log.by(member, lostPart, rev.at), "the old owner committed a partition after its revoke returned")
	require.NotEmpty(t, log.by(member, 1-lostPart, rev.at), "the old owner's commits of the partition it kept (the log sees its commits)")
	// No handler of the revoked partition started on the old owner after
	// the revoke: it handled its blocked order, nothing after it.
	for _, id := range b.fx.order(int(lostPart)) {
		require.Equal(t, orderID(int(lostPart)), id, "the old owner handled %s of the revoked partition", id)
	}
}

// TestLostCommitsNothing: partitions lost (a heartbeat answered
// UNKNOWN_MEMBER_ID: the member is out of the group) are not committed by
// the member, neither in OnPartitionsLost nor later, though records of
// theirs were done and not committed yet.
func TestLostCommitsNothing(t *testing.T) {
	const topic = "lost"
	cluster := startCluster(t, 1, topic)
	addrs := cluster.ListenAddrs()
	log := watchCommits(cluster)
	prod := newProducer(t, addrs)
	produce(t, prod, orderRecord(t, topic, 0, 0), orderRecord(t, topic, 0, 1))
	st := newStore(t)
	b := newBlocker(orderID(1))
	// A commit interval longer than the test: only a revoke (or a loss
	// treated as one) commits.
	opts := &dedupfranz.Options{DropPoison: true, CommitInterval: time.Hour}
	c, err := dedupfranz.NewConsumer(clientOpts(addrs), "g-lost", []string{topic}, newReceiver(t, st, "lost", b.handle), opts)
	require.NoError(t, err)
	var evs events
	dedupfranz.OnRebalance(c, evs.record)
	start(t, c)
	waitFor(t, b.started, 10*time.Second, "the blocked handler") // order 0 is done, its watermark not committed
	member, _ := dedupfranz.Client(c).GroupMetadata()
	cluster.ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
		resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = kerr.UnknownMemberID.Code
		return resp, nil, true
	})
	var lost event
	eventually(t, 10*time.Second, func() bool {
		var ok bool
		lost, ok = evs.first("lost", topic)
		return ok
	}, "the partition lost")
	close(b.release)
	// Rejoined, the member reads the partition again from the start: its
	// orders are duplicates.
	eventually(t, 15*time.Second, func() bool { return c.Stats().Delivered >= 4 }, "the partition read again after the rejoin")
	require.Empty(t, log.by(member, 0, lost.at), "the member committed a partition it lost")
	require.Equal(t, 1, b.fx.Count(orderID(0)))
	require.Equal(t, 1, b.fx.Count(orderID(1)))
}

// TestPauseOnePartition: while partition 0 waits on a key held elsewhere
// (another process's claim, under a live lease), it is paused alone: its
// buffer stays bounded, and partition 1 is read to its end. Once the key
// is released, partition 0 goes on, in order.
func TestPauseOnePartition(t *testing.T) {
	const topic = "pause"
	cluster := startCluster(t, 2, topic)
	addrs := cluster.ListenAddrs()
	prod := newProducer(t, addrs)
	st := newStore(t)
	// The holder: another receiver on the same store and namespace whose
	// handler holds order 0 until released.
	holder := newBlocker(orderID(0))
	hrcv := newReceiver(t, st, "pause", holder.handle)
	held := make(chan error, 1)
	go func() {
		_, err := hrcv.Handle(context.Background(), &dedup.Message[Order]{Body: Order{ID: orderID(0)}})
		held <- err
	}()
	waitFor(t, holder.started, 5*time.Second, "the holder's claim")
	const n0, n1 = 100, 300
	for i := 0; i < n0; i += 10 { // small record batches, so that a fetch holds a few
		var rs []*kgo.Record
		for j := i; j < i+10; j++ {
			rs = append(rs, &kgo.Record{Topic: topic, Partition: 0, Value: orderJSON(t, Order{ID: orderID(j)})})
		}
		produce(t, prod, rs...)
	}
	var rs []*kgo.Record
	for i := range n1 {
		rs = append(rs, &kgo.Record{Topic: topic, Partition: 1, Value: orderJSON(t, Order{ID: fmt.Sprintf("p1-%05d", i)})})
	}
	produce(t, prod, rs...)

	fx := newEffects()
	c, err := dedupfranz.NewConsumer(clientOpts(addrs, kgo.FetchMaxPartitionBytes(1024)), "g-pause", []string{topic},
		newReceiver(t, st, "pause", func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
			fx.add(m.Partition, m.Body.ID)
			return Receipt{OrderID: m.Body.ID}, nil
		}), &dedupfranz.Options{DropPoison: true, PartitionBuffer: 8, CommitInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	start(t, c)
	maxBuffered := 0
	eventually(t, 20*time.Second, func() bool {
		maxBuffered = max(maxBuffered, dedupfranz.Buffered(c, topic, 0))
		return len(fx.order(1)) == n1
	}, "partition 1 read to its end while partition 0 waits")
	require.Empty(t, fx.order(0), "partition 0 went past a key held elsewhere")
	paused := dedupfranz.Client(c).PauseFetchPartitions(nil)
	require.Equal(t, []int32{0}, paused[topic], "partitions paused")
	require.LessOrEqual(t, maxBuffered, 60, "records buffered for the waiting partition")

	close(holder.release)
	require.NoError(t, waitFor(t, held, 5*time.Second, "the holder"))
	eventually(t, 20*time.Second, func() bool { return len(fx.order(0)) == n0-1 }, "partition 0 read to its end")
	for i, id := range fx.order(0) {
		require.Equal(t, orderID(i+1), id, "partition 0's order")
	}
	eventually(t, 5*time.Second, func() bool { return len(dedupfranz.Client(c).PauseFetchPartitions(nil)) == 0 }, "partition 0 resumed")
	eventually(t, 10*time.Second, func() bool {
		offs, err := committed(context.Background(), addrs, "g-pause", topic, 2)
		return err == nil && offs[0] == n0 && offs[1] == n1
	}, "both partitions committed to their end")
}

// TestStaticMembership: a member with a kgo.InstanceID that restarts
// within the session timeout gets its partitions back without a
// rebalance: the other member hears no revoke and no assignment.
func TestStaticMembership(t *testing.T) {
	const topic = "static"
	cluster := startCluster(t, 4, topic)
	addrs := cluster.ListenAddrs()
	st := newStore(t)
	ok := func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
		return Receipt{OrderID: m.Body.ID}, nil
	}
	newMember := func(id string) *dedupfranz.Consumer[Order, Receipt] {
		c, err := dedupfranz.NewConsumer(clientOpts(addrs, kgo.InstanceID(id), kgo.SessionTimeout(5*time.Second)), "g-static", []string{topic},
			newReceiver(t, st, "static", ok), &dedupfranz.Options{DropPoison: true})
		require.NoError(t, err)
		return c
	}
	a, b := newMember("a"), newMember("b")
	var aEvents, bEvents events
	dedupfranz.OnRebalance(a, aEvents.record)
	dedupfranz.OnRebalance(b, bEvents.record)
	start(t, a)
	start(t, b)
	// The group settles with two partitions each.
	owned := func(e *events) int {
		e.mu.Lock()
		defer e.mu.Unlock()
		n := 0
		for _, ev := range e.all {
			switch ev.name {
			case "assigned":
				n += len(ev.parts[topic])
			case "revoked", "lost":
				n -= len(ev.parts[topic])
			}
		}
		return n
	}
	eventually(t, 20*time.Second, func() bool { return owned(&aEvents) == 2 && owned(&bEvents) == 2 }, "two partitions each")
	aEvents.mu.Lock()
	settled := len(aEvents.all)
	aEvents.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, b.Stop(ctx)) // a static member leaves nothing: no LeaveGroup
	b2 := newMember("b")
	var b2Events events
	dedupfranz.OnRebalance(b2, b2Events.record)
	start(t, b2)
	eventually(t, 10*time.Second, func() bool { return owned(&b2Events) == 2 }, "the restarted member's partitions back")
	aEvents.mu.Lock()
	after := slices.Clone(aEvents.all[settled:])
	aEvents.mu.Unlock()
	var names []string
	for _, ev := range after {
		if len(ev.parts[topic]) > 0 {
			names = append(names, ev.name)
		}
	}
	require.Empty(t, names, "the other member's callbacks during the restart")
}
