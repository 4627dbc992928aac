package tieredstore_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/memstore"
	"github.com/dedup-go/dedup/store/tieredstore"
)

// TestKeepsStepsOnlyOverStepStore: a Store has the StepStore methods
// whatever its remote store, and says whether it keeps step records
// (store.StepsKept) exactly when the remote store does: over one that is
// no StepStore, or a wrapper that says it keeps none (a tiered store over
// such a remote), it does not, and LoadSteps and SaveStep fail with an
// error naming the remote store, reaching no store.
func TestKeepsStepsOnlyOverStepStore(t *testing.T) {
	t.Parallel()
	m, err := memstore.New(nil)
	require.NoError(t, err)
	s, err := tieredstore.New(m, nil)
	require.NoError(t, err)
	require.True(t, s.KeepsSteps())
	require.True(t, store.KeepsSteps(s), "over a memstore")

	plain, err := tieredstore.New(struct{ store.BatchStore }{m}, nil)
	require.NoError(t, err)
	over, err := tieredstore.New(plain, nil)
	require.NoError(t, err)
	ctx := t.Context()
	c, err := m.Acquire(ctx, store.AcquireRequest{Key: "ns:k", Lease: time.Minute})
	require.NoError(t, err)
	for remote, s := range map[string]*tieredstore.Store{
		fmt.Sprintf("%T", struct{ store.BatchStore }{}): plain,
		fmt.Sprintf("%T", plain):                        over,
	} {
		require.False(t, s.KeepsSteps(), "over %s", remote)
		require.False(t, store.KeepsSteps(s), "over %s", remote)
		err := s.SaveStep(ctx, store.SaveStepRequest{Key: "ns:k", Token: c.Token, Name: "charge"})
		require.ErrorIs(t, err, store.ErrInvalidConfig)
		require.ErrorContains(t, err, "the remote store ("+remote+") keeps no step records")
		_, err = s.LoadSteps(ctx, store.StepsRequest{Key: "ns:k", Token: c.Token})
		require.ErrorIs(t, err, store.ErrInvalidConfig)
		require.ErrorContains(t, err, "the remote store ("+remote+") keeps no step records")
	}
	rec, err := m.Get(ctx, "ns:k")
	require.NoError(t, err)
	require.Empty(t, rec.Steps, "nothing reached the store")
}

// TestStepsAreTheRemotes: step records go to the remote store and come
// from it, through every move of the record; the local tier keeps none,
// and Get, Scan and DeleteIf answer with the remote's.
func TestStepsAreTheRemotes(t *testing.T) {
	t.Parallel()
	s, remote, clk := setup(t, nil)
	ctx := t.Context()
	saveStep := func(key string, token store.Token, name, value string) {
		t.Helper()
		require.NoError(t, s.SaveStep(ctx, store.SaveStepRequest{Key: key, Token: token, Name: name, Value: []byte(value), Retention: time.Hour}))
	}
	names := func(steps []store.StepRecord) map[string]string {
		m := map[string]string{}
		for _, st := range steps {
			m[st.Name] = string(st.Value)
		}
		return m
	}
	load := func(key string, token store.Token) map[string]string {
		t.Helper()
		steps, err := s.LoadSteps(ctx, store.StepsRequest{Key: key, Token: token})
		require.NoError(t, err)
		return names(steps)
	}

	c := acquire(t, s, "ns:k", "")
	require.Empty(t, load("ns:k", c.Token), "a fresh record has none")
	saveStep("ns:k", c.Token, "charge", "ch_1")
	steps, err := remote.LoadSteps(ctx, store.StepsRequest{Key: "ns:k", Token: c.Token})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"charge": "ch_1"}, names(steps), "the remote store holds them")

	// A failure, its retry, a takeover after the lease: the remote's rules.
	require.NoError(t, s.Release(ctx, store.ReleaseRequest{Key: "ns:k", Token: c.Token, Error: "boom", Retention: time.Hour}))
	c = acquire(t, s, "ns:k", "")
	require.Equal(t, map[string]string{"charge": "ch_1"}, load("ns:k", c.Token))
	saveStep("ns:k", c.Token, "ship", "sh_1")
	clk.Advance(time.Minute)
	old := c
	c = acquire(t, s, "ns:k", "")
	require.Equal(t, map[string]string{"charge": "ch_1", "ship": "sh_1"}, load("ns:k", c.Token))
	_, err = s.LoadSteps(ctx, store.StepsRequest{Key: "ns:k", Token: old.Token})
	require.ErrorIs(t, err, store.ErrLeaseLost, "the remote store fences")
	err = s.SaveStep(ctx, store.SaveStepRequest{Key: "ns:k", Token: old.Token, Name: "bad\xff"})
	require.ErrorIs(t, err, store.ErrInvalidConfig, "the remote store checks names")

	complete(t, s, "ns:k", c.Token, "ok")
	require.NotNil(t, s.Peek("ns:", "k"), "cached locally")
	require.Nil(t, s.Peek("ns:", "k").Steps, "without steps")
	rec, err := s.Get(ctx, "ns:k")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"charge": "ch_1", "ship": "sh_1"}, names(rec.Steps), "Get answers with the remote's")
	n := 0
	for rec, err := range s.Scan(ctx, "ns:") {
		require.NoError(t, err)
		require.Equal(t, map[string]string{"charge": "ch_1", "ship": "sh_1"}, names(rec.Steps), "Scan answers with the remote's")
		n++
	}
	require.Equal(t, 1, n)

	deleted, rec, err := s.DeleteIf(ctx, store.DeleteRequest{Key: "ns:k"})
	require.NoError(t, err)
	require.True(t, deleted)
	require.Len(t, rec.Steps, 2)
	require.Nil(t, s.Peek("ns:", "k"), "the local copy went with it")
	c = acquire(t, s, "ns:k", "")
	require.Equal(t, 1, c.Record.Attempt)
	require.Empty(t, load("ns:k", c.Token), "deleted with the remote record")
}

// TestStepsConcurrentThroughTier: concurrent holders record and read
// their steps through one StepStore; run with -race.
func TestStepsConcurrentThroughTier(t *testing.T) {
	t.Parallel()
	s, _, _ := setup(t, nil)
	ctx := t.Context()
	const workers, steps = 8, 40
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			key := fmt.Sprintf("ns:%d", w)
			c, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Hour})
			if err != nil || !c.Acquired {
				errs <- fmt.Errorf("acquire %s: %v", key, err)
				return
			}
			for i := range steps {
				if err := s.SaveStep(ctx, store.SaveStepRequest{Key: key, Token: c.Token, Name: fmt.Sprint(i), Value: []byte(key)}); err != nil {
					errs <- err
					return
				}
				got, err := s.LoadSteps(ctx, store.StepsRequest{Key: key, Token: c.Token})
				if err != nil || len(got) != i+1 {
					errs <- fmt.Errorf("%s after %d steps: %d, %v", key, i+1, len(got), err)
					return
				}
			}
			errs <- s.Complete(ctx, store.CompleteRequest{Key: key, Token: c.Token, Retention: time.Hour})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for w := range workers {
		rec, err := s.Get(ctx, fmt.Sprintf("ns:%d", w))
		require.NoError(t, err)
		require.Len(t, rec.Steps, steps)
	}
}
