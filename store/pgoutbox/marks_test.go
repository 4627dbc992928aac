package pgoutbox_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/outbox"
	"github.com/dedup-go/dedup/store/pgoutbox"
	"github.com/dedup-go/dedup/store/pgoutbox/internal/relaytest"
)

// tagged is a relay's view of a checkingPublisher shared by several: it
// records what this relay published.
type tagged struct {
	*checkingPublisher
	mu  sync.Mutex
	ids []string
}

func (p *tagged) Publish(ctx context.Context, msgs []outbox.Message) error {
	p.mu.Lock()
	for _, m := range msgs {
		p.ids = append(p.ids, m.ID)
	}
	p.mu.Unlock()
	return p.checkingPublisher.Publish(ctx, msgs)
}

func (p *tagged) published() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.ids)
}

// TestRelayMarkFails: a mark fails (a trigger refuses the first
// statement that deletes rows, naming them); the relay reports it and
// backs off, and the messages it would have marked, and only those, are
// published again (the copies a crash between the acknowledgement and
// the mark leaves), in their keys' order, then marked. Nothing is lost.
//
// Which messages the first mark holds depends on timing: a relay reads
// its next batch while it publishes the last one, and marks what was
// acknowledged by then with whichever fetch comes next. So the trigger
// names the rows of the failed mark, rather than the test assuming they
// are those of the first batch.
func TestRelayMarkFails(t *testing.T) {
	t.Parallel()
	db := relaytest.NewDB(t, 8)
	ob := db.Outbox(t, &pgoutbox.Options{Buckets: 2})
	table := db.Table("dedup_outbox")
	db.Exec(t, `CREATE SEQUENCE `+db.Table("marks")+`;
CREATE FUNCTION `+db.Table("refuse_first_mark")+`() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE ids text;
BEGIN
	SELECT string_agg(id, ',' ORDER BY seq) INTO ids FROM gone;
	IF ids IS NOT NULL AND nextval('`+db.Table("marks")+`') = 1 THEN
		RAISE EXCEPTION 'the first mark is refused: [%]', ids;
	END IF;
	RETURN NULL;
END $$;
CREATE TRIGGER refuse_first_mark AFTER DELETE ON `+table+` REFERENCING OLD TABLE AS gone
FOR EACH STATEMENT EXECUTE FUNCTION `+db.Table("refuse_first_mark")+`()`)
	order := relaytest.WriteKeyed(t, relaytest.Writer{DB: db, OB: ob}, relaytest.KeysN(4), 10, func(string, int) string { return "orders.events" })
	pub := &tagged{checkingPublisher: newCheckingPublisher(order, 0, nil)}
	ev := &relaytest.Events{}
	r := relaytest.NewRelay(t, ob, pub, &pgoutbox.RelayOptions{BatchSize: 8, Lease: 5 * time.Second, MinBackoff: 10 * time.Millisecond, Observer: ev})
	relaytest.Start(t, r)
	relaytest.WaitFor(t, testenv.WaitTimeout, "every message sent", func() bool { return db.Unsent(t) == 0 })
	pub.check(t)
	marks := ev.Of(outbox.EventFailed, "mark")
	require.Len(t, marks, 1)
	require.Positive(t, marks[0].Messages)
	require.Positive(t, marks[0].Backoff)
	require.ErrorContains(t, marks[0].Err, "the first mark is refused")
	named := regexp.MustCompile(`the first mark is refused: \[([^\]]*)\]`).FindStringSubmatch(marks[0].Err.Error())
	require.NotNil(t, named, "the refused rows' ids in %q", marks[0].Err)
	refused := strings.Split(named[1], ",")
	require.Len(t, refused, marks[0].Messages, "the failed mark's rows, as the relay counts them")
	slices.Sort(refused)
	require.Equal(t, refused, pub.copies(), "the messages of the failed mark, and only those, published again")

	// The copies of each key went out in the key's order.
	keyOf, position := map[string]string{}, map[string]int{}
	for k, ids := range order {
		for i, id := range ids {
			keyOf[id], position[id] = k, i
		}
	}
	seen, last := map[string]int{}, map[string]int{}
	for _, id := range pub.published() {
		if seen[id]++; seen[id] != 2 {
			continue
		}
		k := keyOf[id]
		if p, ok := last[k]; ok {
			require.Greater(t, position[id], p, "key %s: the copy of its message %d went out after that of a later one", k, position[id])
		}
		last[k] = position[id]
	}
	relaytest.WaitFor(t, testenv.WaitTimeout, "every mark counted", func() bool { return r.Stats().Published == 40 })
}

// TestRelayMarkHeldPastLease: a relay's mark is held up (another
// transaction locks the rows) for longer than its lease; the relay has
// published what it had read by then. Another relay takes the bucket and
// publishes the key from its first unsent message: copies of what the
// first published, then on; its own mark waits too. Once the lock is
// gone, the first relay's mark commits, but the fetch that goes with it
// finds its lease gone: it publishes nothing more, and finds the lease
// lost. Every message is published in its key's order, the copies after
// their first.
func TestRelayMarkHeldPastLease(t *testing.T) {
	t.Parallel()
	db := relaytest.NewDB(t, 8)
	ob := db.Outbox(t, &pgoutbox.Options{Buckets: 1, Timeout: 20 * time.Second})
	order := relaytest.WriteKeyed(t, relaytest.Writer{DB: db, OB: ob}, relaytest.KeysN(1), 100, func(string, int) string { return "orders.events" })
	ids := order["key-00"]
	check := newCheckingPublisher(order, 0, nil)
	pubA, pubB := &tagged{checkingPublisher: check}, &tagged{checkingPublisher: check}
	opts := func(ev *relaytest.Events) *pgoutbox.RelayOptions {
		return &pgoutbox.RelayOptions{BatchSize: 10, Lease: 600 * time.Millisecond, PollInterval: 50 * time.Millisecond, Observer: ev}
	}

	// Lock the rows: the relays' marks wait.
	tx, err := db.Pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(t.Context(), "SELECT FROM "+db.Table("dedup_outbox")+" FOR UPDATE")
	require.NoError(t, err)

	evA, evB := &relaytest.Events{}, &relaytest.Events{}
	a := relaytest.NewRelay(t, ob, pubA, opts(evA))
	relaytest.Start(t, a)
	relaytest.WaitFor(t, testenv.WaitTimeout, "the first relay to publish", func() bool { return len(pubA.published()) >= 10 })
	b := relaytest.NewRelay(t, ob, pubB, opts(evB))
	relaytest.Start(t, b)
	// The first relay published what it had read before its mark
	// blocked; the second takes the bucket once the first's lease ran
	// out, and publishes again from the key's first message, until its
	// own mark blocks.
	relaytest.WaitFor(t, testenv.WaitTimeout, "the second relay to publish", func() bool { return len(pubB.published()) >= 10 })
	byA := pubA.published()
	require.Less(t, len(byA), len(ids), "the first relay had messages left to read")
	require.Equal(t, ids[:len(byA)], byA, "the first relay, in order")
	require.Equal(t, ids[:10], pubB.published()[:10], "the second, from the key's first unsent message")
	require.NoError(t, tx.Rollback(t.Context()))

	relaytest.WaitFor(t, testenv.WaitTimeout, "every message sent", func() bool { return db.Unsent(t) == 0 })
	relaytest.WaitFor(t, testenv.WaitTimeout, "the first relay to find its lease lost", func() bool {
		for _, e := range evA.Of(outbox.EventLeases, "") {
			if slices.Equal(e.Lost, []int{0}) {
				return true
			}
		}
		return false
	})
	check.check(t)
	require.Equal(t, byA, pubA.published(), "the first relay published nothing after its lease ran out")
	require.Equal(t, uint64(len(byA)), a.Stats().Published, "its held mark committed")
	copies := check.copies()
	require.Subset(t, byA, copies, "copies of what the first relay published only")
}

// TestRelayRenewsWhileBusy: a relay publishing a backlog that takes
// longer than its lease stops reading at each renewal, renews, and reads
// on: its lease never runs out while it is busy, and it publishes every
// message once.
func TestRelayRenewsWhileBusy(t *testing.T) {
	t.Parallel()
	db := relaytest.NewDB(t, 8)
	ob := db.Outbox(t, &pgoutbox.Options{Buckets: 1})
	w := relaytest.Writer{DB: db, OB: ob}
	order := map[string][]string{}
	for n := range 100 {
		var msgs []pgoutbox.Message
		for _, k := range relaytest.KeysN(5) {
			msgs = append(msgs, pgoutbox.Message{Name: k, Destination: "orders.events", OrderingKey: k, Body: []byte(k)})
		}
		ids, err := w.Write(t.Context(), fmt.Sprintf("order:%d", n), msgs...)
		require.NoError(t, err)
		for i, k := range relaytest.KeysN(5) {
			order[k] = append(order[k], ids[i])
		}
	}
	// Each key's 100 messages one after the other, 10ms each: a second
	// at least, against a lease of 600ms.
	pub := newCheckingPublisher(order, 0, nil)
	slow := publisherFunc(func(ctx context.Context, msgs []outbox.Message) error {
		time.Sleep(10 * time.Millisecond)
		return pub.Publish(ctx, msgs)
	})
	ev := &relaytest.Events{}
	r := relaytest.NewRelay(t, ob, slow, &pgoutbox.RelayOptions{BatchSize: 32, Lease: 600 * time.Millisecond, Observer: ev})
	relaytest.Start(t, r)
	leases := db.Table("dedup_outbox_leases")
	lapsed := 0
	relaytest.WaitFor(t, testenv.WaitTimeout, "every message sent", func() bool {
		if db.Count(t, "SELECT count(*) FROM "+leases+" WHERE owner IS NOT NULL AND lease_until < clock_timestamp()") > 0 {
			lapsed++
		}
		return db.Unsent(t) == 0
	})
	pub.check(t)
	require.Zero(t, lapsed, "polls that found the busy relay's lease run out")
	require.Empty(t, pub.copies())
	for _, e := range ev.Of(outbox.EventLeases, "") {
		require.Empty(t, e.Lost)
	}
}
