package memcore

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/store"
)

// requireNoOrphanSteps fails unless every key with step records in s has
// a record (a claim or a settled slot) in the shard that holds them: step
// records go with their record, wherever it goes.
func requireNoOrphanSteps(t *testing.T, s *Store) {
	t.Helper()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for key := range sh.steps {
			owner, k := s.locate(key)
			_, claimed := sh.claims[key]
			ok := owner == sh && (claimed || sh.settled.find(&k) != 0)
			if !ok {
				sh.mu.Unlock()
				t.Fatalf("shard %d keeps the step records of %q, which has no record there", i, key)
			}
		}
		sh.mu.Unlock()
	}
}

// TestStepsTableOnlyWhenUsed: a store whose keys record no steps never
// makes a table of them, whatever it does (the hot path is what it was);
// the first SaveStep makes one in its key's shard alone.
func TestStepsTableOnlyWhenUsed(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1e9, 0))
	s, err := New(&Options{Capacity: 4 * shardMin, Clock: clk})
	require.NoError(t, err)
	ctx := t.Context()
	for i := range 100 {
		key := "ns:" + strconv.Itoa(i)
		c, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
		require.NoError(t, err)
		if i%2 == 0 {
			require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: key, Token: c.Token, Retention: time.Hour}))
			s.Peek(store.SplitKey(key))
		} else {
			require.NoError(t, s.Release(ctx, store.ReleaseRequest{Key: key, Token: c.Token, Retention: time.Hour}))
		}
		if i%3 == 0 {
			require.NoError(t, s.Delete(ctx, key))
		}
	}
	for i := range s.shards {
		require.Nil(t, s.shards[i].steps, "shard %d", i)
	}

	c, err := s.Acquire(ctx, store.AcquireRequest{Key: "ns:steps", Lease: time.Minute})
	require.NoError(t, err)
	require.NoError(t, s.SaveStep(ctx, store.SaveStepRequest{Key: "ns:steps", Token: c.Token, Name: "a"}))
	for i := range s.shards {
		if i == shardOf(s, "ns:steps") {
			require.Len(t, s.shards[i].steps, 1)
		} else {
			require.Nil(t, s.shards[i].steps, "shard %d", i)
		}
	}
}

// TestStepsEvictedElsewhere: a failed record with steps evicted by
// another shard's settle (evictElsewhere) takes its steps with it.
func TestStepsEvictedElsewhere(t *testing.T) {
	t.Parallel()
	const capacity = 2 * shardMin // two shards
	s, err := New(&Options{Capacity: capacity, Clock: clock.NewFake(time.Unix(1e9, 0))})
	require.NoError(t, err)
	require.Len(t, s.shards, 2)
	ctx := t.Context()
	var first []string // keys of shard 0, in order
	for i := 0; len(first) < capacity; i++ {
		key := "k:" + strconv.Itoa(i)
		if shardOf(s, key) != 0 {
			continue
		}
		if len(first) == 0 { // the oldest: failed, with steps
			c, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
			require.NoError(t, err)
			require.NoError(t, s.SaveStep(ctx, store.SaveStepRequest{Key: key, Token: c.Token, Name: "charge", Value: []byte("ch_1")}))
			require.NoError(t, s.Release(ctx, store.ReleaseRequest{Key: key, Token: c.Token, Retention: time.Hour}))
		} else {
			settleKey(t, s, key)
		}
		first = append(first, key)
	}
	require.Len(t, s.shards[0].steps, 1)
	other := "k:other"
	for i := 0; shardOf(s, other) != 1; i++ {
		other = "k:other-" + strconv.Itoa(i)
	}
	settleKey(t, s, other)
	_, err = s.Get(ctx, first[0])
	require.ErrorIs(t, err, store.ErrNotFound, "evicted by the other shard")
	require.Empty(t, s.shards[0].steps, "with its steps")
	requireNoOrphanSteps(t, s)
}

// TestStepsFollowRecords runs random operations on a few keys, in a small
// store (one shard) and a large one (shards, evicting elsewhere), and
// checks after each that no step records outlive their record, and that a
// claim granted afresh (its Attempt 1) finds none while one that continues
// a record (a retry, a takeover, its own token again) finds what its key
// had.
func TestStepsFollowRecords(t *testing.T) {
	t.Parallel()
	for _, capacity := range []int{8, 2 * shardMin} {
		t.Run(strconv.Itoa(capacity), func(t *testing.T) {
			t.Parallel()
			stepsFollowRecords(t, capacity)
		})
	}
}

func stepsFollowRecords(t *testing.T, capacity int) {
	clk := clock.NewFake(time.Unix(1e9, 0))
	s, err := New(&Options{Capacity: capacity, Clock: clk})
	require.NoError(t, err)
	ctx := t.Context()
	rng := rand.New(rand.NewPCG(1, uint64(capacity)))
	keys := capacity + capacity/2 // enough to evict
	tokens := map[string]store.Token{}
	// want is the step count each key's record has, as far as the model
	// knows: -1 once it may have been evicted or swept.
	want := map[string]int{}
	for op := range 20_000 {
		key := "ns:" + strconv.Itoa(rng.IntN(keys))
		switch r := rng.IntN(100); {
		case r < 30:
			token := tokens[key]
			if rng.IntN(4) != 0 {
				token = store.NewToken()
			}
			// A token that holds the key is granted it again, its claim
			// going on (its Attempt unchanged).
			_, err := s.LoadSteps(ctx, store.StepsRequest{Key: key, Token: token})
			again := err == nil
			c, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Duration(1+rng.IntN(3)) * time.Second, Token: token})
			if err != nil || !c.Acquired {
				continue
			}
			tokens[key] = c.Token
			steps, err := s.LoadSteps(ctx, store.StepsRequest{Key: key, Token: c.Token})
			require.NoError(t, err)
			continued := again || c.Record.Attempt > 1
			if !continued {
				require.Empty(t, steps, "op %d: %s claimed afresh", op, key)
			}
			if n, ok := want[key]; ok && n >= 0 && continued {
				require.Len(t, steps, n, "op %d: %s continued", op, key)
			}
			want[key] = len(steps)
		case r < 60:
			err := s.SaveStep(ctx, store.SaveStepRequest{Key: key, Token: tokens[key], Name: strconv.Itoa(rng.IntN(4)), Value: []byte("v")})
			if err == nil {
				steps, err := s.LoadSteps(ctx, store.StepsRequest{Key: key, Token: tokens[key]})
				require.NoError(t, err)
				want[key] = len(steps)
			}
		case r < 72:
			_ = s.Complete(ctx, store.CompleteRequest{Key: key, Token: tokens[key], Retention: time.Duration(1+rng.IntN(5)) * time.Second})
		case r < 84:
			_ = s.Release(ctx, store.ReleaseRequest{Key: key, Token: tokens[key], Retention: time.Duration(1+rng.IntN(5)) * time.Second})
		case r < 88:
			require.NoError(t, s.Delete(ctx, key))
			delete(want, key)
		case r < 92:
			if deleted, _, err := s.DeleteIf(ctx, store.DeleteRequest{Key: key, ExpiredLease: true, States: []store.State{store.StateCompleted, store.StateFailed}}); err == nil && deleted {
				delete(want, key)
			}
		case r < 94:
			_, _ = s.Remember(store.Record{Key: key, State: store.StateCompleted, ExpiresAt: clk.Now().Add(time.Second)})
		default:
			clk.Advance(time.Duration(rng.IntN(500)) * time.Millisecond)
		}
		if capacity <= 8 || op%997 == 0 {
			requireNoOrphanSteps(t, s)
		}
		// Evictions and sweeps are not modelled: a record the model
		// cannot follow is no longer checked for its count.
		if st := s.Stats(); st.Len >= capacity || st.InFlight >= capacity {
			for k := range want {
				want[k] = -1
			}
		}
	}
	requireNoOrphanSteps(t, s)
	total := 0
	for i := range s.shards {
		total += len(s.shards[i].steps)
	}
	require.NotZero(t, total, "the run recorded steps at all")
	t.Logf("keys with steps at the end: %d", total)
}

// TestStepsGoneWhenRemembered: a record that Remember replaces (a local
// tier caching what its remote store completed) leaves no step records to
// the copy: they were the replaced record's.
func TestStepsGoneWhenRemembered(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1e9, 0))
	s, err := New(&Options{Clock: clk})
	require.NoError(t, err)
	ctx := t.Context()
	c, err := s.Acquire(ctx, store.AcquireRequest{Key: "ns:k", Lease: time.Minute})
	require.NoError(t, err)
	require.NoError(t, s.SaveStep(ctx, store.SaveStepRequest{Key: "ns:k", Token: c.Token, Name: "charge", Value: []byte("ch_1")}))
	require.NoError(t, s.Release(ctx, store.ReleaseRequest{Key: "ns:k", Token: c.Token, Retention: time.Hour}))
	ok, err := s.Remember(store.Record{Key: "ns:k", State: store.StateCompleted, ExpiresAt: clk.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.True(t, ok)
	rec, err := s.Get(ctx, "ns:k")
	require.NoError(t, err)
	require.Equal(t, store.StateCompleted, rec.State)
	require.Empty(t, rec.Steps)
	requireNoOrphanSteps(t, s)
}
