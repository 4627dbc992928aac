package mysqlstore_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/tieredstore"
)

// The model of one key's record under the store contract, for porcupine,
// with leases that expire during the test (2 to 40 ms): an Acquire may
// take over a claim whose lease had ended by the time it returned, and is
// refused by one whose lease was live when it was called. Every takeover
// and retry counts one attempt; a claim granted again to its own token
// (store.AcquireRequest.Token) counts none. Retentions outlast the test.
//
// The database's clock and the test's are one (the server runs on this
// machine and both read the system's real-time clock), so a time the
// store answers (a lease's end) compares with the test's readings before
// and after each call, in microseconds since the epoch.

type linOp uint8

const (
	linAcquire linOp = iota
	linComplete
	linRelease
	linPeek
)

func (k linOp) String() string { return [...]string{"Acquire", "Complete", "Release", "Peek"}[k] }

// linState is a key's record: kind 0 is absent. token is the holder's
// while processing, the one that settled it afterwards.
type linState struct {
	kind       store.State
	token      store.Token
	attempt    int
	leaseUntil int64 // µs, while processing
	result     string
}

type linInput struct {
	op        linOp
	key       string
	store     int         // which store was called (tiered: A or B)
	token     store.Token // the caller's (Acquire: zero asks for a fresh one)
	lease     time.Duration
	result    string
	call, ret int64 // µs: the test's clock before and after the call
}

type linOutput struct {
	leaseLost  bool
	acquired   bool
	token      store.Token
	state      store.State // of a refused Acquire, or of what Peek found
	attempt    int
	leaseUntil int64 // µs: of an acquired claim, or of the holder of a refused one
	result     string
}

// linModel checks one key's history (every history here is of one key).
var linModel = porcupine.Model{
	Init: func() any { return linState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(linState), input.(linInput), output.(linOutput)
		own := !in.token.IsZero() && s.kind == store.StateProcessing && s.token == in.token
		switch in.op {
		case linAcquire:
			switch {
			case out.acquired:
				// The lease runs from the moment of the claim, inside the call.
				start := out.leaseUntil - in.lease.Microseconds()
				if start < in.call-1 || start > in.ret+1 {
					return false, s
				}
				if !in.token.IsZero() && out.token != in.token {
					return false, s
				}
				want := 0
				switch {
				case s.kind == 0:
					want = 1
				case own:
					want = s.attempt
				case s.kind == store.StateFailed:
					want = s.attempt + 1
				case s.kind == store.StateProcessing && s.leaseUntil <= in.ret:
					want = s.attempt + 1
				}
				if want == 0 || out.attempt != want {
					return false, s
				}
				return true, linState{kind: store.StateProcessing, token: out.token, attempt: out.attempt, leaseUntil: out.leaseUntil}
			case out.state == store.StateProcessing:
				ok := s.kind == store.StateProcessing && !own && s.leaseUntil > in.call &&
					out.attempt == s.attempt && out.leaseUntil == s.leaseUntil
				return ok, s
			case out.state == store.StateCompleted:
				return s.kind == store.StateCompleted && out.result == s.result && out.attempt == s.attempt, s
			}
			return false, s
		case linComplete, linRelease:
			holds := s.kind == store.StateProcessing && s.token == in.token
			switch {
			case holds && !out.leaseLost && in.op == linRelease:
				return true, linState{kind: store.StateFailed, token: in.token, attempt: s.attempt}
			case holds && !out.leaseLost:
				return true, linState{kind: store.StateCompleted, token: in.token, attempt: s.attempt, result: in.result}
			case in.op == linComplete && s.kind == store.StateCompleted && s.token == in.token:
				return !out.leaseLost, s // completed again with its token: unchanged
			case holds:
				// A lease that ended before the call returned may be lost:
				// the store may fail the call, without effect.
				return s.leaseUntil <= in.ret, s
			}
			return out.leaseLost, s
		default: // linPeek: memory may miss, but never answers another record
			return out.state == 0 || (s.kind == store.StateCompleted && out.state == store.StateCompleted && out.result == s.result), s
		}
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(linInput), output.(linOutput)
		var res string
		switch {
		case out.leaseLost:
			res = "lease lost"
		case out.acquired:
			res = fmt.Sprintf("acquired %s attempt %d until %d", out.token.String()[:6], out.attempt, out.leaseUntil)
		case out.state != 0:
			res = fmt.Sprintf("%s attempt %d until %d %s", out.state, out.attempt, out.leaseUntil, out.result)
		default:
			res = "ok/none"
		}
		return fmt.Sprintf("%s@%c(%s %s lease %v %s) [%d, %d] -> %s", in.op, 'A'+in.store, in.key, in.token.String()[:6], in.lease, in.result, in.call, in.ret, res)
	},
	DescribeState: func(state any) string {
		s := state.(linState)
		if s.kind == 0 {
			return "absent"
		}
		return fmt.Sprintf("%s %s attempt %d until %d %s", s.kind, s.token.String()[:6], s.attempt, s.leaseUntil, s.result)
	},
}

// linearizableHistories is how many histories a linearizability test
// checks: 50 in the ordinary suite, DEDUP_TEST_LINEARIZABLE_HISTORIES
// (300 for the full run) otherwise.
func linearizableHistories(t *testing.T) int {
	t.Helper()
	v := os.Getenv("DEDUP_TEST_LINEARIZABLE_HISTORIES")
	if v == "" {
		return 50
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, "DEDUP_TEST_LINEARIZABLE_HISTORIES")
	require.Positive(t, n, "DEDUP_TEST_LINEARIZABLE_HISTORIES")
	return n
}

// linStore is what the test calls: a mysqlstore, or a tieredstore over
// one.
type linStore interface {
	store.Store
}

// TestLinearizable: workers claim, complete and release a few keys of
// mysqlstore concurrently, with leases of 2 to 40 ms, so that leases end
// mid-history and claims take each other over; some Acquires ask again
// with the token of the worker's last claim of the key, as a caller whose
// answer was lost does. Each key's history must be linearizable under the
// contract: no attempt counted without a claim granted for it, no claim
// refused by a lease that had ended, none taken over while it was live.
// Run alone, and through two tieredstores (two processes) over one table,
// which also Peek. Each history is one round on a key of its own;
// DEDUP_TEST_LINEARIZABLE_HISTORIES sets how many (default 50; the full
// check is 300).
func TestLinearizable(t *testing.T) {
	t.Parallel()
	histories := linearizableHistories(t)
	t.Run("Alone", func(t *testing.T) {
		t.Parallel()
		d := newDB(t, 16)
		s := d.store(t, nil)
		testLinearizable(t, histories, []linStore{s, s})
	})
	t.Run("TwoTiered", func(t *testing.T) {
		t.Parallel()
		d := newDB(t, 16)
		stores := make([]linStore, 2)
		for i := range stores {
			ts, err := tieredstore.New(d.store(t, nil), &tieredstore.Options{ClockSkew: 5 * time.Millisecond})
			require.NoError(t, err)
			stores[i] = ts
		}
		testLinearizable(t, histories, stores)
	})
}

func testLinearizable(t *testing.T, histories int, stores []linStore) {
	const (
		workers = 6
		steps   = 10
		keys    = 2 // histories made at once, each on a key of its own
	)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	illegal, ops := 0, 0
	counts := map[string]int{}
	for round := 0; round*keys < histories; round++ {
		var (
			mu      sync.Mutex
			history = map[string][]porcupine.Operation{}
			grants  = map[string][]store.Token{}
			wg      sync.WaitGroup
		)
		for w := range workers {
			wg.Go(func() {
				// lost holds, per key, the token of a claim whose answer this
				// worker ignored, as if the store's answer had been lost: it
				// asks again with it, once, before using it for anything.
				lost := map[string]store.Token{}
				for step := range steps {
					key := fmt.Sprintf("lin:%d:%d", round, rand.IntN(keys))
					in := linInput{op: linOp(rand.IntN(4)), key: key, store: rand.IntN(len(stores)), result: fmt.Sprintf("w%d.%d", w, step)}
					switch in.op {
					case linAcquire:
						in.lease = time.Duration(2+rand.IntN(39)) * time.Millisecond
						if tok, ok := lost[key]; ok {
							in.token = tok // asked again, as after a lost answer
							delete(lost, key)
						} else if rand.IntN(2) == 0 {
							in.token = store.NewToken()
						}
					case linComplete, linRelease:
						mu.Lock()
						gs := grants[key]
						mu.Unlock()
						if len(gs) == 0 {
							in.op = linPeek
						} else {
							in.token = gs[rand.IntN(len(gs))]
						}
					}
					if _, ok := stores[in.store].(store.Peeker); in.op == linPeek && !ok {
						in.op, in.lease = linAcquire, 5*time.Millisecond
					}
					in.call = time.Now().UnixMicro()
					out, err := runLin(ctx, stores[in.store], in)
					in.ret = time.Now().UnixMicro() + 1
					if err != nil {
						t.Errorf("%s through %c on %s: %v", in.op, 'A'+in.store, key, err)
						return
					}
					mu.Lock()
					switch {
					case out.acquired && !in.token.IsZero() && rand.IntN(3) == 0:
						if _, again := lost[key]; !again {
							lost[key] = out.token // the answer "lost": not a grant yet
							break
						}
						fallthrough
					case out.acquired:
						grants[key] = append(grants[key], out.token)
					}
					history[key] = append(history[key], porcupine.Operation{ClientId: w, Input: in, Call: in.call, Output: out, Return: in.ret})
					mu.Unlock()
				}
			})
		}
		testenv.Wait(t, &wg, fmt.Sprintf("the workers of round %d", round))
		if t.Failed() {
			return
		}
		for key, h := range history {
			ops += len(h)
			for _, op := range h {
				in, out := op.Input.(linInput), op.Output.(linOutput)
				counts[in.op.String()]++
				switch {
				case in.op == linAcquire && out.acquired && !in.token.IsZero() && out.attempt > 1:
					counts["Acquire granted, caller's token, attempt > 1"]++
				case in.op == linAcquire && out.acquired && out.attempt > 1:
					counts["Acquire granted, attempt > 1"]++
				case out.leaseLost:
					counts[in.op.String()+" lease lost"]++
				}
			}
			res, info := porcupine.CheckOperationsVerbose(linModel, h, 30*time.Second)
			if res == porcupine.Ok {
				continue
			}
			illegal++
			if illegal == 1 {
				path := filepath.Join(t.TempDir(), "history.html")
				if err := porcupine.VisualizePath(linModel, info, path); err == nil {
					t.Logf("the first illegal history (%s, %v): %s", key, res, path)
				}
				sorted := slices.Clone(h)
				slices.SortFunc(sorted, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
				for _, op := range sorted {
					if in := op.Input.(linInput); in.op != linPeek {
						t.Logf("  %s", linModel.DescribeOperation(op.Input, op.Output))
					}
				}
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("out of time after %d rounds", round+1)
		}
	}
	t.Logf("%d histories, %d operations: %v", histories, ops, counts)
	require.Zero(t, illegal, "%d of %d histories are not linearizable under the store contract", illegal, histories)
}

// runLin makes the call in through s and returns its outcome for the
// model, or an error that is not the contract's.
func runLin(ctx context.Context, s linStore, in linInput) (linOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, testenv.WaitTimeout)
	defer cancel()
	var (
		out linOutput
		err error
	)
	switch in.op {
	case linAcquire:
		var c store.Claim
		c, err = s.Acquire(ctx, store.AcquireRequest{Key: in.key, Lease: in.lease, Token: in.token})
		out = linOutput{acquired: c.Acquired, token: c.Token, state: c.Record.State, attempt: c.Record.Attempt, result: string(c.Record.Result)}
		if c.Record.State == store.StateProcessing {
			out.leaseUntil = c.Record.LeaseUntil.UnixMicro()
		}
		if c.Acquired {
			out.state, out.result = 0, ""
		}
	case linComplete:
		err = s.Complete(ctx, store.CompleteRequest{Key: in.key, Token: in.token, Result: []byte(in.result), Retention: time.Hour})
	case linRelease:
		err = s.Release(ctx, store.ReleaseRequest{Key: in.key, Token: in.token, Error: in.result, Retention: time.Hour})
	case linPeek:
		if rec := s.(store.Peeker).Peek(store.SplitKey(in.key)); rec != nil {
			out = linOutput{state: rec.State, result: string(rec.Result)}
		}
	}
	switch {
	case err == nil:
		return out, nil
	case errors.Is(err, store.ErrLeaseLost):
		return linOutput{leaseLost: true}, nil
	default:
		return linOutput{}, err
	}
}
