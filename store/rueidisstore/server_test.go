package rueidisstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/rueidisstore"
)

// shared returns a rueidis client of the shared Redis (as redistest.Client
// finds it: skipped when Redis is unreachable, failed under
// DEDUP_TEST_REQUIRE=1), and a go-redis client of the same server, for
// the test's clean-up and for what the test reads beside the store. Both
// are closed when t ends.
func shared(t testing.TB) (rueidis.Client, *redis.Client) {
	t.Helper()
	gc := redistest.Client(t) // skips or fails first when Redis is unreachable
	addr := testenv.Redis.Addr(t)
	opts := rueidis.ClientOption{InitAddress: []string{addr}}
	if strings.Contains(addr, "://") {
		var err error
		opts, err = rueidis.ParseURL(addr)
		require.NoError(t, err)
	}
	return connect(t, opts), gc
}

// connect returns a rueidis client with opts, closed when t ends.
func connect(t testing.TB, opts rueidis.ClientOption) rueidis.Client {
	t.Helper()
	opts.DisableCache = true
	c, err := rueidis.NewClient(opts)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// newStore returns a store on c under a fresh prefix whose keys gc deletes
// when t ends, unless opts names a prefix.
func newStore(t testing.TB, c rueidis.Client, gc redis.UniversalClient, opts *rueidisstore.Options) *rueidisstore.Store {
	t.Helper()
	var o rueidisstore.Options
	if opts != nil {
		o = *opts
	}
	if o.Prefix == "" {
		o.Prefix = redistest.Prefix(t, gc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := rueidisstore.New(ctx, c, &o)
	require.NoError(t, err)
	return s
}
