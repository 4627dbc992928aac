package dedup_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// stepStore is what the step tests need of a store.
type stepStore interface {
	store.Store
	store.StepStore
	store.Inspector
}

// newStepStore returns a store that keeps step records, on clk.
func newStepStore(t testing.TB, clk clock.Clock) stepStore {
	t.Helper()
	return newMemstore(t, clk)
}

// charge is a step's typed result.
type charge struct {
	ID     string
	Amount int
}

// counts counts runs by name.
type counts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counts) add(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[name]++
}

func (c *counts) get(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[name]
}

func stepConfig(clk clock.Clock) *dedup.Config {
	return &dedup.Config{Namespace: "steps", Clock: clk, Steps: true, Backoff: dedup.ExponentialBackoff{Base: 1, Max: 1}}
}

func TestStepRunsOncePerMessage(t *testing.T) {
	clk := clock.NewFake(epoch)
	st := newStepStore(t, clk)
	var runs counts
	var failReserve atomic.Bool
	failReserve.Store(true)
	h := func(ctx context.Context, o order) (string, error) {
		c, err := dedup.Step(ctx, "charge", func(ctx context.Context) (charge, error) {
			runs.add("charge")
			return charge{ID: "ch_" + o.ID, Amount: o.Amount}, ctx.Err()
		})
		if err != nil {
			return "", err
		}
		r, err := dedup.Step(ctx, "reserve", func(ctx context.Context) (int, error) {
			runs.add("reserve")
			if failReserve.Load() {
				return 0, errors.New("warehouse busy")
			}
			return 7, ctx.Err()
		})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s/%d/%d", c.ID, c.Amount, r), nil
	}
	rcv := newReceiver(t, st, h, stepConfig(clk))

	_, err := rcv.Handle(t.Context(), order{ID: "o1", Amount: 42})
	require.ErrorContains(t, err, "warehouse busy")
	require.Equal(t, 1, runs.get("charge"))

	failReserve.Store(false)
	res, err := rcv.Handle(t.Context(), order{ID: "o1", Amount: 42})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, res.Status)
	require.Equal(t, "ch_o1/42/7", res.Value, "the recorded charge is replayed, typed")
	require.Equal(t, 1, runs.get("charge"), "a completed step does not run again")
	require.Equal(t, 2, runs.get("reserve"), "a failed step records nothing and runs again")
	s := rcv.Stats()
	require.EqualValues(t, 2, s.StepsRun)
	require.EqualValues(t, 1, s.StepsReplayed)

	rec, err := st.Get(t.Context(), res.Key)
	require.NoError(t, err)
	names := []string{}
	for _, sr := range rec.Steps {
		names = append(names, sr.Name)
	}
	require.ElementsMatch(t, []string{"charge", "reserve"}, names, "the completed record keeps its step records")
}

func TestStepFirstAttemptReadsNothing(t *testing.T) {
	clk := clock.NewFake(epoch)
	st := &countingSteps{stepStore: newStepStore(t, clk)}
	h := func(ctx context.Context, o order) (int, error) {
		return dedup.Step(ctx, "a", func(ctx context.Context) (int, error) { return 1, ctx.Err() })
	}
	rcv := newReceiver(t, st, h, stepConfig(clk))
	_, err := rcv.Handle(t.Context(), order{ID: "o1"})
	require.NoError(t, err)
	require.Zero(t, st.loads.Load(), "a first attempt has no step records to read")
	require.EqualValues(t, 1, st.saves.Load())
}

// countingSteps counts the step calls that reach a store.
type countingSteps struct {
	stepStore
	loads, saves atomic.Int64
	failSave     atomic.Bool
}

func (s *countingSteps) LoadSteps(ctx context.Context, req store.StepsRequest) ([]store.StepRecord, error) {
	s.loads.Add(1)
	return s.stepStore.LoadSteps(ctx, req)
}

func (s *countingSteps) SaveStep(ctx context.Context, req store.SaveStepRequest) error {
	s.saves.Add(1)
	if s.failSave.Load() {
		return &store.OpError{Op: "save step", Key: req.Key, Err: errConnRefused}
	}
	return s.stepStore.SaveStep(ctx, req)
}

func TestStepReplayCostsOneRead(t *testing.T) {
	clk := clock.NewFake(epoch)
	st := &countingSteps{stepStore: newStepStore(t, clk)}
	var fail atomic.Bool
	fail.Store(true)
	h := func(ctx context.Context, o order) (int, error) {
		for i := range 5 {
			if _, err := dedup.Step(ctx, fmt.Sprintf("s/%d", i), func(ctx context.Context) (int, error) { return i, ctx.Err() }); err != nil {
				return 0, err
			}
		}
		if fail.Load() {
			return 0, errors.New("after the steps")
		}
		return 1, nil
	}
	rcv := newReceiver(t, st, h, stepConfig(clk))
	_, err := rcv.Handle(t.Context(), order{ID: "o1"})
	require.Error(t, err)
	fail.Store(false)
	saves := st.saves.Load()
	_, err = rcv.Handle(t.Context(), order{ID: "o1"})
	require.NoError(t, err)
	require.EqualValues(t, 1, st.loads.Load(), "five completed steps cost one read")
	require.Equal(t, saves, st.saves.Load(), "and no write")
}

func TestStepNames(t *testing.T) {
	clk := clock.NewFake(epoch)
	st := newStepStore(t, clk)
	for name, bad := range map[string]string{"empty": "", "reserved": "dedup/x", "too long": strings.Repeat("x", 201), "not utf8": "a\xff"} {
		t.Run(name, func(t *testing.T) {
			ran := false
			h := func(ctx context.Context, o order) (int, error) {
				return dedup.Step(ctx, bad, func(ctx context.Context) (int, error) { ran = true; return 1, ctx.Err() })
			}
			rcv := newReceiver(t, st, h, stepConfig(clk))
			_, err := rcv.Handle(t.Context(), order{ID: "bad-" + name})
			require.ErrorIs(t, err, dedup.ErrInvalidConfig)
			require.True(t, dedup.IsPermanent(err), "a bad name fails every run: permanent")
			require.False(t, ran)
		})
	}
}

func TestStepRepeatedName(t *testing.T) {
	clk := clock.NewFake(epoch)
	st := newStepStore(t, clk)
	var runs atomic.Int64
	h := func(ctx context.Context, o order) (int, error) {
		for range 2 {
			if _, err := dedup.Step(ctx, "reserve", func(ctx context.Context) (int, error) { runs.Add(1); return 1, ctx.Err() }); err != nil {
				return 0, err
			}
		}
		return 0, nil
	}
	rcv := newReceiver(t, st, h, stepConfig(clk))
	_, err := rcv.Handle(t.Context(), order{ID: "o1"})
	require.ErrorIs(t, err, dedup.ErrStepRepeated)
	require.True(t, dedup.IsPermanent(err))
	require.EqualValues(t, 1, runs.Load(), "the second use runs nothing")
}

func TestStepsInALoop(t *testing.T) {
	clk := clock.NewFake(epoch)
	st := newStepStore(t, clk)
	var runs counts
	var fail atomic.Bool
	fail.Store(true)
	h := func(ctx context.Context, o order) (int, error) {
		sum := 0
		for i := range 4 {
			v, err := dedup.Step(ctx, fmt.Sprintf("reserve/%d", i), func(ctx context.Context) (int, error) {
				runs.add(fmt.Sprint(i))
				if i == 3 && fail.Load() {
					return 0, errors.New("out of stock")
				}
				return i * 10, ctx.Err()
			})
			if err != nil {
				return 0, err
			}
			sum += v
		}
		return sum, nil
	}
	rcv := newReceiver(t, st, h, stepConfig(clk))
	_, err := rcv.Handle(t.Context(), order{ID: "o1"})
	require.Error(t, err)
	fail.Store(false)
	res, err := rcv.Handle(t.Context(), order{ID: "o1"})
	require.NoError(t, err)
	require.Equal(t, 60, res.Value)
	for i := range 3 {
		require.Equal(t, 1, runs.get(fmt.Sprint(i)), "item %d", i)
	}
	require.Equal(t, 2, runs.get("3"))
}

func TestStepsFromGoroutines(t *testing.T) {
	clk := clock.NewFake(epoch)
	st := newStepStore(t, clk)
	var runs counts
	var fail atomic.Bool
	fail.Store(true)
	const n = 8
	h := func(ctx context.Context, o order) (int, error) {
		var wg sync.WaitGroup
		errs := make([]error, n+1)
		for i := range n {
			wg.Go(func() {
				_, errs[i] = dedup.Step(ctx, fmt.Sprintf("item/%d", i), func(ctx context.Context) (int, error) {
					runs.add(fmt.Sprint(i))
					return i, ctx.Err()
				})
			})
		}
		wg.Wait()
		// The same name from two goroutines at once: one runs, the other
		// is refused.
		var same [2]error
		for j := range 2 {
			wg.Go(func() {
				_, same[j] = dedup.Step(ctx, "same", func(ctx context.Context) (int, error) { runs.add("same"); return 0, ctx.Err() })
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return 0, err
		}
		if (same[0] == nil) == (same[1] == nil) {
			return 0, fmt.Errorf("want one of two concurrent uses refused, got %v and %v", same[0], same[1])
		}
		require.ErrorIs(t, errors.Join(same[0], same[1]), dedup.ErrStepRepeated)
		if fail.Load() {
			return 0, errors.New("after the steps")
		}
		return 0, nil
	}
	cfg := stepConfig(clk)
	rcv := newReceiver(t, st, h, cfg)
	_, err := rcv.Handle(t.Context(), order{ID: "o1"})
	require.ErrorContains(t, err, "after the steps")
	fail.Store(false)
	_, err = rcv.Handle(t.Context(), order{ID: "o1"})
	require.NoError(t, err)
	for i := range n {
		require.Equal(t, 1, runs.get(fmt.Sprint(i)), "item %d ran once", i)
	}
	require.Equal(t, 1, runs.get("same"))
}

func TestStepOutsideAHandler(t *testing.T) {
	_, err := dedup.Step(t.Context(), "a", func(ctx context.Context) (int, error) { return 1, nil })
	require.ErrorIs(t, err, dedup.ErrNoClaim)
}

func TestStepsNeedAStepStore(t *testing.T) {
	clk := clock.NewFake(epoch)
	plain := &faultyStore{Store: newMemstore(t, clk)} // hides memstore's abilities
	h := func(ctx context.Context, o order) (int, error) { return 0, nil }
	_, err := dedup.NewReceiver(plain, orderID, h, stepConfig(clk))
	require.ErrorIs(t, err, dedup.ErrStepsUnsupported)
	require.ErrorIs(t, err, dedup.ErrInvalidConfig)
	require.ErrorContains(t, err, "faultyStore")

	// Without Config.Steps, a handler's step fails, running nothing.
	ran := false
	h2 := func(ctx context.Context, o order) (int, error) {
		return dedup.Step(ctx, "a", func(ctx context.Context) (int, error) { ran = true; return 1, nil })
	}
	rcv := newReceiver(t, newStepStore(t, clk), h2, &dedup.Config{Clock: clk})
	_, err = rcv.Handle(t.Context(), order{ID: "o1"})
	require.ErrorIs(t, err, dedup.ErrStepsUnsupported)
	require.False(t, ran)
}

func TestStepResultTooLarge(t *testing.T) {
	clk := clock.NewFake(epoch)
	st := newStepStore(t, clk)
	var runs atomic.Int64
	var fail atomic.Bool
	fail.Store(true)
	h := func(ctx context.Context, o order) (string, error) {
		v, err := dedup.Step(ctx, "big", func(ctx context.Context) (string, error) {
			runs.Add(1)
			return strings.Repeat("x", 100), ctx.Err()
		})
		if err != nil {
			return "", err
		}
		if fail.Load() {
			return "", errors.New("later")
		}
		return v[:1], nil
	}
	cfg := stepConfig(clk)
	cfg.MaxResultSize = 50
	rcv := newReceiver(t, st, h, cfg)
	_, err := rcv.Handle(t.Context(), order{ID: "o1"})
	require.ErrorContains(t, err, "later", "the run that did the step gets its value")
	fail.Store(false)
	_, err = rcv.Handle(t.Context(), order{ID: "o1"})
	require.ErrorIs(t, err, dedup.ErrResultNotStored)
	require.True(t, dedup.IsPermanent(err))
	require.EqualValues(t, 1, runs.Load(), "a step done without its result never runs again")
}

func TestStepLostClaimRecordsNothing(t *testing.T) {
	clk := clock.NewFake(epoch)
	st := newStepStore(t, clk)
	var stepErr error
	h := func(ctx context.Context, o order) (int, error) {
		held, _ := store.ClaimFromContext(ctx)
		_, stepErr = dedup.Step(ctx, "a", func(ctx context.Context) (int, error) {
			// An operator forgets the key under the holder: its claim is gone.
			return 1, st.Delete(ctx, held.Key)
		})
		return 0, stepErr
	}
	rcv := newReceiver(t, st, h, stepConfig(clk))
	_, err := rcv.Handle(t.Context(), order{ID: "o1"})
	require.ErrorIs(t, stepErr, dedup.ErrLeaseLost, "the holder learns its record was refused")
	require.ErrorIs(t, err, dedup.ErrLeaseLost)
	_, err = st.Get(t.Context(), "steps:o1")
	require.ErrorIs(t, err, store.ErrNotFound, "nothing was recorded")
}

func TestStepStoreDownWhileRecording(t *testing.T) {
	t.Parallel()
	synctest.Test(t, testStepStoreDownWhileRecording)
}

func testStepStoreDownWhileRecording(t *testing.T) {
	clk := clock.NewFake(epoch)
	st := &countingSteps{stepStore: newStepStore(t, clk)}
	st.failSave.Store(true)
	var runs atomic.Int64
	h := func(ctx context.Context, o order) (string, error) {
		return dedup.Step(ctx, "a", func(ctx context.Context) (string, error) { runs.Add(1); return "a", ctx.Err() })
	}
	rcv := newReceiver(t, st, h, stepConfig(clk))
	o := advanceUntil(t, clk, 100*time.Millisecond, handleAsync(t.Context(), rcv, order{ID: "o1"}))
	require.ErrorIs(t, o.err, dedup.ErrStoreUnavailable)
	require.EqualValues(t, 4, st.saves.Load(), "a record that fails for want of the store is tried 4 times")
	d := adapter.Bind(rcv).Decide(o.res, o.err)
	require.Equal(t, delivery.Retry, d.Action)
	require.Equal(t, delivery.ReasonStoreUnavailable, d.Reason)
}

func TestStepRenamedRunsAgain(t *testing.T) {
	clk := clock.NewFake(epoch)
	st := newStepStore(t, clk)
	var runs counts
	name := "charge"
	var fail atomic.Bool
	fail.Store(true)
	h := func(ctx context.Context, o order) (int, error) {
		// The order of the steps changes between the runs: names decide.
		first, second := name, "reserve"
		if !fail.Load() {
			first, second = second, first
		}
		for _, n := range []string{first, second} {
			if _, err := dedup.Step(ctx, n, func(ctx context.Context) (int, error) { runs.add(n); return 1, ctx.Err() }); err != nil {
				return 0, err
			}
		}
		if fail.Load() {
			return 0, errors.New("deploy")
		}
		return 1, nil
	}
	rcv := newReceiver(t, st, h, stepConfig(clk))
	_, err := rcv.Handle(t.Context(), order{ID: "o1"})
	require.Error(t, err)
	fail.Store(false)
	name = "charge-v2" // renamed by the deploy
	_, err = rcv.Handle(t.Context(), order{ID: "o1"})
	require.NoError(t, err)
	require.Equal(t, 1, runs.get("reserve"), "reordered: found by name")
	require.Equal(t, 1, runs.get("charge"))
	require.Equal(t, 1, runs.get("charge-v2"), "renamed: a new step, which runs")
}

func TestStepNotStartedOnceTheContextEnded(t *testing.T) {
	clk := clock.NewFake(epoch)
	st := newStepStore(t, clk)
	ran := false
	ctx, cancel := context.WithCancel(t.Context())
	h := func(hctx context.Context, o order) (int, error) {
		cancel() // the caller leaves (a shutdown) while the handler runs
		return dedup.Step(hctx, "a", func(ctx context.Context) (int, error) { ran = true; return 1, nil })
	}
	rcv := newReceiver(t, st, h, stepConfig(clk))
	_, err := rcv.Handle(ctx, order{ID: "o1"})
	require.ErrorIs(t, err, context.Canceled)
	require.False(t, ran, "a step does not start once its handler's context ended")
}

func TestParseStep(t *testing.T) {
	clk := clock.NewFake(epoch)
	st := newStepStore(t, clk)
	var s saga
	s.failReserve(dedup.Permanent(errors.New("out of stock")))
	rcv := newReceiver(t, st, s.handler, s.config(clk))
	_, err := rcv.Handle(t.Context(), order{ID: "o1", Amount: 5})
	require.Error(t, err)
	// The failed record's step records, read with a claim of the key.
	c, err := st.Acquire(t.Context(), store.AcquireRequest{Key: "steps:o1", Lease: time.Minute})
	require.NoError(t, err)
	recs, err := st.LoadSteps(t.Context(), store.StepsRequest{Key: "steps:o1", Token: c.Token})
	require.NoError(t, err)
	got := map[string]dedup.StepInfo{}
	for _, r := range recs {
		info, err := dedup.ParseStep(r)
		require.NoError(t, err)
		got[r.Name] = info
	}
	require.Equal(t, "compensated", got["charge"].State)
	require.Equal(t, uint64(1), got["charge"].Order)
	require.JSONEq(t, `{"ID":"ch_o1","Amount":5}`, string(got["charge"].Result))
	g := got[dedup.GivenUpStep]
	require.Equal(t, "compensated-all", g.State)
	require.Equal(t, string(delivery.ReasonPermanent), g.Reason)
	require.Contains(t, g.Cause, "out of stock")
	_, err = dedup.ParseStep(store.StepRecord{Name: "x", Value: []byte("?")})
	require.Error(t, err)
}
