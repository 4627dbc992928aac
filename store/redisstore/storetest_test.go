package redisstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/redisstore"
	"github.com/dedup-go/dedup/store/storetest"
)

// tick is the storetest time unit on Redis's real clock: leases and
// retentions of 10 ticks, and the tolerance of its time checks. Round trips
// on loopback take well under a millisecond, but under -race on a loaded
// machine a subtest's setup and race took over 500ms (5 ticks of 50ms were
// not enough: a released record expired before its racers saw it).
const tick = 100 * time.Millisecond

// harness runs the conformance suite on a store of c. Leases are measured
// by this process's clock and expiries by Redis's; on this machine they
// are one clock, which Now reads through Redis.
func harness(c redis.UniversalClient) func(t *testing.T) storetest.Harness {
	return func(t *testing.T) storetest.Harness {
		s := newStore(t, c, nil)
		return storetest.Harness{
			Store:   s,
			Advance: time.Sleep,
			Tick:    tick,
			Now: func() time.Time {
				now, err := serverTime(c)
				require.NoError(t, err)
				return now
			},
		}
	}
}

// serverTime reads the clock the scripts use. In a Cluster every node has
// its own; they run on this one machine, so they agree.
func serverTime(c redis.UniversalClient) (time.Time, error) {
	return c.Time(context.Background()).Result()
}

func TestStoretest(t *testing.T) {
	storetest.Run(t, harness(redistest.Client(t)))
}

// TestCluster runs the suite on a Cluster of three masters, where batches
// are pipelines of one script per key, and checks that those pipelines
// load the scripts again on a node that lost them.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node Redis Cluster")
	}
	c, _ := startCluster(t)
	t.Run("Storetest", func(t *testing.T) {
		storetest.Run(t, harness(c))
	})
	t.Run("BatchRules", func(t *testing.T) {
		batchRules(t, newStore(t, c, nil))
	})
	t.Run("StepsKeySlots", func(t *testing.T) {
		stepsKeySlots(t, c, newStore(t, c, nil))
	})
	t.Run("ScriptsReloaded", func(t *testing.T) {
		scriptsReloaded(t, newStore(t, c, nil), func() {
			require.NoError(t, c.ForEachMaster(t.Context(), func(ctx context.Context, m *redis.Client) error {
				return m.ScriptFlush(ctx).Err()
			}))
		})
	})
}

// TestDefaultPrefix: a store without a prefix keeps its keys under
// DefaultPrefix.
func TestDefaultPrefix(t *testing.T) {
	c := redistest.Client(t)
	s, err := redisstore.New(t.Context(), c, nil)
	require.NoError(t, err)
	require.Equal(t, redisstore.DefaultPrefix, s.Prefix())
	key := strings.TrimPrefix(redistest.Prefix(t, c), "dedup-test:") + "k"
	t.Cleanup(func() { c.Del(context.Background(), s.RedisKey(key)) })
	_, err = s.Acquire(t.Context(), store.AcquireRequest{Key: key, Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, redisstore.DefaultPrefix+":v3:"+key, s.RedisKey(key))
	n, err := c.Exists(t.Context(), s.RedisKey(key)).Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}
