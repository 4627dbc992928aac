package memstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/memstore"
)

// save records step name with value for key held by token.
func save(t *testing.T, s *memstore.Store, key string, token store.Token, name, value string) {
	t.Helper()
	require.NoError(t, s.SaveStep(ctx, store.SaveStepRequest{Key: key, Token: token, Name: name, Value: []byte(value), Retention: retention}))
}

// stepMap returns steps as a map of name to value, failing on a repeated
// name.
func stepMap(t *testing.T, steps []store.StepRecord) map[string]string {
	t.Helper()
	m := make(map[string]string, len(steps))
	for _, st := range steps {
		_, dup := m[st.Name]
		require.False(t, dup, "step %q twice", st.Name)
		m[st.Name] = string(st.Value)
	}
	return m
}

// loadSteps returns the step records of key held by token, as a map.
func loadSteps(t *testing.T, s *memstore.Store, key string, token store.Token) map[string]string {
	t.Helper()
	steps, err := s.LoadSteps(ctx, store.StepsRequest{Key: key, Token: token})
	require.NoError(t, err)
	return stepMap(t, steps)
}

// getSteps returns the step records the Inspector's Get answers for key.
func getSteps(t *testing.T, s *memstore.Store, key string) map[string]string {
	t.Helper()
	rec, err := s.Get(ctx, key)
	require.NoError(t, err)
	return stepMap(t, rec.Steps)
}

// claim claims key, which must be claimable, and returns the claim.
func claim(t *testing.T, s *memstore.Store, key string) store.Claim {
	t.Helper()
	c := acquire(t, s, key)
	require.True(t, c.Acquired, "Acquire(%q) found a %s record", key, c.Record.State)
	return c
}

func release(t *testing.T, s *memstore.Store, key string, token store.Token) {
	t.Helper()
	require.NoError(t, s.Release(ctx, store.ReleaseRequest{Key: key, Token: token, Error: "boom", Retention: retention}))
}

// TestStepsFreshRecordHasNone: a key claimed for the first time has no
// step records, and neither does one claimed again after its record
// expired (completed or failed) or was deleted.
func TestStepsFreshRecordHasNone(t *testing.T) {
	t.Parallel()
	s, clk := setup(t, 0)
	c := claim(t, s, "k")
	require.Empty(t, loadSteps(t, s, "k", c.Token))
	rec, err := s.Get(ctx, "k")
	require.NoError(t, err)
	require.Nil(t, rec.Steps)

	// Completed, then expired.
	save(t, s, "k", c.Token, "charge", "ch_1")
	require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: "k", Token: c.Token, Retention: retention}))
	clk.Advance(retention)
	c = claim(t, s, "k")
	require.Equal(t, 1, c.Record.Attempt, "a fresh record")
	require.Empty(t, loadSteps(t, s, "k", c.Token), "the expired completed record's steps are gone")

	// Failed, then expired.
	save(t, s, "k", c.Token, "charge", "ch_2")
	release(t, s, "k", c.Token)
	clk.Advance(retention)
	c = claim(t, s, "k")
	require.Equal(t, 1, c.Record.Attempt, "a fresh record")
	require.Empty(t, loadSteps(t, s, "k", c.Token), "the expired failed record's steps are gone")
}

// TestStepsSurviveRelease: the retry that takes a failed key over finds
// the steps of the attempts before it, and adds to them.
func TestStepsSurviveRelease(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, 0)
	c := claim(t, s, "k")
	save(t, s, "k", c.Token, "charge", "ch_1")
	release(t, s, "k", c.Token)
	require.Equal(t, map[string]string{"charge": "ch_1"}, getSteps(t, s, "k"), "the failed record keeps them")

	c = claim(t, s, "k")
	require.Equal(t, 2, c.Record.Attempt)
	require.Equal(t, map[string]string{"charge": "ch_1"}, loadSteps(t, s, "k", c.Token))
	save(t, s, "k", c.Token, "ship", "sh_1")
	release(t, s, "k", c.Token)
	c = claim(t, s, "k")
	require.Equal(t, map[string]string{"charge": "ch_1", "ship": "sh_1"}, loadSteps(t, s, "k", c.Token))
}

// TestStepsSurviveTakeover: a claim that takes over a key whose lease
// ended finds the steps its first holder recorded, and that holder is
// fenced off them.
func TestStepsSurviveTakeover(t *testing.T) {
	t.Parallel()
	s, clk := setup(t, 0)
	first := claim(t, s, "k")
	save(t, s, "k", first.Token, "charge", "ch_1")
	clk.Advance(lease)
	second := claim(t, s, "k")
	require.Equal(t, map[string]string{"charge": "ch_1"}, loadSteps(t, s, "k", second.Token))

	_, err := s.LoadSteps(ctx, store.StepsRequest{Key: "k", Token: first.Token})
	require.ErrorIs(t, err, store.ErrLeaseLost)
	err = s.SaveStep(ctx, store.SaveStepRequest{Key: "k", Token: first.Token, Name: "charge", Value: []byte("stale")})
	require.ErrorIs(t, err, store.ErrLeaseLost)
	require.Equal(t, map[string]string{"charge": "ch_1"}, loadSteps(t, s, "k", second.Token), "the fenced write changed nothing")
}

// TestStepsLenientAfterLeaseEnd: as Complete and Extend, a holder whose
// lease ended still reads and writes its steps while no other Acquire
// took the key over.
func TestStepsLenientAfterLeaseEnd(t *testing.T) {
	t.Parallel()
	s, clk := setup(t, 0)
	c := claim(t, s, "k")
	clk.Advance(2 * lease)
	save(t, s, "k", c.Token, "charge", "ch_1")
	require.Equal(t, map[string]string{"charge": "ch_1"}, loadSteps(t, s, "k", c.Token))
}

// TestStepsSurviveOwnTokenAgain: a lost answer's Acquire, granted again
// with its own token, keeps the steps.
func TestStepsSurviveOwnTokenAgain(t *testing.T) {
	t.Parallel()
	s, clk := setup(t, 0)
	token := store.NewToken()
	req := store.AcquireRequest{Key: "k", Lease: lease, Token: token}
	c, err := s.Acquire(ctx, req)
	require.NoError(t, err)
	require.True(t, c.Acquired)
	save(t, s, "k", token, "charge", "ch_1")
	for _, wait := range []time.Duration{0, 2 * lease} { // live lease, then ended
		clk.Advance(wait)
		c, err = s.Acquire(ctx, req)
		require.NoError(t, err)
		require.True(t, c.Acquired)
		require.Equal(t, token, c.Token)
		require.Equal(t, map[string]string{"charge": "ch_1"}, loadSteps(t, s, "k", token))
	}
}

// TestStepsSurviveComplete: the completed record keeps its steps for the
// Inspector, and no one reads or writes them any more.
func TestStepsSurviveComplete(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, 0)
	c := claim(t, s, "k")
	save(t, s, "k", c.Token, "charge", "ch_1")
	require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: "k", Token: c.Token, Result: []byte("ok"), Retention: retention}))
	require.Equal(t, map[string]string{"charge": "ch_1"}, getSteps(t, s, "k"))

	_, err := s.LoadSteps(ctx, store.StepsRequest{Key: "k", Token: c.Token})
	require.ErrorIs(t, err, store.ErrLeaseLost, "a completed key is held by no one")
	err = s.SaveStep(ctx, store.SaveStepRequest{Key: "k", Token: c.Token, Name: "late", Value: []byte("x")})
	require.ErrorIs(t, err, store.ErrLeaseLost)
	require.Equal(t, map[string]string{"charge": "ch_1"}, getSteps(t, s, "k"), "the refused write changed nothing")
	require.Nil(t, s.Peek("", "k").Steps, "Peek leaves them out")
	again := acquire(t, s, "k")
	require.False(t, again.Acquired)
	require.Nil(t, again.Record.Steps, "Acquire leaves them out")
}

// TestStepsExpireWithRecord: once the record's retention ended, Get and
// Scan no longer see it or its steps, and the record is gone with them
// when next touched (here by its lazy expiry in Acquire).
func TestStepsExpireWithRecord(t *testing.T) {
	t.Parallel()
	s, clk := setup(t, 0)
	c := claim(t, s, "ns:k")
	save(t, s, "ns:k", c.Token, "charge", "ch_1")
	require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: "ns:k", Token: c.Token, Retention: retention}))
	clk.Advance(retention - time.Nanosecond)
	require.Equal(t, map[string]string{"charge": "ch_1"}, getSteps(t, s, "ns:k"), "not expired yet")
	clk.Advance(time.Nanosecond)
	_, err := s.Get(ctx, "ns:k")
	require.ErrorIs(t, err, store.ErrNotFound)
	for rec, err := range s.Scan(ctx, "ns:") {
		require.NoError(t, err)
		t.Fatalf("Scan yielded the expired record %q", rec.Key)
	}
	c = claim(t, s, "ns:k")
	require.Empty(t, loadSteps(t, s, "ns:k", c.Token))
}

// TestStepsDeletedWithRecord: Delete and DeleteIf take the steps with the
// record, in each state; a refused DeleteIf leaves them, and answers with
// them.
func TestStepsDeletedWithRecord(t *testing.T) {
	t.Parallel()
	s, clk := setup(t, 0)
	for _, state := range []store.State{store.StateProcessing, store.StateCompleted, store.StateFailed} {
		for _, how := range []string{"Delete", "DeleteIf"} {
			t.Run(fmt.Sprintf("%s/%s", state, how), func(t *testing.T) {
				key := fmt.Sprintf("%s-%s", state, how)
				c := claim(t, s, key)
				save(t, s, key, c.Token, "charge", "ch_1")
				switch state {
				case store.StateCompleted:
					require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: key, Token: c.Token, Retention: retention}))
				case store.StateFailed:
					release(t, s, key, c.Token)
				}
				if how == "Delete" {
					require.NoError(t, s.Delete(ctx, key))
				} else {
					req := store.DeleteRequest{Key: key, States: []store.State{state}}
					deleted, rec, err := s.DeleteIf(ctx, req)
					require.NoError(t, err)
					require.True(t, deleted)
					require.Equal(t, map[string]string{"charge": "ch_1"}, stepMap(t, rec.Steps), "DeleteIf answers with the record it found")
				}
				_, err := s.LoadSteps(ctx, store.StepsRequest{Key: key, Token: c.Token})
				require.ErrorIs(t, err, store.ErrLeaseLost, "the deleted claim's holder is fenced off")
				c = claim(t, s, key)
				require.Equal(t, 1, c.Record.Attempt)
				require.Empty(t, loadSteps(t, s, key, c.Token), "the steps went with the record")
			})
		}
	}

	t.Run("refused", func(t *testing.T) {
		c := claim(t, s, "live")
		save(t, s, "live", c.Token, "charge", "ch_1")
		deleted, rec, err := s.DeleteIf(ctx, store.DeleteRequest{Key: "live", ExpiredLease: true})
		require.NoError(t, err)
		require.False(t, deleted, "a live lease is kept")
		require.Equal(t, map[string]string{"charge": "ch_1"}, stepMap(t, rec.Steps))
		require.Equal(t, map[string]string{"charge": "ch_1"}, loadSteps(t, s, "live", c.Token))

		clk.Advance(lease)
		deleted, _, err = s.DeleteIf(ctx, store.DeleteRequest{Key: "live", ExpiredLease: true})
		require.NoError(t, err)
		require.True(t, deleted)
		c = claim(t, s, "live")
		require.Empty(t, loadSteps(t, s, "live", c.Token))
	})
}

// TestStepsInspector: Get and Scan answer with the steps of records in
// every state, as copies the caller may change.
func TestStepsInspector(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, 0)
	processing := claim(t, s, "ns:processing")
	save(t, s, "ns:processing", processing.Token, "a", "1")
	done := claim(t, s, "ns:completed")
	save(t, s, "ns:completed", done.Token, "b", "2")
	require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: "ns:completed", Token: done.Token, Retention: retention}))
	failed := claim(t, s, "ns:failed")
	save(t, s, "ns:failed", failed.Token, "c", "3")
	release(t, s, "ns:failed", failed.Token)
	claim(t, s, "ns:none")

	want := map[string]map[string]string{
		"ns:processing": {"a": "1"},
		"ns:completed":  {"b": "2"},
		"ns:failed":     {"c": "3"},
		"ns:none":       {},
	}
	got := map[string]map[string]string{}
	for rec, err := range s.Scan(ctx, "ns:") {
		require.NoError(t, err)
		got[rec.Key] = stepMap(t, rec.Steps)
		for _, st := range rec.Steps {
			st.Value[0] = 'X' // the caller's copy
		}
	}
	require.Equal(t, want, got)
	for key, steps := range want {
		require.Equal(t, steps, getSteps(t, s, key), key)
	}

	rec, err := s.Get(ctx, "ns:processing")
	require.NoError(t, err)
	rec.Steps[0].Value[0] = 'X'
	rec.Steps[0].Name = "renamed"
	require.Equal(t, map[string]string{"a": "1"}, getSteps(t, s, "ns:processing"), "Get answers with a copy")
	require.Equal(t, map[string]string{"a": "1"}, loadSteps(t, s, "ns:processing", processing.Token))
}

// TestStepsFencing: only the token holding the key while it is processing
// reads and writes its steps; every other call fails with ErrLeaseLost and
// records nothing.
func TestStepsFencing(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, 0)
	c := claim(t, s, "k")
	save(t, s, "k", c.Token, "charge", "ch_1")
	released := claim(t, s, "released")
	release(t, s, "released", released.Token)

	for name, req := range map[string]store.StepsRequest{
		"another token": {Key: "k", Token: store.NewToken()},
		"zero token":    {Key: "k"},
		"absent key":    {Key: "absent", Token: c.Token},
		"released key":  {Key: "released", Token: released.Token},
	} {
		_, err := s.LoadSteps(ctx, req)
		require.ErrorIs(t, err, store.ErrLeaseLost, name)
		err = s.SaveStep(ctx, store.SaveStepRequest{Key: req.Key, Token: req.Token, Name: "charge", Value: []byte("forged")})
		require.ErrorIs(t, err, store.ErrLeaseLost, name)
	}
	require.Equal(t, map[string]string{"charge": "ch_1"}, loadSteps(t, s, "k", c.Token))
	require.Empty(t, getSteps(t, s, "released"))
	_, err := s.Get(ctx, "absent")
	require.ErrorIs(t, err, store.ErrNotFound, "a refused write makes no record")
}

// TestStepsBadInput: a bad step name fails with ErrInvalidConfig whoever
// holds the key, an empty key with ErrInvalidKey, a cancelled context with
// its error; none records anything.
func TestStepsBadInput(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, 0)
	c := claim(t, s, "k")
	for _, name := range []string{"", strings.Repeat("n", store.MaxStepNameLen+1), "bad\xff"} {
		for _, token := range []store.Token{c.Token, store.NewToken()} {
			err := s.SaveStep(ctx, store.SaveStepRequest{Key: "k", Token: token, Name: name, Value: []byte("v")})
			require.ErrorIs(t, err, store.ErrInvalidConfig, "name %q", name)
		}
	}
	longest := strings.Repeat("é", store.MaxStepNameLen/2)
	save(t, s, "k", c.Token, longest, "ok")
	require.Equal(t, map[string]string{longest: "ok"}, loadSteps(t, s, "k", c.Token), "only the good name is recorded")

	err := s.SaveStep(ctx, store.SaveStepRequest{Token: c.Token, Name: "n"})
	require.ErrorIs(t, err, store.ErrInvalidKey)
	_, err = s.LoadSteps(ctx, store.StepsRequest{Token: c.Token})
	require.ErrorIs(t, err, store.ErrInvalidKey)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	err = s.SaveStep(cancelled, store.SaveStepRequest{Key: "k", Token: c.Token, Name: "late", Value: []byte("v")})
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.LoadSteps(cancelled, store.StepsRequest{Key: "k", Token: c.Token})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, map[string]string{longest: "ok"}, loadSteps(t, s, "k", c.Token))
}

// TestStepsValues: values are copied in and out, nil and empty are both
// kept as empty, and a name saved again replaces its value.
func TestStepsValues(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, 0)
	c := claim(t, s, "k")
	buf := []byte("ch_1")
	require.NoError(t, s.SaveStep(ctx, store.SaveStepRequest{Key: "k", Token: c.Token, Name: "charge", Value: buf}))
	buf[0] = 'X' // the caller reuses its buffer
	require.NoError(t, s.SaveStep(ctx, store.SaveStepRequest{Key: "k", Token: c.Token, Name: "nil"}))
	require.NoError(t, s.SaveStep(ctx, store.SaveStepRequest{Key: "k", Token: c.Token, Name: "empty", Value: []byte{}}))

	steps, err := s.LoadSteps(ctx, store.StepsRequest{Key: "k", Token: c.Token})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"charge": "ch_1", "nil": "", "empty": ""}, stepMap(t, steps))
	for _, st := range steps {
		require.NotNil(t, st.Value, "%s is kept as empty, not nil", st.Name)
		if len(st.Value) > 0 {
			st.Value[0] = 'Y' // the caller's copy
		}
	}
	require.Equal(t, map[string]string{"charge": "ch_1", "nil": "", "empty": ""}, loadSteps(t, s, "k", c.Token))

	save(t, s, "k", c.Token, "charge", "ch_2")
	require.Equal(t, map[string]string{"charge": "ch_2", "nil": "", "empty": ""}, loadSteps(t, s, "k", c.Token), "replaced, not added")
	big := strings.Repeat("v", 1<<20)
	save(t, s, "k", c.Token, "big", big)
	require.Equal(t, big, loadSteps(t, s, "k", c.Token)["big"], "a value of any length is kept")
}

// TestStepsEvictedWithFailedRecord: a failed record is evicted for room
// with its steps, as the package documentation says: the next attempt
// finds none. A processing record's steps are never evicted.
func TestStepsEvictedWithFailedRecord(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, 2)
	held := claim(t, s, "held")
	save(t, s, "held", held.Token, "charge", "ch_held")
	failed := claim(t, s, "failed")
	save(t, s, "failed", failed.Token, "charge", "ch_failed")
	release(t, s, "failed", failed.Token)
	complete(t, s, "a")
	complete(t, s, "b") // evicts failed, the least recently used
	_, err := s.Get(ctx, "failed")
	require.ErrorIs(t, err, store.ErrNotFound)
	c := claim(t, s, "failed")
	require.Equal(t, 1, c.Record.Attempt)
	require.Empty(t, loadSteps(t, s, "failed", c.Token), "evicted with its record")
	release(t, s, "failed", c.Token)

	for i := range 10 {
		complete(t, s, fmt.Sprintf("other-%d", i))
	}
	require.Equal(t, map[string]string{"charge": "ch_held"}, loadSteps(t, s, "held", held.Token), "a processing record keeps its steps under pressure")
}

// TestStepsSweptWithClaim: a claim whose lease ended, swept to make room
// for another, is gone with its steps.
func TestStepsSweptWithClaim(t *testing.T) {
	t.Parallel()
	s, clk := setup(t, 1)
	c := claim(t, s, "swept")
	save(t, s, "swept", c.Token, "charge", "ch_1")
	clk.Advance(lease)
	other := claim(t, s, "other") // the store holds one claim: sweeps swept
	_, err := s.LoadSteps(ctx, store.StepsRequest{Key: "swept", Token: c.Token})
	require.ErrorIs(t, err, store.ErrLeaseLost)
	require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: "other", Token: other.Token, Retention: retention}))
	c = claim(t, s, "swept")
	require.Equal(t, 1, c.Record.Attempt)
	require.Empty(t, loadSteps(t, s, "swept", c.Token))
}

// TestStepsConcurrent: workers record steps of their own keys and of one
// shared key while others read them and the Inspector scans; run with
// -race. Every step recorded by a holder is there at the end.
func TestStepsConcurrent(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, 0)
	const workers, steps = 8, 50
	shared := claim(t, s, "ns:shared")
	var wg sync.WaitGroup
	errs := make(chan error, workers*2)
	for w := range workers {
		wg.Go(func() {
			key := fmt.Sprintf("ns:key-%d", w)
			c, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Hour})
			if err != nil || !c.Acquired {
				errs <- fmt.Errorf("acquire %s: %v", key, err)
				return
			}
			for i := range steps {
				name := fmt.Sprintf("step-%d", i)
				for _, k := range []struct {
					key   string
					token store.Token
				}{{key, c.Token}, {"ns:shared", shared.Token}} {
					if err := s.SaveStep(ctx, store.SaveStepRequest{Key: k.key, Token: k.token, Name: fmt.Sprintf("%d-%s", w, name), Value: []byte(name)}); err != nil {
						errs <- err
						return
					}
				}
				// One name every worker saves again: replaced while others
				// read the key's steps.
				if err := s.SaveStep(ctx, store.SaveStepRequest{Key: "ns:shared", Token: shared.Token, Name: "last", Value: []byte(name)}); err != nil {
					errs <- err
					return
				}
				got, err := s.LoadSteps(ctx, store.StepsRequest{Key: "ns:shared", Token: shared.Token})
				if err != nil {
					errs <- err
					return
				}
				for _, st := range got {
					_ = string(st.Value)
				}
				rec, err := s.Get(ctx, "ns:shared")
				if err != nil {
					errs <- err
					return
				}
				_ = len(rec.Steps)
			}
			if err := s.Complete(ctx, store.CompleteRequest{Key: key, Token: c.Token, Retention: retention}); err != nil {
				errs <- err
			}
		})
		wg.Go(func() {
			for range steps {
				for rec, err := range s.Scan(ctx, "ns:") {
					if err != nil {
						errs <- err
						return
					}
					_ = len(rec.Steps)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, loadSteps(t, s, "ns:shared", shared.Token), workers*steps+1)
	for w := range workers {
		require.Len(t, getSteps(t, s, fmt.Sprintf("ns:key-%d", w)), steps)
	}
}
