package e2e_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/outbox"
	"github.com/dedup-go/dedup/store/pgoutbox"
	"github.com/dedup-go/dedup/store/pgoutbox/internal/relaytest"
)

// freezing is a publisher whose process stops, as a paused VM or a long
// garbage collection would, in its freezeAt-th Publish: until thawed, and
// then it publishes what it held, with a fresh context (the worst case: a
// publish already on its way when the process stopped).
type freezing struct {
	outbox.Publisher
	freezeAt int

	mu     sync.Mutex
	calls  int
	acked  int      // calls that succeeded before the freeze
	sent   []string // their ids
	held   []string // the ids of the publish that froze
	frozen chan struct{}
	thaw   chan struct{}
}

func (f *freezing) Publish(ctx context.Context, msgs []outbox.Message) error {
	f.mu.Lock()
	f.calls++
	n := f.calls
	f.mu.Unlock()
	if n != f.freezeAt {
		err := f.Publisher.Publish(ctx, msgs)
		f.mu.Lock()
		if err == nil && n < f.freezeAt {
			f.acked++
			for _, m := range msgs {
				f.sent = append(f.sent, m.ID)
			}
		}
		f.mu.Unlock()
		return err
	}
	for _, m := range msgs {
		f.held = append(f.held, m.ID)
	}
	close(f.frozen)
	<-f.thaw
	fresh, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return f.Publisher.Publish(fresh, msgs)
}

// TestRelayLeaseLost: a relay stops in the middle of a publish for longer
// than its lease; another relay takes its bucket and publishes the key's
// messages, the one in flight included. When the first resumes, its
// publish goes out as a copy with the same id (the stream here keeps
// copies: its duplicate window is 100ms, the least JetStream takes, so
// the next consumer's dedup is what absorbs it), it finds its lease lost
// and publishes nothing more. Nothing is lost, and the first copies keep
// the key's order.
//
// What the first relay had acknowledged before the freeze may be
// published again too: a relay marks with its next fetch, and a pump that
// has read every message (the rest of the key waits behind the frozen
// call) fetches no more until that call returns. Whether a fetch carried
// the marks before the freeze depends on timing, so the test allows a
// copy of each acknowledged message, and no other.
func TestRelayLeaseLost(t *testing.T) {
	t.Parallel()
	db := relaytest.NewDB(t, 8)
	ob := db.Outbox(t, &pgoutbox.Options{Buckets: 1})
	_, js := natsConn(t, testenv.NATS.Addr(t))
	out := newOutStream(t, js, jetstream.MemoryStorage, 100*time.Millisecond)
	opts := func(ev *relaytest.Events) *pgoutbox.RelayOptions {
		return &pgoutbox.RelayOptions{BatchSize: 1, Lease: 1200 * time.Millisecond, PollInterval: 50 * time.Millisecond,
			MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, Observer: ev}
	}
	w := relaytest.Writer{DB: db, OB: ob}
	write := func(from, to int) {
		for n := from; n < to; n++ {
			_, err := w.Write(t.Context(), fmt.Sprintf("order:%d", n), out.keyed("k", n))
			require.NoError(t, err)
		}
	}
	write(0, 10)
	fr := &freezing{Publisher: jsPublisher(t, js), freezeAt: 3, frozen: make(chan struct{}), thaw: make(chan struct{})}
	var thawOnce sync.Once
	thaw := func() { thawOnce.Do(func() { close(fr.thaw) }) }
	evA, evB := &relaytest.Events{}, &relaytest.Events{}
	a := relaytest.NewRelay(t, ob, fr, opts(evA))
	relaytest.Start(t, a)
	t.Cleanup(thaw) // runs before the relay's stop, which waits for its publish
	testenv.Recv(t, fr.frozen, "the first relay to freeze")
	// One key: the frozen call holds back everything after it. What was
	// acknowledged before is marked with a fetch (which counts once it
	// committed, maybe during the freeze).
	fr.mu.Lock()
	acked := uint64(fr.acked)
	fr.mu.Unlock()
	require.Equal(t, uint64(2), acked)
	fr.mu.Lock()
	sent := slices.Clone(fr.sent)
	fr.mu.Unlock()
	unmarkedAtStart := db.Count(t, "SELECT count(*) FROM "+db.Table("dedup_outbox")+" WHERE id = ANY($1)", sent)

	b := relaytest.NewRelay(t, ob, jsPublisher(t, js), opts(evB))
	relaytest.Start(t, b)
	write(10, 20)
	relaytest.WaitFor(t, testenv.WaitTimeout, "the second relay to send everything", func() bool { return db.Unsent(t) == 0 })
	fr.mu.Lock()
	require.Equal(t, fr.freezeAt, fr.calls, "no call of the first relay while frozen")
	fr.mu.Unlock()
	// Past the stream's duplicate window, so that the copy stays in it.
	time.Sleep(200 * time.Millisecond)
	thaw()
	relaytest.WaitFor(t, testenv.WaitTimeout, "the first relay to find its lease lost", func() bool {
		for _, e := range evA.Of(outbox.EventLeases, "") {
			if slices.Equal(e.Lost, []int{0}) {
				return true
			}
		}
		return false
	})
	require.Equal(t, acked+uint64(len(fr.held)), a.Stats().Published, "what was acknowledged was marked, the publish in flight too, and nothing after it")
	write(20, 25)
	relaytest.WaitFor(t, testenv.WaitTimeout, "the rest sent", func() bool { return db.Unsent(t) == 0 })

	msgs := out.read(t)
	requireKeyOrder(t, msgs, map[string]int{"k": 25})
	copies := map[string]int{}
	for _, m := range msgs {
		copies[m.id]++
	}
	fr.mu.Lock()
	defer fr.mu.Unlock()
	require.Len(t, fr.held, 1)
	require.Equal(t, 2, copies[fr.held[0]], "the stale publish is a second copy, with the same id")
	unmarked := 0 // acknowledged by the first relay, and published again by the second
	for id, n := range copies {
		if n == 1 || id == fr.held[0] {
			continue
		}
		require.Contains(t, fr.sent, id, "a copy of a message the first relay had not acknowledged")
		require.Equal(t, 2, n, "copies of message %s", id)
		unmarked++
	}
	t.Logf("of the %d messages the first relay had acknowledged before the freeze, %d were unmarked when the second relay started, %d published again",
		len(sent), unmarkedAtStart, unmarked)
	require.Len(t, msgs, 26+unmarked, "one copy more, and one of each acknowledged message found unmarked")
	var acquired []int
	for _, e := range evB.Of(outbox.EventLeases, "") {
		acquired = append(acquired, e.Acquired...)
	}
	require.Contains(t, acquired, 0, "the second relay took the bucket")
}
