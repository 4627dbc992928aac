package redistest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartReplica starts a redis-server that replicates master (extra
// options go to it) and waits until its link to the master is up.
func StartReplica(t testing.TB, master *Server, extra ...string) *Server {
	t.Helper()
	r := StartServer(t, append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(master.Port())}, extra...)...)
	WaitLinkUp(t, r.Addr(), 30*time.Second)
	return r
}

// WaitLinkUp waits until the replica at addr reports its link to its
// master up (INFO replication), failing t after within.
func WaitLinkUp(t testing.TB, addr string, within time.Duration) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	if !eventually(within, func() bool {
		info, err := c.Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	}) {
		t.Fatalf("redistest: the replica on %s has no link to its master within %v", addr, within)
	}
}

// Role returns what the server at addr says it is (ROLE): "master",
// "slave", or "" when it does not answer.
func Role(ctx context.Context, addr string) string {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	v, err := c.Do(ctx, "ROLE").Slice()
	if err != nil || len(v) == 0 {
		return ""
	}
	role, _ := v[0].(string)
	return role
}

// WaitRole waits until the server at addr says it is role ("master" or
// "slave"), failing t after within.
func WaitRole(t testing.TB, addr, role string, within time.Duration) {
	t.Helper()
	if !eventually(within, func() bool { return Role(context.Background(), addr) == role }) {
		t.Fatalf("redistest: the server on %s is not a %s within %v", addr, role, within)
	}
}
