// Package redistest gives tests a client of the shared Redis and a key
// prefix of their own, so that tests share one server without flushing it.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedup-go/dedup/internal/testenv"
)

// Client returns a client of the shared Redis (127.0.0.1:6379, or
// DEDUP_TEST_REDIS as host:port or a redis:// URL), closed when t ends. It
// skips t when Redis is unreachable (fails it under DEDUP_TEST_REQUIRE=1).
func Client(t testing.TB) *redis.Client {
	t.Helper()
	addr := testenv.Redis.Addr(t)
	opts := &redis.Options{Addr: addr}
	if strings.Contains(addr, "://") {
		var err error
		if opts, err = redis.ParseURL(addr); err != nil {
			t.Fatalf("redistest: %s=%q: %v", testenv.Redis.Env, addr, err)
		}
	}
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Prefix returns a key prefix no other test uses, and deletes its keys on c
// when t ends.
func Prefix(t testing.TB, c redis.UniversalClient) string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms.
	prefix := "dedup-test:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() { DeleteAll(t, c, prefix) })
	return prefix
}

// DeleteAll removes the keys under prefix, and those under a hash tag and
// then prefix (the Redis stores' step records: "{tag}" + prefix + ...),
// on every master of a Cluster. A failure is logged: the keys expire
// anyway.
func DeleteAll(t testing.TB, c redis.UniversalClient, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	if cc, ok := c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return deleteOn(ctx, m, prefix) })
	} else {
		err = deleteOn(ctx, c, prefix)
	}
	if err != nil {
		t.Logf("redistest: clean up keys %s*: %v", prefix, err)
	}
}

func deleteOn(ctx context.Context, node redis.UniversalClient, prefix string) error {
	for _, match := range []string{prefix + "*", "{*}" + prefix + "*"} {
		if err := deleteMatching(ctx, node, match); err != nil {
			return err
		}
	}
	return nil
}

func deleteMatching(ctx context.Context, node redis.UniversalClient, match string) error {
	var cursor uint64
	for {
		keys, next, err := node.Scan(ctx, cursor, match, 1000).Result()
		if err != nil {
			return err
		}
		// One DEL per key: the keys of a Cluster node span many slots.
		pipe := node.Pipeline()
		for _, k := range keys {
			pipe.Del(ctx, k)
		}
		if _, err := pipe.Exec(ctx); err != nil && len(keys) > 0 {
			return err
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}
