package overredis_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/redisstore"
	"github.com/dedup-go/dedup/store/tieredstore"
)

// The model of one key's record under the store contract, for porcupine.
// Leases and retentions outlast the test, so nothing expires: a record is
// absent, processing under a token, completed by a token with a result, or
// failed.

type opKind uint8

const (
	opAcquire opKind = iota
	opComplete
	opRelease
	opPeek
)

func (k opKind) String() string {
	return [...]string{"Acquire", "Complete", "Release", "Peek"}[k]
}

// modelState is a key's record: kind 0 is absent. token is the holder's
// while processing, the completing one's once completed.
type modelState struct {
	kind   store.State
	token  store.Token
	result string
}

type modelInput struct {
	op     opKind
	key    string
	store  int // which tiered store was called
	token  store.Token
	result string
	batch  bool // Complete through CompleteBatch
}

type modelOutput struct {
	// unknown: the call failed in a way that may or may not have taken
	// effect (a lost answer).
	unknown   bool
	leaseLost bool
	acquired  bool
	token     store.Token // of an acquired claim
	// state and result: the record Acquire reported when it did not
	// claim, or the one Peek answered (state 0: Peek found nothing).
	state  store.State
	result string
}

// unknownHolder holds a key that an Acquire may have claimed when it
// failed: no call in the history carries it.
var unknownHolder = store.Token{0xff}

// settle is the effect of Complete (release false) or Release with token
// on s: the new state, or ok false when the token does not hold the key
// (ErrLeaseLost). Complete with the token that completed the record
// succeeds and changes nothing.
func settle(s modelState, release bool, token store.Token, result string) (modelState, bool) {
	switch {
	case s.kind == store.StateProcessing && s.token == token && release:
		return modelState{kind: store.StateFailed}, true
	case s.kind == store.StateProcessing && s.token == token:
		return modelState{kind: store.StateCompleted, token: token, result: result}, true
	case s.kind == store.StateCompleted && s.token == token && !release:
		return s, true
	default:
		return s, false
	}
}

// recordModel is the store contract for one key as a nondeterministic
// model: a call that failed without a contract error may or may not have
// taken effect.
var recordModel = porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(modelInput).key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() []any { return []any{modelState{}} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(modelState), input.(modelInput), output.(modelOutput)
		claimable := s.kind == 0 || s.kind == store.StateFailed
		switch in.op {
		case opAcquire:
			switch {
			case out.unknown:
				if claimable {
					return []any{s, modelState{kind: store.StateProcessing, token: unknownHolder}}
				}
				return []any{s}
			case out.acquired:
				if claimable {
					return []any{modelState{kind: store.StateProcessing, token: out.token}}
				}
			case out.state == store.StateProcessing && s.kind == store.StateProcessing,
				out.state == store.StateCompleted && s.kind == store.StateCompleted && out.result == s.result:
				return []any{s}
			}
			return nil
		case opComplete, opRelease:
			next, ok := settle(s, in.op == opRelease, in.token, in.result)
			switch {
			case out.unknown:
				return []any{s, next}
			case out.leaseLost == !ok:
				return []any{next}
			}
			return nil
		default: // opPeek: memory may miss, but never answers another record
			if out.state == 0 || (s.kind == store.StateCompleted && out.state == store.StateCompleted && out.result == s.result) {
				return []any{s}
			}
			return nil
		}
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(modelInput), output.(modelOutput)
		var res string
		switch {
		case out.unknown:
			res = "unknown"
		case out.leaseLost:
			res = "lease lost"
		case out.acquired:
			res = "acquired " + out.token.String()[:6]
		case out.state != 0:
			res = out.state.String() + " " + out.result
		default:
			res = "ok/none"
		}
		return fmt.Sprintf("%s@%c(%s %s %s) -> %s", in.op, 'A'+in.store, in.key, in.token.String()[:6], in.result, res)
	},
	DescribeState: func(state any) string {
		s := state.(modelState)
		if s.kind == 0 {
			return "absent"
		}
		return fmt.Sprintf("%s %s %s", s.kind, s.token.String()[:6], s.result)
	},
}

// grant is a claim some worker got, and the tiered store that granted it.
type grant struct {
	token store.Token
	store int
}

// TestTwoTieredStoresLinearizable: workers call two tiered stores (two
// processes) over one Redis concurrently, on a few keys at a time:
// Acquire, Complete (or CompleteBatch) and Release with any claim's token,
// and Peek. The
// remote store loses a quarter of Complete answers after writing, and
// holds some back, so that completions are retried and overlap with the
// same token. The history must be linearizable under the store contract:
// in particular, no Peek or Acquire answers a result the remote store did
// not keep.
//
// Over redisstore, which reports what a Complete wrote
// (store.CompleteReporter), a claim is completed and released through
// either store. Over a remote store that cannot tell (PlainRemote, as
// pgstore), a claim is completed through the tiered store that granted it
// (by any worker, concurrently, again after a lost answer) and released
// through either: a token completed first through another Store is the one
// completion such a tiered store cannot see (see the package
// documentation).
func TestTwoTieredStoresLinearizable(t *testing.T) {
	t.Parallel()
	t.Run("ReportingRemote", func(t *testing.T) {
		t.Parallel()
		testLinearizable(t, true)
	})
	t.Run("PlainRemote", func(t *testing.T) {
		t.Parallel()
		testLinearizable(t, false)
	})
}

// testLinearizable runs TestTwoTieredStoresLinearizable over a remote
// store that reports what a Complete wrote, or not.
func testLinearizable(t *testing.T, report bool) {
	c := redistest.Client(t)
	prefix := redistest.Prefix(t, c)
	const (
		rounds  = 40
		workers = 6
		steps   = 12
		keys    = 2
	)
	stores := make([]*tieredstore.Store, 2)
	for i := range stores {
		r, err := redisstore.New(context.Background(), c, &redisstore.Options{Prefix: prefix})
		require.NoError(t, err)
		faulty := &faultyRemote{Store: r, afterComplete: func(ctx context.Context, _ store.CompleteRequest) error {
			if rand.IntN(3) == 0 { // hold the answer back: another call overtakes it
				select {
				case <-time.After(time.Duration(rand.IntN(2000)) * time.Microsecond):
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			if rand.IntN(4) == 0 {
				return errAnswerLost
			}
			return nil
		}}
		stores[i], err = tieredstore.New(wrap(faulty, report), &tieredstore.Options{ClockSkew: 5 * time.Millisecond})
		require.NoError(t, err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	t0 := time.Now()
	now := func() int64 { return int64(time.Since(t0)) }
	var (
		mu      sync.Mutex
		history []porcupine.Operation
	)
	for round := range rounds {
		var grantsMu sync.Mutex
		grants := map[string][]grant{}
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for step := range steps {
					key := fmt.Sprintf("lin:r%d-k%d", round, rand.IntN(keys))
					in := modelInput{op: opKind(rand.IntN(4)), key: key, store: rand.IntN(2), result: fmt.Sprintf("w%d.%d", w, step), batch: rand.IntN(2) == 0}
					if in.op == opComplete || in.op == opRelease {
						grantsMu.Lock()
						gs := grants[key]
						grantsMu.Unlock()
						if len(gs) == 0 {
							in.op = opPeek
						} else {
							g := gs[rand.IntN(len(gs))]
							in.token = g.token
							if in.op == opComplete && !report {
								in.store = g.store // see the test's doc
							}
						}
					}
					call := now()
					out, err := run(ctx, stores[in.store], in)
					ret := now()
					if err != nil {
						t.Errorf("%s through %c on %s: %v", in.op, 'A'+in.store, key, err)
						return
					}
					if out.acquired {
						grantsMu.Lock()
						grants[key] = append(grants[key], grant{token: out.token, store: in.store})
						grantsMu.Unlock()
					}
					mu.Lock()
					history = append(history, porcupine.Operation{ClientId: w, Input: in, Call: call, Output: out, Return: ret})
					mu.Unlock()
				}
			})
		}
		testenv.Wait(t, &wg, fmt.Sprintf("the workers of round %d", round))
		if t.Failed() {
			return
		}
	}

	counts := map[string]int{}
	for _, op := range history {
		in, out := op.Input.(modelInput), op.Output.(modelOutput)
		counts[in.op.String()]++
		switch {
		case out.unknown:
			counts[in.op.String()+" unknown"]++
		case in.op == opPeek && out.state == store.StateCompleted:
			counts["Peek hit"]++
		}
	}
	t.Logf("operations: %v", counts)
	model := recordModel.ToModel()
	res, info := porcupine.CheckOperationsVerbose(model, history, 30*time.Second)
	if res != porcupine.Ok {
		path := filepath.Join(os.TempDir(), fmt.Sprintf("tieredstore-linearizability-%d.html", time.Now().UnixNano()))
		if err := porcupine.VisualizePath(model, info, path); err != nil {
			t.Logf("visualization: %v", err)
		} else {
			t.Logf("visualization of the history: %s", path)
		}
	}
	require.Equal(t, porcupine.Ok, res, "the history of %d operations is not linearizable under the store contract", len(history))
}

// run makes the call in through s and returns its outcome for the model,
// or an error that is neither the contract's nor a lost answer.
func run(ctx context.Context, s *tieredstore.Store, in modelInput) (modelOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var (
		out modelOutput
		err error
	)
	switch in.op {
	case opAcquire:
		var c store.Claim
		c, err = s.Acquire(ctx, store.AcquireRequest{Key: in.key, Lease: time.Minute})
		out = modelOutput{acquired: c.Acquired, token: c.Token, state: c.Record.State, result: string(c.Record.Result)}
		if c.Acquired {
			out.state, out.result = 0, ""
		}
	case opComplete:
		req := store.CompleteRequest{Key: in.key, Token: in.token, Result: []byte(in.result), Retention: time.Hour}
		if in.batch {
			err = s.CompleteBatch(ctx, []store.CompleteRequest{req})[0]
		} else {
			err = s.Complete(ctx, req)
		}
	case opRelease:
		err = s.Release(ctx, store.ReleaseRequest{Key: in.key, Token: in.token, Error: in.result, Retention: time.Hour})
	case opPeek:
		if rec := s.Peek(store.SplitKey(in.key)); rec != nil {
			out = modelOutput{state: rec.State, result: string(rec.Result)}
		}
	}
	switch {
	case err == nil:
		return out, nil
	case errors.Is(err, store.ErrLeaseLost):
		return modelOutput{leaseLost: true}, nil
	case errors.Is(err, errAnswerLost) || errors.Is(err, store.ErrUnavailable):
		return modelOutput{unknown: true}, nil
	default:
		return modelOutput{}, err
	}
}
