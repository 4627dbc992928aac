package dedupredisstream_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupredisstream "github.com/dedup-go/dedup/adapters/redisstream"
	"github.com/dedup-go/dedup/internal/redistest"
)

// benchEntries adds b.N entries to a stream of the benchmark's own.
func benchEntries(b *testing.B) (*redis.Client, string) {
	c := redistest.Client(b)
	stream := redistest.Prefix(b, c) + "bench"
	ctx := context.Background()
	require.NoError(b, c.XGroupCreateMkStream(ctx, stream, "g", "0").Err())
	_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range b.N {
			p.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"message-id", fmt.Sprint("m-", i), "data", fmt.Sprintf(`{"id":"m-%d"}`, i)}})
		}
		return nil
	})
	require.NoError(b, err)
	return c, stream
}

// The adapter over memstore against a bare XREADGROUP + XACK loop with the
// same batch (32) and workers (8). The adapter's run ends at its last
// handler call, not at its last XACK.
func BenchmarkConsume(b *testing.B) {
	b.Run("bare", func(b *testing.B) {
		c, stream := benchEntries(b)
		ctx := context.Background()
		work := make(chan string, 32)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for id := range work {
					_ = c.XAck(ctx, stream, "g", id).Err()
				}
			})
		}
		b.ResetTimer()
		for n := 0; n < b.N; {
			res, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "bare", Streams: []string{stream, ">"}, Count: 32, Block: -1}).Result()
			require.NoError(b, err)
			for _, m := range res[0].Messages {
				work <- m.ID
				n++
			}
		}
		close(work)
		wg.Wait()
	})
	b.Run("adapter", func(b *testing.B) {
		c, stream := benchEntries(b)
		var done atomic.Int64
		all := make(chan struct{})
		rcv := newReceiver(b, func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
			if done.Add(1) == int64(b.N) {
				close(all)
			}
			return Receipt{}, nil
		}, &dedup.Config{Namespace: "bench"})
		k, err := dedupredisstream.NewConsumer(c, stream, "g", rcv, &dedupredisstream.Options{Consumer: "adapter", DropPoison: true, Batch: 32, Concurrency: 8})
		require.NoError(b, err)
		b.ResetTimer()
		start(b, k)
		select {
		case <-all:
		case <-time.After(waitFor):
			b.Fatalf("%d of %d entries handled within %v", done.Load(), b.N, waitFor)
		}
		b.StopTimer()
	})
}
