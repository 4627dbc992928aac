package redistest

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedup-go/dedup/internal/testenv"
)

// StartCluster starts a Redis Cluster of three masters (no replicas) on
// free loopback ports and returns a client of it and its nodes (extra
// options go to each node); the nodes are killed and the client closed when
// t ends.
func StartCluster(t testing.TB, extra ...string) (*redis.ClusterClient, []*Server) {
	t.Helper()
	return StartClusterReplicas(t, 0, extra...)
}

// StartClusterReplicas is StartCluster with replicas replicas per master:
// the nodes are the three masters, then their replicas, and it returns
// once every replica's link to its master is up.
func StartClusterReplicas(t testing.TB, replicas int, extra ...string) (*redis.ClusterClient, []*Server) {
	t.Helper()
	cli := testenv.Binary(t, "redis-cli", installRedis)
	var addrs []string
	var nodes []*Server
	for range 3 * (1 + replicas) {
		s := startOnFree(t, func(t testing.TB) int { return FreePortPair(t, 10000) },
			append([]string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000"}, extra...))
		addrs = append(addrs, s.Addr())
		nodes = append(nodes, s)
	}
	create := exec.Command(cli, append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")...)
	if out, err := create.CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v: %s", err, out)
	}

	// The nodes agree on the slots a moment after create returns.
	for _, addr := range addrs {
		c := redis.NewClient(&redis.Options{Addr: addr})
		ok := eventually(30*time.Second, func() bool {
			info, err := c.ClusterInfo(context.Background()).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok")
		})
		_ = c.Close()
		if !ok {
			t.Fatalf("redistest: cluster node %s not ok within 30s", addr)
		}
	}
	for _, addr := range addrs[3:] {
		WaitLinkUp(t, addr, 30*time.Second)
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = cc.Close() })
	if !eventually(30*time.Second, func() bool {
		var n atomic.Int32 // ForEachMaster runs its callbacks concurrently
		err := cc.ForEachMaster(context.Background(), func(context.Context, *redis.Client) error {
			n.Add(1)
			return nil
		})
		return err == nil && n.Load() == 3
	}) {
		t.Fatalf("redistest: the cluster client does not see 3 masters within 30s")
	}
	return cc, nodes
}

// eventually polls cond every 50ms until it holds or within has passed.
func eventually(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}
