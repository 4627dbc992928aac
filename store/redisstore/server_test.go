package redisstore_test

import (
	"context"
	"net"
	"os/exec"
	"strconv"
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

const installRedis = "scripts/services.sh redis (apt-get install redis-server)"

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

// server is a redis-server of the test's own, which it may stop and start.
type server struct {
	t    testing.TB
	bin  string
	port int
	dir  string
	args []string
	cmd  *exec.Cmd
}

// startServer starts a redis-server on a free loopback port; it is killed
// when t ends. extra are more command-line options.
func startServer(t testing.TB, extra ...string) *server {
	t.Helper()
	s := &server{
		t:    t,
		bin:  testenv.Binary(t, "redis-server", installRedis),
		port: freePort(t, 0),
		dir:  t.TempDir(),
		args: extra,
	}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// Addr is the server's host:port.
func (s *server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Start starts the server (again) and waits until it answers PING.
func (s *server) Start() {
	s.t.Helper()
	args := append([]string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--logfile", "redis.log",
	}, s.args...)
	s.cmd = exec.Command(s.bin, args...)
	require.NoError(s.t, s.cmd.Start(), "start redis-server")
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.Stop()
			s.t.Fatalf("redis-server on %s did not answer within 15s: %v (log: %s/redis.log)", s.Addr(), err, s.dir)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the server, as a crash would, and waits for it to exit.
func (s *server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// freePort returns a free loopback port whose port+offset is free too (a
// Cluster node's bus port is its port + 10000).
func freePort(t testing.TB, offset int) int {
	t.Helper()
	for range 100 {
		port := testenv.FreePort(t)
		if offset == 0 {
			return port
		}
		if port+offset > 65535 {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+offset))
		if err != nil {
			continue
		}
		_ = l.Close()
		return port
	}
	t.Fatalf("no free port pair %d apart", offset)
	return 0
}

// startCluster starts a Redis Cluster of three masters on free loopback
// ports and returns a client of it; the nodes are killed when t ends.
func startCluster(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cli := testenv.Binary(t, "redis-cli", installRedis)
	var addrs []string
	for range 3 {
		s := &server{t: t, bin: testenv.Binary(t, "redis-server", installRedis), port: freePort(t, 10000), dir: t.TempDir()}
		s.args = []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000"}
		s.Start()
		t.Cleanup(s.Stop)
		addrs = append(addrs, s.Addr())
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
	return cc
}
