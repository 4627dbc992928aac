package rueidisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/store/storetest"
)

// tick is the storetest time unit on Redis's real clock, as redisstore's
// suite takes it: leases and retentions of 10 ticks.
const tick = 100 * time.Millisecond

// harness runs the conformance suite on a store of c. Leases are measured
// by this process's clock and expiries by Redis's; on this machine they
// are one clock, which Now reads through Redis.
func harness(c rueidis.Client, gc redis.UniversalClient) func(t *testing.T) storetest.Harness {
	return func(t *testing.T) storetest.Harness {
		return storetest.Harness{
			Store:   newStore(t, c, gc, nil),
			Advance: time.Sleep,
			Tick:    tick,
			Now: func() time.Time {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				now, err := gc.Time(ctx).Result()
				require.NoError(t, err)
				return now
			},
		}
	}
}

func TestStoretest(t *testing.T) {
	c, gc := shared(t)
	storetest.Run(t, harness(c, gc))
}

// TestCluster runs the suite on a Cluster of three masters, where a batch
// is one script run per key, pipelined to each node.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node Redis Cluster")
	}
	gc, servers := redistest.StartCluster(t)
	c := connect(t, rueidis.ClientOption{InitAddress: []string{servers[0].Addr()}})
	storetest.Run(t, harness(c, gc))
}
