package memcore_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/internal/memcore"
)

// TestShardsFindEveryKey: in a store cut into shards, a record completed
// under its whole key is found by Peek under its key cut in two (the shard
// is chosen by a hash of either form alike), by Get, and is counted once
// by Stats, as claims are.
func TestShardsFindEveryKey(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	s, err := memcore.New(&memcore.Options{Capacity: memcore.DefaultCapacity, Clock: clk})
	require.NoError(t, err)
	ctx := t.Context()
	const n = 2000
	for i := range n {
		claimAndComplete(t, s, "billing:o-"+strconv.Itoa(i))
	}
	for i := range n {
		id := "o-" + strconv.Itoa(i)
		rec := s.Peek("billing:", id)
		require.NotNil(t, rec, "Peek of %s", id)
		require.Equal(t, "billing:"+id, string(rec.Result))
		got, err := s.Get(ctx, "billing:"+id)
		require.NoError(t, err)
		require.Equal(t, store.StateCompleted, got.State)
	}
	for i := range 10 {
		_, err := s.Acquire(ctx, store.AcquireRequest{Key: "billing:new-" + strconv.Itoa(i), Lease: time.Minute})
		require.NoError(t, err)
	}
	require.Equal(t, memcore.Stats{Len: n, InFlight: 10, Capacity: memcore.DefaultCapacity}, s.Stats())
	found := 0
	for _, err := range s.Scan(ctx, "billing:o-") {
		require.NoError(t, err)
		found++
	}
	require.Equal(t, n, found, "Scan walks every shard")
}

// TestShardsShareCapacity: a store cut into shards keeps about Capacity
// records (each shard its share) and counts every eviction.
func TestShardsShareCapacity(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	const capacity = 8192 // two shards of 4,096
	s, err := memcore.New(&memcore.Options{Capacity: capacity, Clock: clk})
	require.NoError(t, err)
	const n = 10000
	for i := range n {
		claimAndComplete(t, s, "k"+strconv.Itoa(i))
	}
	st := s.Stats()
	require.LessOrEqual(t, st.Len, capacity, "no shard keeps more than its share")
	require.Greater(t, st.Len, capacity/2, "every shard keeps its share, not one of them")
	require.Equal(t, uint64(n-st.Len), st.Evictions, "every eviction is counted")
}

// claimAndComplete claims key in s and completes it with the key as its
// result, kept for an hour.
func claimAndComplete(t *testing.T, s *memcore.Store, key string) {
	t.Helper()
	c, err := s.Acquire(t.Context(), store.AcquireRequest{Key: key, Lease: time.Minute})
	require.NoError(t, err)
	require.True(t, c.Acquired, "%s was not claimed", key)
	require.NoError(t, s.Complete(t.Context(), store.CompleteRequest{Key: key, Token: c.Token, Result: []byte(key), Retention: time.Hour}))
}
