package pgoutbox_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/outbox"
	"github.com/dedup-go/dedup/store/pgoutbox"
	"github.com/dedup-go/dedup/store/pgoutbox/internal/relaytest"
)

// checkingPublisher acknowledges what a relay hands it, after a pause of
// up to maxPause, refusing some messages, and checks the relay's promise
// on the way in: no call holds two messages of one ordering key, and a
// message comes only once every earlier message of its key was
// acknowledged or refused for good (by a call that returned before).
type checkingPublisher struct {
	order    map[string][]string // ordering key: its ids, in writing order
	maxPause time.Duration
	// refuse says how a publish of id fails: nil (acknowledged), a
	// transient error or one matching outbox.ErrPermanent; n counts the
	// publishes of id so far, this one included.
	refuse func(id string, n int) error

	mu         sync.Mutex
	index      map[string][2]any // id: its key, and its position in the key's list
	resolved   map[string]bool   // acknowledged, or refused for good
	acked      map[string]bool
	dead       map[string]bool
	published  map[string]int // publishes per id
	calls      int
	violations []string
}

func newCheckingPublisher(order map[string][]string, maxPause time.Duration, refuse func(string, int) error) *checkingPublisher {
	p := &checkingPublisher{order: order, maxPause: maxPause, refuse: refuse, index: map[string][2]any{},
		resolved: map[string]bool{}, acked: map[string]bool{}, dead: map[string]bool{}, published: map[string]int{}}
	for k, ids := range order {
		for i, id := range ids {
			p.index[id] = [2]any{k, i}
		}
	}
	return p
}

func (p *checkingPublisher) Publish(ctx context.Context, msgs []outbox.Message) error {
	counts := p.enter(msgs)
	if p.maxPause > 0 {
		select {
		case <-time.After(rand.N(p.maxPause)):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	errs := make([]error, len(msgs))
	failed := false
	for i, m := range msgs {
		if errs[i] = p.outcome(m, counts[i]); errs[i] != nil {
			failed = true
		}
	}
	if failed {
		return &outbox.BatchError{Errs: errs}
	}
	return nil
}

// enter records a call's messages and checks the relay's promise: no two
// messages of a key in it, each only once every earlier message of its
// key was resolved. It returns each message's count of publishes.
func (p *checkingPublisher) enter(msgs []outbox.Message) []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	inCall := map[string]bool{}
	counts := make([]int, len(msgs))
	for i, m := range msgs {
		p.published[m.ID]++
		counts[i] = p.published[m.ID]
		if m.OrderingKey == "" {
			continue
		}
		if inCall[m.OrderingKey] {
			p.violations = append(p.violations, fmt.Sprintf("two messages of key %s in one call", m.OrderingKey))
		}
		inCall[m.OrderingKey] = true
		at := p.index[m.ID]
		for _, earlier := range p.order[m.OrderingKey][:at[1].(int)] {
			if !p.resolved[earlier] {
				p.violations = append(p.violations, fmt.Sprintf("key %s: %s handed over before %s was acknowledged", m.OrderingKey, m.ID, earlier))
				break
			}
		}
	}
	return counts
}

// outcome decides how m's publish (its n-th) ends, and records it.
func (p *checkingPublisher) outcome(m outbox.Message, n int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var err error
	if p.refuse != nil {
		err = p.refuse(m.ID, n)
	}
	switch {
	case err == nil:
		p.resolved[m.ID], p.acked[m.ID] = true, true
	case isPermanent(err):
		p.resolved[m.ID], p.dead[m.ID] = true, true
	}
	return err
}

// eachPublisher is a checkingPublisher that is an outbox.AckPublisher:
// it reports each message of a call on its own, in an order of its own
// (shuffled), after a pause of up to maxPause each, so that a message is
// often acknowledged while others of its call wait.
type eachPublisher struct{ *checkingPublisher }

var _ outbox.AckPublisher = eachPublisher{}

func (p eachPublisher) PublishEach(ctx context.Context, msgs []outbox.Message, ack func(int, error)) error {
	counts := p.enter(msgs)
	for _, i := range rand.Perm(len(msgs)) {
		if p.maxPause > 0 {
			select {
			case <-time.After(rand.N(p.maxPause)):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		ack(i, p.outcome(msgs[i], counts[i]))
	}
	return nil
}

// copies returns the ids published more than once.
func (p *checkingPublisher) copies() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for id, n := range p.published {
		if n > 1 {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

func (p *checkingPublisher) check(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	require.Empty(t, p.violations)
}

// TestRelayPipelineOrder: three relays on a backlog of 24 keys, with a
// publisher that answers after random pauses, fails some messages for a
// while and refuses some for good. A message is handed over only once
// every earlier message of its key was acknowledged or refused for good,
// never with another of its key in one call, however the calls in
// flight return; in the end every message is acknowledged or set aside as
// dead, and nothing is left in the outbox.
func TestRelayPipelineOrder(t *testing.T) {
	t.Parallel()
	for _, each := range []bool{false, true} {
		t.Run(fmt.Sprintf("each=%v", each), func(t *testing.T) {
			t.Parallel()
			testPipelineOrder(t, each)
		})
	}
}

// testPipelineOrder is TestRelayPipelineOrder, with a publisher that
// reports each message's acknowledgement on its own, out of order (each),
// or one that answers call by call.
func testPipelineOrder(t *testing.T, each bool) {
	db := relaytest.NewDB(t, 16)
	ob := db.Outbox(t, &pgoutbox.Options{Buckets: 6})
	order := relaytest.WriteKeyed(t, relaytest.Writer{DB: db, OB: ob}, relaytest.KeysN(24), 25, func(string, int) string { return "orders.events" })
	refused := map[string]bool{}
	flaky := map[string]bool{}
	for _, ids := range order {
		for _, id := range ids {
			switch rand.IntN(40) {
			case 0:
				refused[id] = true
			case 1, 2:
				flaky[id] = true
			}
		}
	}
	pub := newCheckingPublisher(order, 3*time.Millisecond, func(id string, n int) error {
		switch {
		case refused[id]:
			return outbox.Permanent(fmt.Errorf("message %s: too large", id))
		case flaky[id] && n < 3:
			return fmt.Errorf("message %s: no responders", id)
		}
		return nil
	})
	opts := &pgoutbox.RelayOptions{BatchSize: 40, Lease: 900 * time.Millisecond, PollInterval: 50 * time.Millisecond,
		MinBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}
	var through outbox.Publisher = pub
	if each {
		through = eachPublisher{pub}
	}
	for range 3 {
		relaytest.Start(t, relaytest.NewRelay(t, ob, through, opts))
	}
	relaytest.WaitFor(t, testenv.WaitTimeout, "every message acknowledged or dead", func() bool { return db.Unsent(t) == 0 })
	pub.check(t)
	pub.mu.Lock()
	defer pub.mu.Unlock()
	for _, ids := range order {
		for _, id := range ids {
			require.True(t, pub.acked[id] != refused[id], "message %s: acknowledged %v, refused for good %v", id, pub.acked[id], refused[id])
		}
	}
	require.Equal(t, len(refused), db.Count(t, "SELECT count(*) FROM "+db.Table("dedup_outbox_dead")))
	t.Logf("%d calls, %d refused for good, %d failing twice", pub.calls, len(refused), len(flaky))
}

// TestRelayNoCopies: one relay through a backlog, its marks in flight
// while it publishes the next batches: every message is published once.
// The mark goes with the next fetch, in its transaction, so the fetch
// never reads what was just acknowledged.
func TestRelayNoCopies(t *testing.T) {
	t.Parallel()
	for _, each := range []bool{false, true} {
		t.Run(fmt.Sprintf("each=%v", each), func(t *testing.T) {
			t.Parallel()
			testNoCopies(t, each)
		})
	}
}

func testNoCopies(t *testing.T, each bool) {
	db := relaytest.NewDB(t, 8)
	ob := db.Outbox(t, &pgoutbox.Options{Buckets: 4})
	order := relaytest.WriteKeyed(t, relaytest.Writer{DB: db, OB: ob}, relaytest.KeysN(30), 20, func(string, int) string { return "orders.events" })
	pub := newCheckingPublisher(order, time.Millisecond, nil)
	var through outbox.Publisher = pub
	if each {
		through = eachPublisher{pub}
	}
	r := relaytest.NewRelay(t, ob, through, &pgoutbox.RelayOptions{BatchSize: 32, Lease: 5 * time.Second})
	relaytest.Start(t, r)
	relaytest.WaitFor(t, testenv.WaitTimeout, "every message sent", func() bool { return db.Unsent(t) == 0 })
	pub.check(t)
	require.Empty(t, pub.copies(), "published twice")
	relaytest.WaitFor(t, testenv.WaitTimeout, "every mark counted", func() bool { return r.Stats().Published == 600 })
}
