package redisstore_test

import (
	"context"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/redisstore"
)

// newStore returns a store on c under a fresh prefix, whose keys are
// deleted when t ends.
func newStore(t testing.TB, c redis.UniversalClient, opts *redisstore.Options) *redisstore.Store {
	t.Helper()
	var o redisstore.Options
	if opts != nil {
		o = *opts
	}
	if o.Prefix == "" {
		o.Prefix = redistest.Prefix(t, c)
	}
	s, err := redisstore.New(context.Background(), c, &o)
	require.NoError(t, err)
	return s
}

// startCluster starts a Redis Cluster of three masters on free loopback
// ports and returns a client of it and its nodes (extra options go to each
// node); the nodes are killed when t ends.
func startCluster(t testing.TB, extra ...string) (*redis.ClusterClient, []*redistest.Server) {
	t.Helper()
	cli := testenv.Binary(t, "redis-cli", "scripts/services.sh redis (apt-get install redis-server)")
	var addrs []string
	var nodes []*redistest.Server
	for range 3 {
		s := redistest.StartServerOn(t, redistest.FreePortPair(t, 10000),
			append([]string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000"}, extra...)...)
		addrs = append(addrs, s.Addr())
		nodes = append(nodes, s)
	}
	create := exec.Command(cli, append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "0", "--cluster-yes")...)
	out, err := create.CombinedOutput()
	require.NoError(t, err, "redis-cli --cluster create: %s", out)

	// The nodes agree on the slots a moment after create returns.
	for _, addr := range addrs {
		c := redis.NewClient(&redis.Options{Addr: addr})
		require.Eventually(t, func() bool {
			info, err := c.ClusterInfo(context.Background()).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok")
		}, 30*time.Second, 50*time.Millisecond, "cluster node %s not ok", addr)
		_ = c.Close()
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = cc.Close() })
	require.Eventually(t, func() bool {
		var n atomic.Int32 // ForEachMaster runs its callbacks concurrently
		err := cc.ForEachMaster(context.Background(), func(context.Context, *redis.Client) error {
			n.Add(1)
			return nil
		})
		return err == nil && n.Load() == 3
	}, 30*time.Second, 50*time.Millisecond, "cluster client does not see 3 masters")
	return cc, nodes
}
