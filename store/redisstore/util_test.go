package redisstore_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/store/redisstore"
)

func itoa(n int) string { return strconv.Itoa(n) }

// expiryOf returns when Redis expires the record of key in s (PEXPIRETIME),
// failing the test when it has no expiry.
func expiryOf(t *testing.T, c redis.UniversalClient, s *redisstore.Store, key string) time.Time {
	t.Helper()
	ms, err := c.Do(t.Context(), "PEXPIRETIME", s.RedisKey(key)).Int64()
	require.NoError(t, err)
	require.Positive(t, ms, "%s has no expiry", key)
	return time.UnixMilli(ms)
}
