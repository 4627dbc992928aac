package bench

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/redisstore"
)

// The memory row: what Redis spends (MEMORY USAGE) on a completed
// redisstore record, beside a bare SET of a 4-byte value under a key of the
// same length, in the layout of redisstore's TestRecordSize that the aim
// was set on: a key of 36 bytes, a result of 11. Every run writes n
// records of each and averages their MEMORY USAGE, which moves only when
// the layout, the key or Redis does.
func init() {
	const result = `{"ok":true}`
	register(row{
		name: "redisstore MEMORY USAGE per completed record",
		unit: "B", n: 100,
		setup: func(tb testing.TB) []side {
			ctx := context.Background()
			c := startRedis(tb)
			st, err := redisstore.New(ctx, c, nil)
			if err != nil {
				tb.Fatal(err)
			}
			// id is a key of the namespace "billing-eu-west" whose Redis
			// key has 36 bytes: 10 characters of id after the prefix.
			id := func(prefix string, i int) string {
				s := prefix + strconv.Itoa(i)
				return "billing-eu-west:" + strings.Repeat("0", max(10-len(s), 0)) + s
			}
			usage := func(tb testing.TB, key string) float64 {
				v, err := c.MemoryUsage(ctx, key).Result()
				if err != nil {
					tb.Fatal(err)
				}
				return float64(v)
			}
			return []side{
				{name: "bare SET of a 4-byte value, a key of the same length", run: func(tb testing.TB, n int) sample {
					prefix := runPrefix("b")
					var sum float64
					for i := range n {
						k := st.RedisKey(id(prefix, i))
						if err := c.Set(ctx, k, "done", time.Hour).Err(); err != nil {
							tb.Fatal(err)
						}
						sum += usage(tb, k)
					}
					return sample{value: sum / float64(n)}
				}},
				{name: "redisstore completed record, result of 11 bytes", run: func(tb testing.TB, n int) sample {
					prefix := runPrefix("r")
					var sum float64
					for i := range n {
						key := id(prefix, i)
						if k := st.RedisKey(key); len(k) != 36 {
							tb.Fatalf("Redis key %q has %d bytes, not 36", k, len(k))
						}
						cl, err := st.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
						if err != nil || !cl.Acquired {
							tb.Fatalf("acquire %s: %v, %+v", key, err, cl)
						}
						if err := st.Complete(ctx, store.CompleteRequest{Key: key, Token: cl.Token, Result: []byte(result), Retention: time.Hour}); err != nil {
							tb.Fatal(err)
						}
						sum += usage(tb, st.RedisKey(key))
					}
					return sample{value: sum / float64(n)}
				}},
			}
		},
	})
}
