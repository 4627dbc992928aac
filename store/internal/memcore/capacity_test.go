package memcore

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/store"
)

// settleKey claims key in s and completes it, kept for an hour.
func settleKey(t *testing.T, s *Store, key string) {
	t.Helper()
	c, err := s.Acquire(t.Context(), store.AcquireRequest{Key: key, Lease: time.Minute})
	require.NoError(t, err)
	require.True(t, c.Acquired, "%s was not claimed", key)
	require.NoError(t, s.Complete(t.Context(), store.CompleteRequest{Key: key, Token: c.Token, Result: []byte(key), Retention: time.Hour}))
}

// shardOf returns the number of key's shard in s.
func shardOf(s *Store, key string) int {
	sh, _ := s.locate(key)
	for i := range s.shards {
		if &s.shards[i] == sh {
			return i
		}
	}
	panic("no shard")
}

// TestCapacityIsExact: a store cut into shards keeps exactly Capacity of
// Capacity+k records, however unevenly the keys fall into its shards, and
// the k it evicts are each the least recently used record of the new
// record's shard (a Peek makes a record the most recently used), each one
// counted.
func TestCapacityIsExact(t *testing.T) {
	t.Parallel()
	for _, capacity := range []int{16_384, 101_000} {
		t.Run(strconv.Itoa(capacity), func(t *testing.T) {
			t.Parallel()
			s, err := New(&Options{Capacity: capacity, Clock: clock.NewFake(time.Unix(1e9, 0))})
			require.NoError(t, err)
			require.Greater(t, len(s.shards), 1)

			// The model: each shard's keys, least recently used first.
			lru := make([][]string, len(s.shards))
			n := 0
			const k = 1000
			for i := range capacity + k {
				key := "billing:o-" + strconv.Itoa(i)
				settleKey(t, s, key)
				sh := shardOf(s, key)
				if n == capacity {
					lru[sh] = lru[sh][1:] // the shard had some: it evicts its own
				} else {
					n++
				}
				lru[sh] = append(lru[sh], key)
				if i == capacity/2 {
					// The first keys become the most recently used.
					for j := range 2 * k {
						id := "o-" + strconv.Itoa(j)
						require.NotNil(t, s.Peek("billing:", id))
						sh := shardOf(s, "billing:"+id)
						at := slices.Index(lru[sh], "billing:"+id)
						lru[sh] = append(slices.Delete(lru[sh], at, at+1), "billing:"+id)
					}
				}
			}
			st := s.Stats()
			require.Equal(t, capacity, st.Len, "the store keeps Capacity records")
			require.Equal(t, uint64(k), st.Evictions, "each eviction is counted")
			kept := map[string]bool{}
			for _, keys := range lru {
				for _, key := range keys {
					kept[key] = true
				}
			}
			require.Len(t, kept, capacity)
			for i := range capacity + k {
				id := "o-" + strconv.Itoa(i)
				require.Equal(t, kept["billing:"+id], s.Peek("billing:", id) != nil, "%s: kept", id)
			}
		})
	}
}

// TestCapacityEvictsElsewhere: when the store is full and the new record's
// shard holds no other record, another shard evicts its least recently
// used one, so the store still keeps Capacity.
func TestCapacityEvictsElsewhere(t *testing.T) {
	t.Parallel()
	const capacity = 2 * shardMin // two shards
	s, err := New(&Options{Capacity: capacity, Clock: clock.NewFake(time.Unix(1e9, 0))})
	require.NoError(t, err)
	require.Len(t, s.shards, 2)
	var first []string // keys of shard 0, in order
	for i := 0; len(first) < capacity; i++ {
		if key := "k:" + strconv.Itoa(i); shardOf(s, key) == 0 {
			settleKey(t, s, key)
			first = append(first, key)
		}
	}
	other := "k:other"
	for i := 0; shardOf(s, other) != 1; i++ {
		other = "k:other-" + strconv.Itoa(i)
	}
	settleKey(t, s, other)
	st := s.Stats()
	require.Equal(t, capacity, st.Len)
	require.Equal(t, uint64(1), st.Evictions)
	_, err = s.Get(t.Context(), first[0])
	require.ErrorIs(t, err, store.ErrNotFound, "the oldest record of the other shard is evicted")
	for _, key := range []string{first[1], other} {
		_, err = s.Get(t.Context(), key)
		require.NoError(t, err, key)
	}
}

// TestClaimsBoundIsExact: Capacity claims are granted whatever their
// shards, and the next one is refused until one ends or its lease expires
// (an Acquire of the expired claim's shard sweeps it).
func TestClaimsBoundIsExact(t *testing.T) {
	t.Parallel()
	const capacity = 2 * shardMin
	clk := clock.NewFake(time.Unix(1e9, 0))
	s, err := New(&Options{Capacity: capacity, Clock: clk})
	require.NoError(t, err)
	require.Len(t, s.shards, 2)
	ctx := t.Context()
	acquire := func(key string) error {
		c, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
		if err == nil {
			require.True(t, c.Acquired, key)
		}
		return err
	}
	for i := range capacity {
		require.NoError(t, acquire("k:"+strconv.Itoa(i)))
	}
	require.Equal(t, capacity, s.Stats().InFlight)
	for i := range 10 { // keys of both shards
		require.ErrorIs(t, acquire("k:more-"+strconv.Itoa(i)), store.ErrUnavailable)
	}
	require.Equal(t, capacity, s.Stats().InFlight, "a refused claim is not counted")

	require.NoError(t, s.Delete(ctx, "k:0"))
	require.NoError(t, acquire("k:more-0"), "a claim deleted makes room")
	require.ErrorIs(t, acquire("k:more-1"), store.ErrUnavailable)

	clk.Advance(time.Minute)
	require.NoError(t, acquire("k:more-1"), "expired claims of the shard are swept")
	require.LessOrEqual(t, s.Stats().InFlight, capacity-shardMin/2, "the swept shard's claims are gone")
}

// TestCountsFollowRecords: whatever adds or removes a record (claims and
// their takeovers, completions, releases, retries, expiries, sweeps,
// deletions, remembered copies, evictions), the store-wide counts that
// Capacity is checked against stay the numbers of records held.
func TestCountsFollowRecords(t *testing.T) {
	t.Parallel()
	for _, capacity := range []int{5, 2 * shardMin} {
		t.Run(strconv.Itoa(capacity), func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(time.Unix(1e9, 0))
			s, err := New(&Options{Capacity: capacity, Clock: clk})
			require.NoError(t, err)
			ctx := t.Context()
			rng := rand.New(rand.NewPCG(3, 4))
			tokens := map[string]store.Token{}
			for step := range 20_000 {
				key := "k:" + strconv.Itoa(rng.IntN(capacity+5))
				switch op := rng.IntN(9); op {
				case 0, 1:
					c, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Second})
					if err == nil && c.Acquired {
						tokens[key] = c.Token
					}
				case 2:
					_ = s.Complete(ctx, store.CompleteRequest{Key: key, Token: tokens[key], Result: []byte("r"), Retention: 3 * time.Second})
				case 3:
					_ = s.Release(ctx, store.ReleaseRequest{Key: key, Token: tokens[key], Error: "e", Retention: 3 * time.Second})
				case 4:
					_ = s.Delete(ctx, key)
				case 5:
					_, _, _ = s.DeleteIf(ctx, store.DeleteRequest{Key: key, States: []store.State{store.StateCompleted, store.StateFailed, store.StateProcessing}})
				case 6:
					_, _ = s.Remember(store.Record{Key: key, State: store.StateCompleted, ExpiresAt: clk.Now().Add(2 * time.Second)})
				case 7:
					_ = s.Extend(ctx, store.ExtendRequest{Key: key, Token: tokens[key], Lease: time.Second})
				case 8:
					clk.Advance(time.Duration(rng.IntN(500)) * time.Millisecond)
				}
				st := s.Stats()
				require.Equal(t, int64(st.Len), s.settled.Load(), "step %d: settled records", step)
				require.Equal(t, int64(st.InFlight), s.claims.Load(), "step %d: claims", step)
				require.LessOrEqual(t, st.Len, capacity, "step %d", step)
				require.LessOrEqual(t, st.InFlight, capacity, "step %d", step)
			}
		})
	}
}

// TestCapacityUnderConcurrency: records settled from many goroutines at
// once, into every shard, leave exactly Capacity kept and every other one
// evicted and counted.
func TestCapacityUnderConcurrency(t *testing.T) {
	t.Parallel()
	const capacity, workers, each = 2 * shardMin, 8, 2000
	s, err := New(&Options{Capacity: capacity, Clock: clock.NewFake(time.Unix(1e9, 0))})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				key := "k:" + strconv.Itoa(w) + "-" + strconv.Itoa(i)
				c, err := s.Acquire(t.Context(), store.AcquireRequest{Key: key, Lease: time.Minute})
				if err != nil || !c.Acquired {
					t.Errorf("Acquire(%q): %v, acquired %v", key, err, c.Acquired)
					return
				}
				if err := s.Complete(t.Context(), store.CompleteRequest{Key: key, Token: c.Token, Retention: time.Hour}); err != nil {
					t.Errorf("Complete(%q): %v", key, err)
					return
				}
			}
		})
	}
	wg.Wait()
	st := s.Stats()
	require.Equal(t, capacity, st.Len)
	require.Equal(t, uint64(workers*each-capacity), st.Evictions)
	require.Equal(t, int64(capacity), s.settled.Load())
	require.Zero(t, s.claims.Load())
}
