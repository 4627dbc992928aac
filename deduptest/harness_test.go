package deduptest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/deduptest"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/memstore"
)

// payment is the message of these tests.
type payment struct {
	ID     string
	Amount int
	// SentAt is when the producer sent the payment: zero, but for a
	// producer that stamps every send (TestDetectsKeyDiffers).
	SentAt time.Time `json:",omitzero"`
}

// receipt is what a payment handler returns.
type receipt struct {
	ID     string
	Amount int
	Note   string `json:"-"` // not stored: a duplicate gets it empty
}

const lease = 10 * time.Second

// rig is a receiver over a FaultStore over memstore, on a fake clock.
type rig struct {
	clk     *clock.Fake
	faults  *deduptest.FaultStore
	effects *deduptest.Effects
}

func newRig(t *testing.T, faults ...deduptest.Fault) *rig {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	mem, err := memstore.New(&memstore.Options{Clock: clk})
	require.NoError(t, err)
	fs, err := deduptest.NewFaultStore(mem, 1, faults...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = fs.Close() })
	return &rig{clk: clk, faults: fs, effects: new(deduptest.Effects)}
}

func paymentID(p payment) (string, error) { return p.ID, nil }

func (g *rig) receiver(t *testing.T, h dedup.Handler[payment, receipt]) *dedup.Receiver[payment, receipt] {
	t.Helper()
	rcv, err := g.newReceiver(paymentID, h)
	require.NoError(t, err)
	return rcv
}

func (g *rig) newReceiver(key dedup.KeyFunc[payment], h dedup.Handler[payment, receipt]) (*dedup.Receiver[payment, receipt], error) {
	return dedup.NewReceiver(g.faults, key, h, &dedup.Config{
		Namespace:    "pay",
		Lease:        lease,
		Clock:        g.clk,
		StoreTimeout: 50 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
}

// replicas is a service of h whose processes share the rig's store (Run
// builds two by default).
func (g *rig) replicas(h dedup.Handler[payment, receipt]) deduptest.Target[payment, receipt] {
	return deduptest.Replicas(func(int) (deduptest.Target[payment, receipt], error) { return bind(g.newReceiver(paymentID, h)) })
}

func (g *rig) opts() *deduptest.Options[payment] {
	return &deduptest.Options[payment]{
		ID:      func(p payment) string { return p.ID },
		Effects: g.effects.Count,
		Lease:   lease,
		Timeout: 10 * time.Second,
		Seed:    7,
		Faults:  []*deduptest.FaultStore{g.faults},
	}
}

func payments(n int) []payment {
	out := make([]payment, n)
	for i := range out {
		out[i] = payment{ID: fmt.Sprintf("p%d", i), Amount: 10 * (i + 1)}
	}
	return out
}

func run(t *testing.T, g *rig, target deduptest.Target[payment, receipt], msgs []payment, o *deduptest.Options[payment]) *deduptest.Report[receipt] {
	t.Helper()
	rep, err := deduptest.Run(context.Background(), g.clk, target, msgs, o)
	require.NoError(t, err)
	return rep
}

// The reference: a handler whose effect is its last step runs each
// message once, every copy is acknowledged and every duplicate replays
// the first result.
func TestSafeHandlerPasses(t *testing.T) {
	t.Parallel()
	g := newRig(t)
	var mu sync.Mutex
	failed := map[string]bool{}
	rcv := g.receiver(t, func(ctx context.Context, p payment) (receipt, error) {
		mu.Lock()
		first := !failed[p.ID]
		failed[p.ID] = true
		mu.Unlock()
		if first { // a step that fails once, before the effect
			return receipt{}, errors.New("fraud check unavailable")
		}
		g.effects.Record(p.ID)
		return receipt{ID: "r-" + p.ID, Amount: p.Amount}, nil
	})
	rep := run(t, g, adapter.Bind(rcv), payments(5), g.opts())
	require.True(t, rep.Check(t))
	for _, m := range rep.Messages {
		require.Equal(t, 3, m.Acked, m.ID)
		require.Equal(t, 1, m.Effects, m.ID)
		require.Equal(t, 2, m.Runs, m.ID) // one failure, one success
		for _, v := range m.Replayed() {
			require.Equal(t, "r-"+m.ID, v.ID)
		}
		require.Contains(t, m.Statuses(), delivery.StatusDuplicate)
		var retried bool
		for _, d := range m.Decisions() {
			retried = retried || d.Reason == delivery.ReasonHandlerError
		}
		require.True(t, retried, m.ID)
	}
}

// Seeded: the effect happens before a step that fails, so the retry
// repeats it.
func TestDetectsDoubleEffect(t *testing.T) {
	t.Parallel()
	g := newRig(t)
	var mu sync.Mutex
	failed := map[string]bool{}
	rcv := g.receiver(t, func(ctx context.Context, p payment) (receipt, error) {
		g.effects.Record(p.ID) // charged...
		mu.Lock()
		first := !failed[p.ID]
		failed[p.ID] = true
		mu.Unlock()
		if first {
			return receipt{}, errors.New("ledger write failed") // ...then failed
		}
		return receipt{ID: "r-" + p.ID}, nil
	})
	rep := run(t, g, adapter.Bind(rcv), payments(2), g.opts())
	require.Error(t, rep.Err())
	require.Len(t, rep.ProblemsOf(deduptest.DoubleEffect), 2, rep.String())
	p := rep.ProblemsOf(deduptest.DoubleEffect)[0]
	require.Contains(t, p.String(), "message p")
	require.Contains(t, p.Detail, "2 times")
	require.Contains(t, p.Detail, "failed after its effect")
	require.Equal(t, 2, rep.Message("p0").Effects)
	require.Len(t, rep.Problems, 2, rep.String()) // nothing else

	// Check fails the test it is given, naming the message.
	var ft fakeT
	require.False(t, rep.Check(&ft))
	require.Contains(t, ft.msgs[0], "message p0: double-effect")
}

// Seeded: a handler that acknowledges without doing its effect (a lost
// message), and an adapter that neither acknowledges nor dead-letters.
func TestDetectsLostMessage(t *testing.T) {
	t.Parallel()
	g := newRig(t)
	rcv := g.receiver(t, func(ctx context.Context, p payment) (receipt, error) {
		if p.ID != "p1" { // p1's effect is skipped
			g.effects.Record(p.ID)
		}
		return receipt{ID: "r-" + p.ID}, nil
	})
	rep := run(t, g, adapter.Bind(rcv), payments(3), g.opts())
	lost := rep.ProblemsOf(deduptest.NoEffect)
	require.Len(t, lost, 1, rep.String())
	require.Equal(t, "p1", lost[0].ID)
	require.Len(t, rep.Problems, 1, rep.String())

	// An adapter that drops p2's decision: never acked, never dead-lettered.
	g2 := newRig(t)
	rcv2 := g2.receiver(t, func(ctx context.Context, p payment) (receipt, error) {
		g2.effects.Record(p.ID)
		return receipt{ID: "r-" + p.ID}, nil
	})
	dropping := deduptest.TargetFunc[payment, receipt](func(ctx context.Context, p payment) adapter.Delivery[receipt] {
		d := adapter.Bind(rcv2).Deliver(ctx, p)
		if p.ID == "p2" {
			d.Decision = delivery.Decision{Action: delivery.Retry, Delay: time.Second}
		}
		return d
	})
	o := g2.opts()
	o.MaxDeliveries = 4
	rep = run(t, g2, dropping, payments(3), o)
	un := rep.ProblemsOf(deduptest.Unsettled)
	require.Len(t, un, 1, rep.String())
	require.Equal(t, "p2", un[0].ID)
	require.Contains(t, un[0].Detail, "3 of 3 copies")
	require.Equal(t, 12, len(rep.Message("p2").Deliveries))
}

// Seeded: the result carries a field the codec does not store, so a
// duplicate replays another result than the first.
func TestDetectsWrongReplay(t *testing.T) {
	t.Parallel()
	g := newRig(t)
	rcv := g.receiver(t, func(ctx context.Context, p payment) (receipt, error) {
		g.effects.Record(p.ID)
		return receipt{ID: "r-" + p.ID, Amount: p.Amount, Note: "approved"}, nil
	})
	o := g.opts()
	o.Workers = 1 // each duplicate reads the record, not the first delivery's flight
	rep := run(t, g, adapter.Bind(rcv), payments(2), o)
	wrong := rep.ProblemsOf(deduptest.WrongReplay)
	require.Len(t, wrong, 2, rep.String())
	require.Contains(t, wrong[0].Detail, "Note:approved")
	require.Len(t, rep.Problems, 2, rep.String())
}

// Seeded: a handler that goes on after its lease was lost (the store
// fails every Extend, so the lease runs out under its first run) does its
// effect a second time, once another process took the message over. Run's
// default, two replicas sharing the store, shows it: in one process the
// other copies wait for the first run instead of taking the key over.
func TestDetectsHandlerIgnoringLeaseLoss(t *testing.T) {
	t.Parallel()
	for _, honours := range []bool{true, false} {
		t.Run(fmt.Sprintf("honours=%v", honours), func(t *testing.T) {
			t.Parallel()
			g := newRig(t, deduptest.Fault{Op: deduptest.OpExtend, Kind: deduptest.Fail})
			var mu sync.Mutex
			ran := map[string]bool{}
			service := g.replicas(func(ctx context.Context, p payment) (receipt, error) {
				mu.Lock()
				first := !ran[p.ID]
				ran[p.ID] = true
				mu.Unlock()
				if first { // a slow first run: its lease runs out under it
					wait := ctx
					if !honours {
						// The point of this handler: it ignores its context,
						// waiting on the fake clock past its lost lease
						// (bounded in real time all the same).
						c, cancel := context.WithTimeout(context.WithoutCancel(ctx), testenv.WaitTimeout)
						defer cancel()
						wait = c
					}
					if err := deduptest.Sleep(wait, g.clk, 2*lease); err != nil {
						return receipt{}, err
					}
				}
				g.effects.Record(p.ID)
				return receipt{ID: "r-" + p.ID}, nil
			})
			rep := run(t, g, service, payments(1), g.opts()) // Options.Replicas left to its default
			require.Equal(t, 2, rep.Replicas)
			require.NotEmpty(t, g.faults.Injected())
			m := rep.Message("p0")
			require.Equal(t, 2, m.Runs, rep.String()) // the slow run, and the takeover
			replicas := map[int]bool{}
			for _, d := range m.Deliveries {
				replicas[d.Replica] = true
				require.Equal(t, d.Copy%2, d.Replica, "copy i goes to replica i mod 2")
			}
			require.Len(t, replicas, 2, rep.String())
			require.Contains(t, rep.String(), "copy 1 on replica 1: ")
			if honours {
				require.True(t, rep.Check(t))
				return
			}
			d := rep.ProblemsOf(deduptest.DoubleEffect)
			require.Len(t, d, 1, rep.String())
			require.Contains(t, d[0].Detail, "does it honour ctx?")
			require.Len(t, rep.Problems, 1, rep.String())
		})
	}
}

// Replicas: how many, what a replica that cannot be built does, and a
// plain Target, which is one process.
func TestReplicas(t *testing.T) {
	t.Parallel()
	g := newRig(t)
	h := func(ctx context.Context, p payment) (receipt, error) {
		g.effects.Record(p.ID)
		return receipt{ID: "r-" + p.ID}, nil
	}
	var built []int
	service := deduptest.Replicas(func(i int) (deduptest.Target[payment, receipt], error) {
		built = append(built, i)
		return bind(g.newReceiver(paymentID, h))
	})
	o := g.opts()
	o.Replicas, o.Copies = 3, 4
	rep := run(t, g, service, payments(2), o)
	require.True(t, rep.Check(t))
	require.Equal(t, []int{0, 1, 2}, built)
	require.Equal(t, 3, rep.Replicas)
	for _, d := range rep.Message("p1").Deliveries {
		require.Equal(t, d.Copy%3, d.Replica)
	}

	// Outside Run, the target delivers to replica 0.
	d := service.Deliver(t.Context(), payment{ID: "p0"})
	require.NoError(t, d.Err)
	require.Equal(t, delivery.StatusDuplicate, d.Result.Status)

	rcv := adapter.Bind(g.receiver(t, h))
	rep = run(t, g, rcv, payments(1), g.opts())
	require.Equal(t, 1, rep.Replicas, "a plain target is one process")
	require.NotContains(t, rep.String(), "replica")

	failing := errors.New("no database")
	_, err := deduptest.Run(t.Context(), g.clk, deduptest.Replicas(func(i int) (deduptest.Target[payment, receipt], error) {
		if i == 1 {
			return nil, failing
		}
		return bind(g.newReceiver(paymentID, h))
	}), payments(1), g.opts())
	require.ErrorIs(t, err, failing)
	require.ErrorContains(t, err, "replica 1")
	_, err = deduptest.Run(t.Context(), g.clk, deduptest.Replicas(func(int) (deduptest.Target[payment, receipt], error) { return nil, nil }), payments(1), g.opts())
	require.ErrorContains(t, err, "replica 0 is nil")
	o = g.opts()
	o.Replicas = 2
	_, err = deduptest.Run(t.Context(), g.clk, rcv, payments(1), o)
	require.ErrorContains(t, err, "one Target is one process")
}

// Seeded: a handler that blocks ignoring its context is reported stuck
// when the run ends, naming the message.
func TestDetectsHandlerIgnoringCancellation(t *testing.T) {
	t.Parallel()
	g := newRig(t)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	rcv := g.receiver(t, func(ctx context.Context, p payment) (receipt, error) {
		if p.ID == "p1" {
			<-release // ignores ctx
		}
		g.effects.Record(p.ID)
		return receipt{ID: "r-" + p.ID}, nil
	})
	o := g.opts()
	o.Timeout = 300 * time.Millisecond
	rep := run(t, g, adapter.Bind(rcv), payments(2), o)
	require.NotEmpty(t, rep.Ended)
	stuck := rep.ProblemsOf(deduptest.Stuck)
	require.NotEmpty(t, stuck, rep.String())
	for _, p := range stuck {
		require.Equal(t, "p1", p.ID)
	}
	require.True(t, strings.Contains(rep.String(), "does the handler honour ctx?"), rep.String())
	require.Empty(t, rep.Message("p0").Deliveries[0].Err)

	// The report leads with the cause: the handler that did not return,
	// then what it left behind (the copies waiting for it, unsettled).
	require.Len(t, rep.Problems, len(stuck)+1, rep.String())
	require.Equal(t, deduptest.Stuck, rep.Problems[0].Kind, rep.String())
	require.Contains(t, rep.Problems[0].Detail, "does the handler honour ctx?")
	last := rep.Problems[len(rep.Problems)-1]
	require.Equal(t, deduptest.Unsettled, last.Kind, rep.String())
	require.Contains(t, last.Detail, "behind a stuck delivery of this message")
	_, problems, _ := strings.Cut(rep.String(), "PROBLEM ")
	require.True(t, strings.HasPrefix(problems, "message p1: stuck: "), rep.String())
	var ft fakeT
	require.False(t, rep.Check(&ft))
	require.Contains(t, ft.msgs[0], "message p1: stuck: ")
}

// Seeded: the id strategy hashes a body that carries the producer's send
// time, and the producer sends the message again with a new one: the
// copies get different keys, each a new message to the receiver. The
// report names that, with two of the keys, whether effects are counted or
// not.
func TestDetectsKeyDiffers(t *testing.T) {
	t.Parallel()
	g := newRig(t)
	byContent := idstrategy.ContentHash(func(p payment) ([]byte, error) { return json.Marshal(p) })
	service := deduptest.Replicas(func(int) (deduptest.Target[payment, receipt], error) {
		return bind(g.newReceiver(byContent, func(ctx context.Context, p payment) (receipt, error) {
			g.effects.Record(p.ID)
			return receipt{ID: "r-" + p.ID}, nil
		}))
	})
	var sends atomic.Int64
	producer := deduptest.TargetFunc[payment, receipt](func(ctx context.Context, p payment) adapter.Delivery[receipt] {
		p.SentAt = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(sends.Add(1)) * time.Millisecond)
		return service.Deliver(ctx, p)
	})
	check := func(rep *deduptest.Report[receipt], counted bool) {
		t.Helper()
		kd := rep.ProblemsOf(deduptest.KeyDiffers)
		require.Len(t, kd, 2, rep.String())
		for i, p := range kd {
			require.Equal(t, fmt.Sprintf("p%d", i), p.ID)
			require.Contains(t, p.Detail, "copies of the message got different keys")
			require.Contains(t, p.Detail, "3 keys in all")
			keys := regexp.MustCompile(`"pay:sha256:[0-9a-f]{64}"`).FindAllString(p.Detail, -1)
			require.Len(t, keys, 2, p.Detail)
			require.NotEqual(t, keys[0], keys[1])
		}
		require.Equal(t, deduptest.KeyDiffers, rep.Problems[0].Kind, "the cause leads\n%s", rep)
		if !counted {
			require.Len(t, rep.Problems, 2, rep.String())
			return
		}
		de := rep.ProblemsOf(deduptest.DoubleEffect)
		require.Len(t, de, 2, rep.String())
		require.Contains(t, de[0].Detail, "its copies got different keys (see key-differs)")
		require.Len(t, rep.Problems, 4, rep.String())
	}
	check(run(t, g, producer, payments(2), g.opts()), true)

	o := g.opts()
	o.Effects = nil
	check(run(t, g, producer, []payment{{ID: "p0", Amount: 1}, {ID: "p1", Amount: 2}}, o), false)

	// The same producer with a key that leaves the send time out: no
	// problem.
	g2 := newRig(t)
	var sends2 atomic.Int64
	fixed := deduptest.Replicas(func(int) (deduptest.Target[payment, receipt], error) {
		return bind(g2.newReceiver(idstrategy.ContentHash(func(p payment) ([]byte, error) {
			p.SentAt = time.Time{}
			return json.Marshal(p)
		}), func(ctx context.Context, p payment) (receipt, error) {
			g2.effects.Record(p.ID)
			return receipt{ID: "r-" + p.ID}, nil
		}))
	})
	rep := run(t, g2, deduptest.TargetFunc[payment, receipt](func(ctx context.Context, p payment) adapter.Delivery[receipt] {
		p.SentAt = time.Unix(sends2.Add(1), 0)
		return fixed.Deliver(ctx, p)
	}), payments(2), g2.opts())
	require.True(t, rep.Check(t))
}

// Seeded: a worker crashes between the effect and the record (a Crash
// fault on the first completion); the redelivery after the lease repeats
// the effect of a handler that is not idempotent, and not of one that
// is.
func TestCrashAfterEffect(t *testing.T) {
	t.Parallel()
	for _, idempotent := range []bool{false, true} {
		t.Run(fmt.Sprintf("idempotent=%v", idempotent), func(t *testing.T) {
			t.Parallel()
			g := newRig(t, deduptest.Fault{Op: deduptest.OpComplete, Kind: deduptest.Crash, Key: "p0", Calls: []int{1}})
			var mu sync.Mutex
			charged := map[string]bool{} // the provider's idempotency keys
			rcv := g.receiver(t, func(ctx context.Context, p payment) (receipt, error) {
				mu.Lock()
				defer mu.Unlock()
				if !idempotent || !charged[p.ID] {
					g.effects.Record(p.ID)
				}
				charged[p.ID] = true
				return receipt{ID: "r-" + p.ID}, nil
			})
			rep := run(t, g, adapter.Bind(rcv), payments(2), g.opts())
			require.Len(t, g.faults.Injected(), 1)
			m := rep.Message("p0")
			require.Equal(t, 2, m.Runs, rep.String())
			require.Equal(t, 3, m.Acked, rep.String())
			// The crashed copy was not settled: it was delivered again.
			crashedAt := -1
			for i, d := range m.Deliveries {
				if d.Crashed {
					crashedAt = i
				}
			}
			require.GreaterOrEqual(t, crashedAt, 0, rep.String())
			var again bool
			for _, d := range m.Deliveries[crashedAt+1:] {
				again = again || d.Copy == m.Deliveries[crashedAt].Copy
			}
			require.True(t, again, rep.String())
			if idempotent {
				require.True(t, rep.Check(t))
				return
			}
			d := rep.ProblemsOf(deduptest.DoubleEffect)
			require.Len(t, d, 1, rep.String())
			require.Equal(t, "p0", d[0].ID)
			require.Contains(t, d[0].Detail, "crashed between the effect and the record")
		})
	}
}

func TestRunRejectsBadArguments(t *testing.T) {
	t.Parallel()
	g := newRig(t)
	rcv := adapter.Bind(g.receiver(t, func(ctx context.Context, p payment) (receipt, error) { return receipt{}, nil }))
	_, err := deduptest.Run(context.Background(), nil, rcv, payments(1), nil)
	require.Error(t, err)
	_, err = deduptest.Run(context.Background(), g.clk, rcv, []payment{{ID: "a"}, {ID: "a"}}, g.opts())
	require.ErrorContains(t, err, `same id "a"`)
	_, err = deduptest.Run(context.Background(), g.clk, rcv, payments(1), &deduptest.Options[payment]{Copies: -1})
	require.Error(t, err)
}

// fakeT records what Check reports.
type fakeT struct{ msgs []string }

func (f *fakeT) Helper() {}
func (f *fakeT) Errorf(format string, args ...any) {
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
}

// bind is adapter.Bind for a replica factory's answer.
func bind[M, R any](r *dedup.Receiver[M, R], err error) (deduptest.Target[M, R], error) {
	if err != nil {
		return nil, err
	}
	return adapter.Bind(r), nil
}
