package bench

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/memstore"
	"github.com/dedup-go/dedup/store/redisstore"
)

// The rows of recorded steps (dedup.Step): what a handler of three steps
// costs beside the same handler without steps, on its first run and on a
// retry whose three steps all completed before (one read of the step
// records, no write), over memstore and over Redis, where each record is
// a round trip.

// stepsUsed is how many steps the handlers of these rows run.
const stepsUsed = 3

// stepWork is the work of one step: a little arithmetic, so that the rows
// measure the recording, not the step.
func stepWork(o order, i int) (int, error) { return o.Amount*31 + i, nil }

// plainHandler does the three steps' work without recording them.
func plainHandler(_ context.Context, o order) (int, error) {
	sum := 0
	for i := range stepsUsed {
		v, _ := stepWork(o, i)
		sum += v
	}
	return sum, nil
}

// stepNames are the steps' names, made once.
var stepNames = func() []string {
	n := make([]string, stepsUsed)
	for i := range n {
		n[i] = "step-" + strconv.Itoa(i)
	}
	return n
}()

// stepHandler runs the three steps recorded; while *fail is set it fails
// after them, as a retry's first run does.
func stepHandler(fail *atomic.Bool) dedup.Handler[order, int] {
	return func(ctx context.Context, o order) (int, error) {
		sum := 0
		for i, name := range stepNames {
			v, err := dedup.Step(ctx, name, func(context.Context) (int, error) { return stepWork(o, i) })
			if err != nil {
				return 0, err
			}
			sum += v
		}
		if fail.Load() {
			return 0, errFirstRun
		}
		return sum, nil
	}
}

var errFirstRun = errors.New("the first run fails after its steps")

// stepSides returns the sides of a steps row over the stores newStore makes
// (one per side and run, with the receivers' Config.Steps set on the
// steps' sides).
func stepSides(newStore func(tb testing.TB) store.Store) []side {
	ctx := context.Background()
	handle := func(tb testing.TB, rcv *dedup.Receiver[order, int], o order, want delivery.Status) {
		if res, err := rcv.Handle(ctx, o); err != nil || res.Status != want {
			tb.Fatalf("status %v, %v; want %v", res.Status, err, want)
		}
	}
	receiver := func(tb testing.TB, h dedup.Handler[order, int], steps bool) *dedup.Receiver[order, int] {
		rcv, err := dedup.NewReceiver(newStore(tb), orderID, h, &dedup.Config{Steps: steps, Backoff: dedup.BackoffFunc(func(int) time.Duration { return 0 })})
		if err != nil {
			tb.Fatal(err)
		}
		return rcv
	}
	// retry times the second run of n messages whose first run failed
	// (after its steps, for a handler with steps).
	retry := func(tb testing.TB, rcv *dedup.Receiver[order, int], fail *atomic.Bool, prefix string, n int) sample {
		keys := ids(runPrefix(prefix), n)
		fail.Store(true)
		for i := range n { // the first runs, outside the clock
			if _, err := rcv.Handle(ctx, order{ID: keys[i], Amount: i}); !errors.Is(err, errFirstRun) {
				tb.Fatalf("first run: %v", err)
			}
		}
		fail.Store(false)
		cpu := processCPU() // the retries' own CPU, not the first runs'
		s := timed(n, func(i int) { handle(tb, rcv, order{ID: keys[i], Amount: i}, delivery.StatusProcessed) })
		s.cpu = float64((processCPU() - cpu).Nanoseconds()) / float64(n)
		return s
	}
	return []side{
		{name: "dedup Handle, the work done in the handler, no steps", run: func(tb testing.TB, n int) sample {
			rcv := receiver(tb, plainHandler, false)
			keys := ids(runPrefix("plain"), n)
			return timed(n, func(i int) { handle(tb, rcv, order{ID: keys[i], Amount: i}, delivery.StatusProcessed) })
		}},
		{name: "dedup Handle, 3 steps, first run (3 records written)", run: func(tb testing.TB, n int) sample {
			var fail atomic.Bool
			rcv := receiver(tb, stepHandler(&fail), true)
			keys := ids(runPrefix("steps"), n)
			return timed(n, func(i int) { handle(tb, rcv, order{ID: keys[i], Amount: i}, delivery.StatusProcessed) })
		}},
		{name: "dedup Handle, no steps, a retry", run: func(tb testing.TB, n int) sample {
			var fail atomic.Bool
			rcv := receiver(tb, failingPlain(&fail), false)
			return retry(tb, rcv, &fail, "plainretry", n)
		}},
		{name: "dedup Handle, 3 steps completed before, a retry (1 read)", run: func(tb testing.TB, n int) sample {
			var fail atomic.Bool
			rcv := receiver(tb, stepHandler(&fail), true)
			s := retry(tb, rcv, &fail, "retry", n)
			if st := rcv.Stats(); st.StepsReplayed != uint64(stepsUsed*n) {
				tb.Fatalf("%d steps replayed, want %d", st.StepsReplayed, stepsUsed*n)
			}
			return s
		}},
	}
}

// stepVersus compares each first run, and each retry, with and without
// steps.
var stepVersus = []versus{
	{name: "3 steps over no steps, first run", a: 1, b: 0},
	{name: "3 steps completed before over no steps, a retry", a: 3, b: 2},
}

// failingPlain is plainHandler failing while *fail is set.
func failingPlain(fail *atomic.Bool) dedup.Handler[order, int] {
	return func(ctx context.Context, o order) (int, error) {
		v, err := plainHandler(ctx, o)
		if fail.Load() {
			return 0, errFirstRun
		}
		return v, err
	}
}

func init() {
	register(row{
		name: "a handler of 3 steps, memstore",
		unit: "ns/op", n: 20_000, chunk: 1000, allocs: true,
		versus: stepVersus,
		setup: func(tb testing.TB) []side {
			return stepSides(func(tb testing.TB) store.Store {
				st, err := memstore.New(nil)
				if err != nil {
					tb.Fatal(err)
				}
				return st
			})
		},
	}, row{
		name: "a handler of 3 steps, Redis (redisstore), sequential",
		unit: "ns/op", n: 2000, chunk: 100, cpu: true,
		versus: stepVersus,
		setup: func(tb testing.TB) []side {
			c := startRedis(tb)
			return stepSides(func(tb testing.TB) store.Store {
				st, err := redisstore.New(context.Background(), c, nil)
				if err != nil {
					tb.Fatal(err)
				}
				return st
			})
		},
	})
}
