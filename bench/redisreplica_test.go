package bench

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/store/redisstore"
)

// The replica rows measure what redisstore's Options.MinReplicas costs: a
// master with one replica, both servers of the row's own, and two stores
// on the one client, without and with MinReplicas 1 (a WAIT 1 after every
// write, in the same pipeline). The plain side is the baseline, so the
// ratio is the cost of waiting for the replica.

// startReplicatedRedis starts a master and a replica and returns a client
// of the master.
func startReplicatedRedis(tb testing.TB) *redis.Client {
	master := redistest.StartServer(tb, "--repl-diskless-sync-delay", "0")
	redistest.StartReplica(tb, master)
	c := redis.NewClient(&redis.Options{Addr: master.Addr(), PoolSize: 32})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

func newReplicatedReceiver(tb testing.TB, c *redis.Client, minReplicas int) *dedup.Receiver[order, struct{}] {
	st, err := redisstore.New(context.Background(), c, &redisstore.Options{MinReplicas: minReplicas})
	if err != nil {
		tb.Fatal(err)
	}
	rcv, err := dedup.NewReceiver(st, orderID, nothing, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return rcv
}

func init() {
	ctx := context.Background()
	handle := func(tb testing.TB, rcv *dedup.Receiver[order, struct{}], id string) {
		if res, err := rcv.Handle(ctx, order{ID: id}); err != nil || res.Status != delivery.StatusProcessed {
			tb.Errorf("status %v, %v", res.Status, err)
		}
	}
	sides := func(tb testing.TB, run func(rcv *dedup.Receiver[order, struct{}], keys []string, n int) sample) []side {
		c := startReplicatedRedis(tb)
		plain, waited := newReplicatedReceiver(tb, c, 0), newReplicatedReceiver(tb, c, 1)
		return []side{
			{name: "dedup Handle, redisstore, master with a replica", run: func(tb testing.TB, n int) sample {
				return run(plain, ids(runPrefix("plain"), n), n)
			}},
			{name: "the same, MinReplicas 1 (WAIT 1 after each write)", run: func(tb testing.TB, n int) sample {
				return run(waited, ids(runPrefix("waited"), n), n)
			}},
		}
	}
	register(row{
		name: "new message on Redis with a replica, sequential",
		unit: "ns/op", n: 3000, chunk: 100, cpu: true,
		setup: func(tb testing.TB) []side {
			return sides(tb, func(rcv *dedup.Receiver[order, struct{}], keys []string, n int) sample {
				return timed(n, func(i int) { handle(tb, rcv, keys[i]) })
			})
		},
	}, row{
		name: "new messages on Redis with a replica, 16 goroutines",
		unit: "msgs/s", n: 10000,
		setup: func(tb testing.TB) []side {
			return sides(tb, func(rcv *dedup.Receiver[order, struct{}], keys []string, n int) sample {
				return rate(n, func() { parallel(n, 16, func(i int) { handle(tb, rcv, keys[i]) }) })
			})
		},
	})
}
