package dedup_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/store"
)

// saga is an order saga for the compensation tests: charge, reserve,
// notify; what each step and compensation did is counted.
type saga struct {
	runs, undone counts
	// reserveErr, when set, is what reserve fails with.
	reserveErr atomic.Pointer[error]
	// refundErr, when set, is what the charge's compensation fails with.
	refundErr atomic.Pointer[error]
	refunded  sync.Map // charge id -> true
}

func (s *saga) failReserve(err error) { s.reserveErr.Store(&err) }
func (s *saga) failRefund(err error) {
	if err == nil {
		s.refundErr.Store(nil)
		return
	}
	s.refundErr.Store(&err)
}

func (s *saga) handler(ctx context.Context, o order) (string, error) {
	c, err := dedup.Step(ctx, "charge", func(ctx context.Context) (charge, error) {
		s.runs.add("charge")
		return charge{ID: "ch_" + o.ID, Amount: o.Amount}, ctx.Err()
	})
	if err != nil {
		return "", err
	}
	if _, err := dedup.Step(ctx, "reserve", func(ctx context.Context) (int, error) {
		s.runs.add("reserve")
		if p := s.reserveErr.Load(); p != nil {
			return 0, *p
		}
		return 1, ctx.Err()
	}); err != nil {
		return "", err
	}
	if _, err := dedup.Step(ctx, "notify", func(ctx context.Context) (bool, error) {
		s.runs.add("notify")
		return true, ctx.Err()
	}); err != nil {
		return "", err
	}
	return c.ID, nil
}

func (s *saga) config(clk clock.Clock) *dedup.Config {
	cfg := stepConfig(clk)
	cfg.MaxAttempts = 3
	cfg.Compensations = dedup.Compensations{
		"charge": dedup.Compensate(func(ctx context.Context, o order, c charge) error {
			s.undone.add("charge")
			if c.ID != "ch_"+o.ID || c.Amount != o.Amount {
				return dedup.Permanent(errors.New("the compensation got another step's result"))
			}
			if p := s.refundErr.Load(); p != nil {
				return *p
			}
			s.refunded.Store(c.ID, true)
			return ctx.Err()
		}),
		"reserve": dedup.Compensate(func(ctx context.Context, o order, n int) error {
			s.undone.add("reserve")
			return ctx.Err()
		}),
	}
	return cfg
}

func TestCompensationOnPermanentError(t *testing.T) {
	clk := clock.NewFake(epoch)
	st := newStepStore(t, clk)
	var s saga
	s.failReserve(dedup.Permanent(errors.New("out of stock")))
	rcv := newReceiver(t, st, s.handler, s.config(clk))
	a := adapter.Bind(rcv)

	res, err := rcv.Handle(t.Context(), order{ID: "o1", Amount: 5})
	require.ErrorContains(t, err, "out of stock")
	d := a.Decide(res, err)
	require.Equal(t, delivery.DeadLetter, d.Action)
	require.Equal(t, delivery.ReasonPermanent, d.Reason)
	require.Equal(t, 1, s.undone.get("charge"), "the charge is refunded")
	require.Zero(t, s.undone.get("reserve"), "a step that never completed is not compensated")
	_, ok := s.refunded.Load("ch_o1")
	require.True(t, ok)
	require.EqualValues(t, 1, rcv.Stats().Compensations)

	// A later delivery (the dead letter redelivered) runs no handler and no
	// compensation: it is given up again.
	res, err = rcv.Handle(t.Context(), order{ID: "o1", Amount: 5})
	require.ErrorIs(t, err, dedup.ErrGivenUp)
	d = a.Decide(res, err)
	require.Equal(t, delivery.DeadLetter, d.Action)
	require.Equal(t, delivery.ReasonPermanent, d.Reason, "with the reason it was first given up for")
	require.Equal(t, 1, s.runs.get("charge"))
	require.Equal(t, 1, s.runs.get("reserve"))
	require.Zero(t, s.runs.get("notify"))
	require.Equal(t, 1, s.undone.get("charge"))
}

func TestCompensationWhenAttemptsRunOut(t *testing.T) {
	clk := clock.NewFake(epoch)
	st := newStepStore(t, clk)
	var s saga
	s.failReserve(errors.New("warehouse down"))
	cfg := s.config(clk)
	rcv := newReceiver(t, st, s.handler, cfg)
	a := adapter.Bind(rcv)
	for attempt := 1; attempt <= cfg.MaxAttempts; attempt++ {
		res, err := rcv.Handle(t.Context(), order{ID: "o1", Amount: 5})
		d := a.Decide(res, err)
		if attempt < cfg.MaxAttempts {
			require.Equal(t, delivery.Retry, d.Action, "attempt %d", attempt)
			require.Zero(t, s.undone.get("charge"), "attempt %d: not given up yet", attempt)
			continue
		}
		require.Equal(t, delivery.DeadLetter, d.Action)
		require.Equal(t, delivery.ReasonAttemptsExhausted, d.Reason)
	}
	require.Equal(t, 1, s.runs.get("charge"))
	require.Equal(t, cfg.MaxAttempts, s.runs.get("reserve"))
	require.Equal(t, 1, s.undone.get("charge"))
}

func TestCompensationWhenClaimsRunOut(t *testing.T) {
	t.Parallel()
	synctest.Test(t, testCompensationWhenClaimsRunOut)
}

// noExtend is a store whose leases cannot be extended: its holders lose
// them, as a worker that froze would, and leave their claims behind.
type noExtend struct{ stepStore }

func (s noExtend) Extend(ctx context.Context, req store.ExtendRequest) error {
	return &store.OpError{Op: "extend", Key: req.Key, Err: errConnRefused}
}

func testCompensationWhenClaimsRunOut(t *testing.T) {
	// Workers crashed holding the message until its claims ran out: the
	// next delivery gives it up without running the handler, and
	// compensates what the crashed runs did.
	clk := clock.NewFake(epoch)
	st := newStepStore(t, clk)
	var s saga
	cfg := s.config(clk)
	cfg.MaxAttempts = 2
	cfg.Lease = 30 * time.Second
	frozen := func(ctx context.Context, o order) (string, error) {
		if _, err := dedup.Step(ctx, "charge", func(ctx context.Context) (charge, error) {
			s.runs.add("charge")
			return charge{ID: "ch_" + o.ID, Amount: o.Amount}, ctx.Err()
		}); err != nil {
			return "", err
		}
		<-ctx.Done() // frozen until its lease is lost
		return "", ctx.Err()
	}
	o := advanceUntil(t, clk, cfg.Lease/10, handleAsync(t.Context(), newReceiver(t, noExtend{st}, frozen, cfg), order{ID: "o1", Amount: 5}))
	require.ErrorIs(t, o.err, dedup.ErrLeaseLost)
	// A second worker crashed right after its claim.
	clk.Advance(cfg.Lease)
	c, err := st.Acquire(t.Context(), store.AcquireRequest{Key: "steps:o1", Lease: cfg.Lease})
	require.NoError(t, err)
	require.True(t, c.Acquired)
	require.Equal(t, 2, c.Record.Attempt)
	clk.Advance(cfg.Lease)

	rcv := newReceiver(t, st, s.handler, cfg)
	res, err := rcv.Handle(t.Context(), order{ID: "o1", Amount: 5})
	require.ErrorIs(t, err, dedup.ErrAttemptsExhausted)
	d := adapter.Bind(rcv).Decide(res, err)
	require.Equal(t, delivery.DeadLetter, d.Action)
	require.Equal(t, delivery.ReasonAttemptsExhausted, d.Reason)
	require.Equal(t, 1, s.runs.get("charge"), "the charge ran once, in the first worker")
	require.Zero(t, s.runs.get("reserve"), "the handler did not run again")
	require.Equal(t, 1, s.undone.get("charge"))
}

func TestStepRefusedOnceGivingUp(t *testing.T) {
	// dtm's "hanging": a step that would start after the message was given
	// up (a goroutine the handler left behind) is refused and runs nothing.
	clk := clock.NewFake(epoch)
	st := newStepStore(t, clk)
	var s saga
	late := make(chan error, 1)
	release := make(chan struct{})
	var lateRan atomic.Bool
	h := func(ctx context.Context, o order) (string, error) {
		if _, err := s.handler(ctx, o); err != nil {
			go func() {
				<-release
				_, err := dedup.Step(ctx, "late", func(ctx context.Context) (int, error) { lateRan.Store(true); return 1, nil })
				late <- err
			}()
			return "", err
		}
		return "", nil
	}
	s.failReserve(dedup.Permanent(errors.New("out of stock")))
	cfg := s.config(clk)
	cfg.Compensations.(dedup.Compensations)["late"] = dedup.Compensate(func(ctx context.Context, o order, n int) error { s.undone.add("late"); return nil })
	rcv := newReceiver(t, st, h, cfg)
	_, err := rcv.Handle(t.Context(), order{ID: "o1", Amount: 5})
	require.ErrorContains(t, err, "out of stock")
	close(release)
	select {
	case err := <-late:
		require.ErrorIs(t, err, dedup.ErrStepRefused)
	case <-time.After(10 * time.Second):
		t.Fatal("the late step did not return")
	}
	require.False(t, lateRan.Load(), "a step refused runs nothing")
	require.Zero(t, s.undone.get("late"))
}

func TestCompensationRetriedThenResumed(t *testing.T) {
	clk := clock.NewFake(epoch)
	st := newStepStore(t, clk)
	var s saga
	// charge and reserve complete; notify fails for good: reserve is
	// compensated first, then charge, whose refund fails once.
	cfg := s.config(clk)
	h := func(ctx context.Context, o order) (string, error) {
		if _, err := dedup.Step(ctx, "charge", func(ctx context.Context) (charge, error) {
			s.runs.add("charge")
			return charge{ID: "ch_" + o.ID, Amount: o.Amount}, ctx.Err()
		}); err != nil {
			return "", err
		}
		if _, err := dedup.Step(ctx, "reserve", func(ctx context.Context) (int, error) { s.runs.add("reserve"); return 1, ctx.Err() }); err != nil {
			return "", err
		}
		return "", dedup.Permanent(errors.New("address invalid"))
	}
	s.failRefund(errors.New("payments down"))
	rcv := newReceiver(t, st, h, cfg)
	a := adapter.Bind(rcv)

	res, err := rcv.Handle(t.Context(), order{ID: "o1", Amount: 5})
	var ce *dedup.CompensationError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "charge", ce.Step)
	require.False(t, ce.Final)
	d := a.Decide(res, err)
	require.Equal(t, delivery.Retry, d.Action, "a compensation that failed is retried with backoff")
	require.Equal(t, 1, s.undone.get("reserve"))
	require.Equal(t, 1, s.undone.get("charge"))

	s.failRefund(nil)
	res, err = rcv.Handle(t.Context(), order{ID: "o1", Amount: 5})
	require.ErrorIs(t, err, dedup.ErrGivenUp)
	d = a.Decide(res, err)
	require.Equal(t, delivery.DeadLetter, d.Action)
	require.Equal(t, delivery.ReasonPermanent, d.Reason)
	require.Equal(t, 1, s.undone.get("reserve"), "a compensation recorded does not run again")
	require.Equal(t, 2, s.undone.get("charge"))
	require.Equal(t, 1, s.runs.get("charge"), "the handler did not run again")
	require.Equal(t, 1, s.runs.get("reserve"))
	_, ok := s.refunded.Load("ch_o1")
	require.True(t, ok)
}

func TestCompensationKeepsFailing(t *testing.T) {
	clk := clock.NewFake(epoch)
	st := newStepStore(t, clk)
	var s saga
	s.failReserve(dedup.Permanent(errors.New("out of stock")))
	s.failRefund(errors.New("payments down"))
	cfg := s.config(clk)
	rcv := newReceiver(t, st, s.handler, cfg)
	a := adapter.Bind(rcv)
	var d delivery.Decision
	for i := 1; i <= cfg.MaxAttempts; i++ {
		res, err := rcv.Handle(t.Context(), order{ID: "o1", Amount: 5})
		var ce *dedup.CompensationError
		require.ErrorAs(t, err, &ce, "run %d", i)
		require.Equal(t, i, ce.Failures)
		d = a.Decide(res, err)
		if i < cfg.MaxAttempts {
			require.Equal(t, delivery.Retry, d.Action, "run %d", i)
		}
	}
	require.Equal(t, delivery.DeadLetter, d.Action)
	require.Equal(t, delivery.ReasonCompensationFailed, d.Reason)
	require.ErrorContains(t, d.Err, `compensation of step "charge" failed`)
	require.Equal(t, cfg.MaxAttempts, s.undone.get("charge"))
	require.Equal(t, 1, s.runs.get("charge"))
	require.EqualValues(t, cfg.MaxAttempts, rcv.Stats().CompensationErrors)
}

func TestCrashDuringCompensationResumes(t *testing.T) {
	t.Parallel()
	synctest.Test(t, testCrashDuringCompensationResumes)
}

func testCrashDuringCompensationResumes(t *testing.T) {
	clk := clock.NewFake(epoch)
	st := newStepStore(t, clk)
	var s saga
	cfg := s.config(clk)
	cfg.Lease = 30 * time.Second
	h := func(ctx context.Context, o order) (string, error) {
		if _, err := dedup.Step(ctx, "charge", func(ctx context.Context) (charge, error) {
			s.runs.add("charge")
			return charge{ID: "ch_" + o.ID, Amount: o.Amount}, ctx.Err()
		}); err != nil {
			return "", err
		}
		if _, err := dedup.Step(ctx, "reserve", func(ctx context.Context) (int, error) { s.runs.add("reserve"); return 1, ctx.Err() }); err != nil {
			return "", err
		}
		return "", dedup.Permanent(errors.New("address invalid"))
	}
	// The first worker freezes in the charge's compensation, after the
	// reserve's was recorded, and loses its lease.
	frozenCfg := *cfg
	frozenCfg.Compensations = dedup.Compensations{
		"reserve": cfg.Compensations.(dedup.Compensations)["reserve"],
		"charge": dedup.Compensate(func(ctx context.Context, o order, c charge) error {
			<-ctx.Done()
			return ctx.Err()
		}),
	}
	o := advanceUntil(t, clk, cfg.Lease/10, handleAsync(t.Context(), newReceiver(t, noExtend{st}, h, &frozenCfg), order{ID: "o1", Amount: 5}))
	require.ErrorIs(t, o.err, dedup.ErrLeaseLost)
	require.Equal(t, 1, s.undone.get("reserve"))
	clk.Advance(cfg.Lease)

	rcv := newReceiver(t, st, h, cfg)
	res, err := rcv.Handle(t.Context(), order{ID: "o1", Amount: 5})
	require.ErrorIs(t, err, dedup.ErrGivenUp)
	require.Equal(t, delivery.DeadLetter, adapter.Bind(rcv).Decide(res, err).Action)
	require.Equal(t, 1, s.undone.get("reserve"), "resumed where it stopped")
	require.Equal(t, 1, s.undone.get("charge"))
	require.Equal(t, 1, s.runs.get("charge"))
}

func TestCompensationsChecked(t *testing.T) {
	clk := clock.NewFake(epoch)
	st := newStepStore(t, clk)
	h := func(ctx context.Context, o order) (string, error) { return "", nil }
	for name, comps := range map[string]dedup.Compensations{
		"other message type": {"charge": dedup.Compensate(func(ctx context.Context, o *order, c charge) error { return nil })},
		"nil":                {"charge": nil},
		"reserved name":      {"dedup/x": dedup.Compensate(func(ctx context.Context, o order, c charge) error { return nil })},
	} {
		_, err := dedup.NewReceiver(st, orderID, h, &dedup.Config{Clock: clk, Compensations: comps})
		require.ErrorIs(t, err, dedup.ErrInvalidConfig, name)
	}
	_, err := dedup.NewReceiver(&faultyStore{Store: newMemstore(t, clk)}, orderID, h, &dedup.Config{Clock: clk,
		Compensations: dedup.Compensations{"charge": dedup.Compensate(func(ctx context.Context, o order, c charge) error { return nil })}})
	require.ErrorIs(t, err, dedup.ErrStepsUnsupported, "compensations need steps")
}

func TestCompensationPattern(t *testing.T) {
	clk := clock.NewFake(epoch)
	st := newStepStore(t, clk)
	var undone counts
	h := func(ctx context.Context, o order) (string, error) {
		for _, sku := range []string{"a", "b"} {
			if _, err := dedup.Step(ctx, "reserve/"+sku, func(ctx context.Context) (string, error) { return sku, ctx.Err() }); err != nil {
				return "", err
			}
		}
		if _, err := dedup.Step(ctx, "reserve/special/c", func(ctx context.Context) (string, error) { return "c", ctx.Err() }); err != nil {
			return "", err
		}
		return "", dedup.Permanent(errors.New("no"))
	}
	var order_ []string
	var mu sync.Mutex
	cfg := stepConfig(clk)
	cfg.Compensations = dedup.Compensations{
		"reserve/*": dedup.Compensate(func(ctx context.Context, o order, sku string) error {
			mu.Lock()
			order_ = append(order_, sku)
			mu.Unlock()
			undone.add(sku)
			return nil
		}),
		"reserve/special/*": dedup.Compensate(func(ctx context.Context, o order, sku string) error {
			undone.add("special:" + sku)
			return nil
		}),
	}
	rcv := newReceiver(t, st, h, cfg)
	_, err := rcv.Handle(t.Context(), order{ID: "o1"})
	require.ErrorContains(t, err, "no")
	require.Equal(t, []string{"b", "a"}, order_, "compensations run in the reverse order of their steps")
	require.Equal(t, 1, undone.get("special:c"), "the longest pattern wins")
	require.Zero(t, undone.get("c"))
}

func TestStepRefusedWithoutCompensations(t *testing.T) {
	// A message given up by a receiver with compensations reaches one
	// without them (a deploy removed them): its steps are still refused,
	// and it is dead-lettered.
	clk := clock.NewFake(epoch)
	st := newStepStore(t, clk)
	var s saga
	s.failReserve(dedup.Permanent(errors.New("out of stock")))
	_, err := newReceiver(t, st, s.handler, s.config(clk)).Handle(t.Context(), order{ID: "o1", Amount: 5})
	require.ErrorContains(t, err, "out of stock")

	// The new deploy's handler starts with a step no run recorded.
	var audited atomic.Bool
	h := func(ctx context.Context, o order) (string, error) {
		if _, err := dedup.Step(ctx, "audit", func(ctx context.Context) (int, error) { audited.Store(true); return 1, ctx.Err() }); err != nil {
			return "", err
		}
		return s.handler(ctx, o)
	}
	plain := newReceiver(t, st, h, stepConfig(clk))
	res, err := plain.Handle(t.Context(), order{ID: "o1", Amount: 5})
	require.ErrorIs(t, err, dedup.ErrStepRefused)
	require.False(t, audited.Load(), "no step starts once its message was given up")
	d := adapter.Bind(plain).Decide(res, err)
	require.Equal(t, delivery.DeadLetter, d.Action)
	require.Equal(t, delivery.ReasonPermanent, d.Reason)
	require.Equal(t, 1, s.runs.get("charge"))
	require.Equal(t, 1, s.undone.get("charge"))
}

func TestGivenUpKeepsItsReasonPastMaxAttempts(t *testing.T) {
	// A message given up for a permanent error whose compensation failed
	// until its claims ran out is answered, once the compensation ran, with
	// the reason it was given up for, not as attempts exhausted.
	clk := clock.NewFake(epoch)
	st := newStepStore(t, clk)
	var s saga
	s.failReserve(dedup.Permanent(errors.New("out of stock")))
	s.failRefund(errors.New("payments down"))
	cfg := s.config(clk)
	cfg.MaxAttempts = 5
	rcv := newReceiver(t, st, s.handler, cfg)
	for range 2 {
		_, err := rcv.Handle(t.Context(), order{ID: "o1", Amount: 5})
		var ce *dedup.CompensationError
		require.ErrorAs(t, err, &ce)
	}
	s.failRefund(nil)
	cfg.MaxAttempts = 2 // a deploy lowers the limit: the next claim is past it
	rcv = newReceiver(t, st, s.handler, cfg)
	res, err := rcv.Handle(t.Context(), order{ID: "o1", Amount: 5})
	var gu *dedup.GivenUpError
	require.ErrorAs(t, err, &gu)
	d := adapter.Bind(rcv).Decide(res, err)
	require.Equal(t, delivery.ReasonPermanent, d.Reason)
	require.Equal(t, 3, s.undone.get("charge"))
}

func TestResumedClaimEndsTheLooksInARow(t *testing.T) {
	// A claim after the first attempt of a receiver with compensations
	// (which looks for a message given up before it runs the handler)
	// forgets the key's looks in a row, as any claim does.
	clk := clock.NewFake(epoch)
	st := newStepStore(t, clk)
	var s saga
	s.failReserve(errors.New("warehouse busy"))
	rcv := newReceiver(t, st, s.handler, s.config(clk))
	c, err := st.Acquire(t.Context(), store.AcquireRequest{Key: "steps:o1", Lease: time.Hour})
	require.NoError(t, err)
	res, err := rcv.Handle(t.Context(), order{ID: "o1", Amount: 5})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusInFlight, res.Status)
	require.Equal(t, 1, dedup.WaitsRemembered(rcv), "the look is remembered")
	require.NoError(t, st.Release(t.Context(), store.ReleaseRequest{Key: "steps:o1", Token: c.Token, Error: "x", Retention: time.Hour}))
	_, err = rcv.Handle(t.Context(), order{ID: "o1", Amount: 5}) // claimed (attempt 2), the handler fails
	require.ErrorContains(t, err, "warehouse busy")
	require.Zero(t, dedup.WaitsRemembered(rcv), "the claim forgot the looks")
}
