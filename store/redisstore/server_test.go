package redisstore_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/redistest"
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
// ports (see redistest.StartCluster).
func startCluster(t testing.TB, extra ...string) (*redis.ClusterClient, []*redistest.Server) {
	t.Helper()
	return redistest.StartCluster(t, extra...)
}
