package deduptest_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/deduptest"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/memstore"
)

func newFaults(t *testing.T, seed uint64, faults ...deduptest.Fault) (*deduptest.FaultStore, *memstore.Store) {
	t.Helper()
	mem, err := memstore.New(&memstore.Options{Clock: clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))})
	require.NoError(t, err)
	fs, err := deduptest.NewFaultStore(mem, seed, faults...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = fs.Close() })
	return fs, mem
}

func TestFaultKinds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	acq := func(key string) store.AcquireRequest { return store.AcquireRequest{Key: key, Lease: time.Minute} }

	t.Run("fail by call number", func(t *testing.T) {
		fs, _ := newFaults(t, 1, deduptest.Fault{Op: deduptest.OpAcquire, Kind: deduptest.Fail, Calls: []int{2}})
		_, err := fs.Acquire(ctx, acq("n:a"))
		require.NoError(t, err)
		_, err = fs.Acquire(ctx, acq("n:b"))
		require.ErrorIs(t, err, deduptest.ErrInjected)
		require.ErrorIs(t, err, store.ErrUnavailable)
		c, err := fs.Acquire(ctx, acq("n:b")) // not applied: b is free
		require.NoError(t, err)
		require.True(t, c.Acquired)
		require.Equal(t, []deduptest.Injection{{Op: deduptest.OpAcquire, Kind: deduptest.Fail, Key: "n:b", Call: 2}}, fs.Injected())
	})

	t.Run("lose answer after applying", func(t *testing.T) {
		fs, mem := newFaults(t, 1, deduptest.Fault{Op: deduptest.OpComplete, Kind: deduptest.LoseAnswer, Key: "a"})
		c, err := fs.Acquire(ctx, acq("n:a"))
		require.NoError(t, err)
		err = fs.Complete(ctx, store.CompleteRequest{Key: "n:a", Token: c.Token, Result: []byte("r"), Retention: time.Hour})
		require.ErrorIs(t, err, deduptest.ErrInjected)
		rec, err := mem.Get(ctx, "n:a")
		require.NoError(t, err)
		require.Equal(t, store.StateCompleted, rec.State) // applied
	})

	t.Run("lease lost and crash do not apply", func(t *testing.T) {
		fs, mem := newFaults(t, 1,
			deduptest.Fault{Op: deduptest.OpExtend, Kind: deduptest.LeaseLost},
			deduptest.Fault{Op: deduptest.OpComplete, Kind: deduptest.Crash})
		c, err := fs.Acquire(ctx, acq("n:a"))
		require.NoError(t, err)
		require.ErrorIs(t, fs.Extend(ctx, store.ExtendRequest{Key: "n:a", Token: c.Token, Lease: time.Minute}), store.ErrLeaseLost)
		err = fs.Complete(ctx, store.CompleteRequest{Key: "n:a", Token: c.Token, Retention: time.Hour})
		require.ErrorIs(t, err, deduptest.ErrCrashed)
		require.ErrorIs(t, err, store.ErrLeaseLost)
		rec, err := mem.Get(ctx, "n:a")
		require.NoError(t, err)
		require.Equal(t, store.StateProcessing, rec.State)
	})

	t.Run("hang until the context ends or Close", func(t *testing.T) {
		fs, _ := newFaults(t, 1, deduptest.Fault{Op: deduptest.OpRelease, Kind: deduptest.Hang})
		cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		err := fs.Release(cctx, store.ReleaseRequest{Key: "n:a", Retention: time.Hour})
		require.ErrorIs(t, err, deduptest.ErrInjected)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		errc := make(chan error, 1)
		go func() { errc <- fs.Release(ctx, store.ReleaseRequest{Key: "n:a", Retention: time.Hour}) }()
		require.NoError(t, fs.Close())
		select {
		case err := <-errc:
			require.ErrorIs(t, err, deduptest.ErrInjected)
		case <-time.After(5 * time.Second):
			t.Fatal("Close did not release the hung call")
		}
	})

	t.Run("delay then call", func(t *testing.T) {
		fs, _ := newFaults(t, 1, deduptest.Fault{Op: deduptest.OpAcquire, Kind: deduptest.Delay, Delay: time.Millisecond})
		c, err := fs.Acquire(ctx, acq("n:a"))
		require.NoError(t, err)
		require.True(t, c.Acquired)
		require.Len(t, fs.Injected(), 1)
	})

	t.Run("probability is seeded", func(t *testing.T) {
		hits := func() []deduptest.Injection {
			fs, _ := newFaults(t, 42, deduptest.Fault{Op: deduptest.OpAcquire, Kind: deduptest.Fail, Probability: 0.5})
			for range 40 {
				_, _ = fs.Acquire(ctx, acq("n:a"))
			}
			return fs.Injected()
		}
		a, b := hits(), hits()
		require.Equal(t, a, b)
		require.Greater(t, len(a), 5)
		require.Less(t, len(a), 35)
	})

	t.Run("batch items", func(t *testing.T) {
		fs, mem := newFaults(t, 1,
			deduptest.Fault{Op: deduptest.OpAcquire, Kind: deduptest.Fail, Key: "b"},
			deduptest.Fault{Op: deduptest.OpComplete, Kind: deduptest.LoseAnswer, Key: "a"})
		outs := fs.AcquireBatch(ctx, []store.AcquireRequest{acq("n:a"), acq("n:b"), acq("n:c")})
		require.NoError(t, outs[0].Err)
		require.ErrorIs(t, outs[1].Err, deduptest.ErrInjected)
		require.NoError(t, outs[2].Err)
		errs := fs.CompleteBatch(ctx, []store.CompleteRequest{
			{Key: "n:a", Token: outs[0].Claim.Token, Retention: time.Hour},
			{Key: "n:c", Token: outs[2].Claim.Token, Retention: time.Hour},
		})
		require.ErrorIs(t, errs[0], deduptest.ErrInjected)
		require.NoError(t, errs[1])
		for _, k := range []string{"n:a", "n:c"} {
			rec, err := mem.Get(ctx, k)
			require.NoError(t, err)
			require.Equal(t, store.StateCompleted, rec.State, k)
		}
		_, err := mem.Get(ctx, "n:b")
		require.ErrorIs(t, err, store.ErrNotFound)
	})

	t.Run("invalid faults", func(t *testing.T) {
		_, err := deduptest.NewFaultStore(nil, 1)
		require.Error(t, err)
		fs, _ := newFaults(t, 1)
		require.Error(t, fs.Add(deduptest.Fault{Kind: deduptest.Fail}))
		require.Error(t, fs.Add(deduptest.Fault{Op: deduptest.OpAcquire}))
		require.Error(t, fs.Add(deduptest.Fault{Op: deduptest.OpAcquire, Kind: deduptest.Delay, Delay: -1}))
		require.ErrorContains(t, fs.Add(deduptest.Fault{Op: deduptest.OpAcquire, Kind: deduptest.Fail, Calls: []int{0}}), "calls count from 1")
	})
}

// Under the harness, the receiver rides out the faults it must: the store
// failing, slow or hanging, and a completion whose answer was lost. Every
// message is processed once, and every duplicate replays its result.
func TestReceiverRidesOutFaults(t *testing.T) {
	t.Parallel()
	for name, f := range map[string]deduptest.Fault{
		"acquire fails":         {Op: deduptest.OpAcquire, Kind: deduptest.Fail, Calls: []int{1, 2, 3}},
		"acquire slow":          {Op: deduptest.OpAcquire, Kind: deduptest.Delay, Delay: time.Millisecond, Probability: 0.5},
		"complete answer lost":  {Op: deduptest.OpComplete, Kind: deduptest.LoseAnswer, Calls: []int{1, 2}},
		"complete hangs":        {Op: deduptest.OpComplete, Kind: deduptest.Hang, Calls: []int{1}},
		"complete fails":        {Op: deduptest.OpComplete, Kind: deduptest.Fail, Probability: 0.3},
		"release fails":         {Op: deduptest.OpRelease, Kind: deduptest.Fail},
		"extend fails sometime": {Op: deduptest.OpExtend, Kind: deduptest.Fail, Calls: []int{1}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := newRig(t, f)
			var mu sync.Mutex
			tried := map[string]bool{}
			rcv := g.receiver(t, func(ctx context.Context, p payment) (receipt, error) {
				mu.Lock()
				first := !tried[p.ID]
				tried[p.ID] = true
				mu.Unlock()
				if first { // fails before its effect: the claim is released
					return receipt{}, errors.New("try again")
				}
				if err := deduptest.Sleep(ctx, g.clk, lease/2); err != nil { // long enough to beat
					return receipt{}, err
				}
				g.effects.Record(p.ID)
				return receipt{ID: "r-" + p.ID, Amount: p.Amount}, nil
			})
			rep := run(t, g, adapter.Bind(rcv), payments(3), g.opts())
			require.NotEmpty(t, g.faults.Injected())
			require.True(t, rep.Check(t))
			for _, m := range rep.Messages {
				require.Equal(t, 3, m.Acked, rep.String())
			}
			if name == "acquire fails" {
				var storeRetry bool
				for _, m := range rep.Messages {
					for _, d := range m.Decisions() {
						storeRetry = storeRetry || d.Reason == "store-unavailable"
					}
				}
				require.True(t, storeRetry, rep.String())
			}
		})
	}
}

// A fault the run asked for and never injected makes the report say so,
// naming the fault: the run did not test what it asked for.
func TestFaultNotInjected(t *testing.T) {
	t.Parallel()
	ok := func(g *rig) dedup.Handler[payment, receipt] {
		return func(ctx context.Context, p payment) (receipt, error) {
			g.effects.Record(p.ID)
			return receipt{ID: "r-" + p.ID}, nil
		}
	}

	// The case of pgstore's TxHandler, on memstore: the handler completes
	// the record itself (in its transaction), so the receiver never calls
	// Complete and a Crash fault on it never fires.
	t.Run("crash under a handler that completes the record", func(t *testing.T) {
		t.Parallel()
		clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		mem, err := memstore.New(&memstore.Options{Clock: clk})
		require.NoError(t, err)
		fs, err := deduptest.NewFaultStore(mem, 1, deduptest.Fault{Op: deduptest.OpComplete, Kind: deduptest.Crash, Key: "p0", Calls: []int{1}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = fs.Close() })
		g := &rig{clk: clk, faults: fs, effects: new(deduptest.Effects)}
		selfCompleting := func(ctx context.Context, p payment) (receipt, error) {
			held, ok := store.ClaimFromContext(ctx)
			if !ok {
				return receipt{}, errors.New("no claim in the handler's context")
			}
			v := receipt{ID: "r-" + p.ID}
			result, err := json.Marshal(v)
			if err != nil {
				return receipt{}, err
			}
			g.effects.Record(p.ID)
			if err := mem.Complete(ctx, store.CompleteRequest{Key: held.Key, Token: held.Token, Result: result, Retention: held.Retention}); err != nil {
				return receipt{}, err
			}
			held.MarkCompleted()
			return v, nil
		}
		rep := run(t, g, g.replicas(selfCompleting), payments(2), g.opts())
		require.Empty(t, fs.Injected())
		require.Error(t, rep.Err(), "a crash fault that never fired leaves the crash window untested\n%s", rep)
		require.Len(t, rep.Problems, 1, rep.String())
		p := rep.Problems[0]
		require.Equal(t, deduptest.FaultNotInjected, p.Kind)
		require.Empty(t, p.ID, "a problem of the run, not of a message")
		require.Contains(t, p.Detail, `the crash fault on complete of "p0" (calls [1]) was never injected: no complete call matched it`)
		require.Contains(t, p.Detail, "TxHandler")
		require.Contains(t, p.Detail, "deduptest.ErrCrashed")
		require.True(t, strings.HasPrefix(p.String(), "fault-not-injected: the crash fault"), p.String())
		require.Contains(t, rep.String(), "PROBLEM fault-not-injected: ")
		var ft fakeT
		require.False(t, rep.Check(&ft))
		require.Contains(t, ft.msgs[0], "fault-not-injected")

		// Without Options.Faults, nothing is checked.
		o := g.opts()
		o.Faults = nil
		require.True(t, run(t, g, g.replicas(selfCompleting), []payment{{ID: "q0"}}, o).Check(t))
	})

	for name, c := range map[string]struct {
		fault deduptest.Fault
		want  string
	}{
		"a key that matches no message": {
			deduptest.Fault{Op: deduptest.OpAcquire, Kind: deduptest.Fail, Key: "p9"},
			`the fail fault on acquire of "p9" was never injected: no acquire call matched it (Key is the full key or the message id)`,
		},
		"a probability that never hit": {
			deduptest.Fault{Op: deduptest.OpAcquire, Kind: deduptest.Delay, Probability: 1e-9},
			`the delay fault on acquire (probability 1e-09) was never injected: none of the `,
		},
		"a call that never came, and none was hit": {
			deduptest.Fault{Op: deduptest.OpAcquire, Kind: deduptest.Fail, Key: "p0", Calls: []int{40}},
			`the fail fault on acquire of "p0" (calls [40]) was never injected: only `,
		},
		"an extension the handler is too quick for": {
			deduptest.Fault{Op: deduptest.OpExtend, Kind: deduptest.LeaseLost},
			`the lease-lost fault on extend was never injected: no extend call matched it. The receiver extends a lease only while a handler runs longer than a third of it`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := newRig(t, c.fault)
			rep := run(t, g, g.replicas(ok(g)), payments(2), g.opts())
			require.Len(t, rep.Problems, 1, rep.String())
			require.Equal(t, deduptest.FaultNotInjected, rep.Problems[0].Kind)
			require.Contains(t, rep.Problems[0].Detail, c.want)
		})
	}
	t.Run("a call that never came, among calls that did", func(t *testing.T) {
		t.Parallel()
		g := newRig(t, deduptest.Fault{Op: deduptest.OpAcquire, Kind: deduptest.Fail, Calls: []int{1, 40}})
		rep := run(t, g, g.replicas(ok(g)), payments(2), g.opts())
		require.Len(t, g.faults.Injected(), 1, "call 1 was hit")
		require.Len(t, rep.Problems, 1, rep.String())
		require.Contains(t, rep.Problems[0].Detail, "the fail fault on acquire (calls [1 40]) was never injected: ")
		require.Regexp(t, `only \d+ acquire calls matched it, so its call\(s\) \[40\] never came`, rep.Problems[0].Detail)
	})
}

// plainStore hides every ability of the store it wraps but store.Store's:
// a store that keeps no step records.
type plainStore struct{ store.Store }

// The FaultStore passes step records through to a store that keeps them,
// through the faults of OpSaveStep and OpLoadSteps; a Crash on OpSaveStep
// writes the record, then answers ErrCrashed. Over a store that keeps
// none, it says so (store.KeepsSteps), and a receiver configured for
// steps refuses it at construction.
func TestFaultStoreSteps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	acquire := func(t *testing.T, fs *deduptest.FaultStore, key string) store.Token {
		t.Helper()
		c, err := fs.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
		require.NoError(t, err)
		require.True(t, c.Acquired)
		return c.Token
	}
	names := func(t *testing.T, fs *deduptest.FaultStore, key string, tok store.Token) []string {
		t.Helper()
		recs, err := fs.LoadSteps(ctx, store.StepsRequest{Key: key, Token: tok})
		require.NoError(t, err)
		var out []string
		for _, r := range recs {
			out = append(out, r.Name)
		}
		return out
	}
	save := func(fs *deduptest.FaultStore, key string, tok store.Token, name string) error {
		return fs.SaveStep(ctx, store.SaveStepRequest{Key: key, Token: tok, Name: name, Value: []byte("v"), Retention: time.Hour})
	}

	t.Run("crash after the record", func(t *testing.T) {
		t.Parallel()
		fs, err := deduptest.NewFaultStore(newStepStore(t, clk), 1, deduptest.Fault{Op: deduptest.OpSaveStep, Kind: deduptest.Crash, Key: "a", Calls: []int{2}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = fs.Close() })
		require.True(t, store.KeepsSteps(fs))
		tok := acquire(t, fs, "n:a")
		require.NoError(t, save(fs, "n:a", tok, "charge"))
		err = save(fs, "n:a", tok, "reserve")
		require.ErrorIs(t, err, deduptest.ErrCrashed)
		require.ErrorIs(t, err, store.ErrLeaseLost)
		require.ErrorIs(t, err, dedup.ErrLeaseLost)
		require.EqualError(t, err, `deduptest: worker crashed after the record of step "reserve", before the next step`)
		require.ElementsMatch(t, []string{"charge", "reserve"}, names(t, fs, "n:a", tok), "the crashed step's record is written")
		require.Equal(t, []deduptest.Injection{{Op: deduptest.OpSaveStep, Kind: deduptest.Crash, Key: "n:a", Call: 2}}, fs.Injected())
		require.Equal(t, "crash save-step on \"n:a\" (call 2)", fs.Injected()[0].String())

		// A record the store refuses (another token) is not written: the
		// crash says so, with the store's answer.
		err = save(fs, "n:a", store.NewToken(), "notify")
		require.ErrorIs(t, err, store.ErrLeaseLost, "call 3: not hit, the store's answer")
		require.NotErrorIs(t, err, deduptest.ErrCrashed)
		fs2, err := deduptest.NewFaultStore(newStepStore(t, clk), 1, deduptest.Fault{Op: deduptest.OpSaveStep, Kind: deduptest.Crash})
		require.NoError(t, err)
		acquire(t, fs2, "n:b")
		err = save(fs2, "n:b", store.NewToken(), "charge")
		require.ErrorIs(t, err, deduptest.ErrCrashed)
		require.ErrorContains(t, err, `worker crashed after step "charge", whose record the store refused: `)
	})

	t.Run("the other kinds", func(t *testing.T) {
		t.Parallel()
		fs, err := deduptest.NewFaultStore(newStepStore(t, clk), 1,
			// Each fault counts the calls that reach it: those an earlier
			// fault did not hit.
			deduptest.Fault{Op: deduptest.OpSaveStep, Kind: deduptest.Fail, Key: "a", Calls: []int{1}},
			deduptest.Fault{Op: deduptest.OpSaveStep, Kind: deduptest.LoseAnswer, Key: "a", Calls: []int{1}},
			deduptest.Fault{Op: deduptest.OpSaveStep, Kind: deduptest.LeaseLost, Key: "a", Calls: []int{1}},
			deduptest.Fault{Op: deduptest.OpLoadSteps, Kind: deduptest.Crash, Calls: []int{1}},
			deduptest.Fault{Op: deduptest.OpLoadSteps, Kind: deduptest.Fail, Calls: []int{1}},
		)
		require.NoError(t, err)
		t.Cleanup(func() { _ = fs.Close() })
		tok := acquire(t, fs, "n:a")
		require.ErrorIs(t, save(fs, "n:a", tok, "fail"), deduptest.ErrInjected)
		require.ErrorIs(t, save(fs, "n:a", tok, "lost"), store.ErrUnavailable)
		require.ErrorIs(t, save(fs, "n:a", tok, "lease"), store.ErrLeaseLost)
		_, err = fs.LoadSteps(ctx, store.StepsRequest{Key: "n:a", Token: tok})
		require.ErrorIs(t, err, deduptest.ErrCrashed)
		_, err = fs.LoadSteps(ctx, store.StepsRequest{Key: "n:a", Token: tok})
		require.ErrorIs(t, err, deduptest.ErrInjected)
		require.Equal(t, []string{"lost"}, names(t, fs, "n:a", tok), "only the lost answer's record was applied")
		require.Len(t, fs.Injected(), 5)
	})

	t.Run("over a store that keeps none", func(t *testing.T) {
		t.Parallel()
		mem, err := memstore.New(&memstore.Options{Clock: clk})
		require.NoError(t, err)
		fs, err := deduptest.NewFaultStore(plainStore{mem}, 1)
		require.NoError(t, err)
		require.False(t, store.KeepsSteps(fs))
		tok := acquire(t, fs, "n:a")
		require.ErrorIs(t, save(fs, "n:a", tok, "charge"), store.ErrInvalidConfig)
		_, err = fs.LoadSteps(ctx, store.StepsRequest{Key: "n:a", Token: tok})
		require.ErrorIs(t, err, store.ErrInvalidConfig)
		require.ErrorContains(t, err, "keeps no step records")

		h := func(ctx context.Context, o order) (string, error) { return "", nil }
		key := func(o order) (string, error) { return o.ID, nil }
		_, err = dedup.NewReceiver(fs, key, h, &dedup.Config{Clock: clk, Steps: true})
		require.ErrorIs(t, err, dedup.ErrStepsUnsupported, "the receiver's check stays truthful through the FaultStore")
		fs2, err := deduptest.NewFaultStore(newStepStore(t, clk), 1)
		require.NoError(t, err)
		_, err = dedup.NewReceiver(fs2, key, h, &dedup.Config{Clock: clk, Steps: true})
		require.NoError(t, err)
	})

	t.Run("ops", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, "save-step", deduptest.OpSaveStep.String())
		require.Equal(t, "load-steps", deduptest.OpLoadSteps.String())
		_, err := deduptest.NewFaultStore(newStepStore(t, clk), 1, deduptest.Fault{Op: deduptest.OpLoadSteps + 1, Kind: deduptest.Fail})
		require.ErrorContains(t, err, "is not an operation")
	})
}
