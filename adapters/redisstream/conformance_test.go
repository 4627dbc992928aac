package dedupredisstream_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter/adaptertest"
	dedupredisstream "github.com/dedup-go/dedup/adapters/redisstream"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/redistest"
)

var sources atomic.Int64

func TestConformance(t *testing.T) {
	adaptertest.Run(t, adaptertest.Harness{NewSource: func(t *testing.T) adaptertest.Source {
		c := redistest.Client(t)
		p := redistest.Prefix(t, c)
		stream, dl := p+"orders", p+"orders.dlq"
		name := "conformance-" + strconv.FormatInt(sources.Add(1), 10)
		return adaptertest.Source{
			Name: stream,
			Publish: func(ctx context.Context, m adaptertest.Message) error {
				values := []any{"data", m.Data}
				if m.ID != "" {
					values = append(values, "message-id", m.ID)
				}
				for k, v := range m.Header {
					values = append(values, k, v)
				}
				return c.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: values}).Err()
			},
			NewConsumer: func(rcv *dedup.Receiver[*dedup.Message[adaptertest.Order], adaptertest.Receipt]) (dedup.Consumer, error) {
				return dedupredisstream.NewConsumer(c, stream, "billing", rcv, &dedupredisstream.Options{
					Consumer: name, CreateGroup: true, DeadLetterStream: dl, Block: 100 * time.Millisecond,
					ClaimIdle: 500 * time.Millisecond,
				})
			},
			DeadLetters: func(ctx context.Context, n int) ([]adaptertest.DeadLetter, error) {
				var out []adaptertest.DeadLetter
				for {
					msgs, err := c.XRange(ctx, dl, "-", "+").Result()
					if err != nil {
						return out, err
					}
					out = out[:0]
					for _, m := range msgs {
						h := delivery.MapHeader{}
						for k, v := range m.Values {
							h[k] = []string{v.(string)}
						}
						data, _ := m.Values["data"].(string)
						out = append(out, adaptertest.DeadLetter{Header: h, Data: []byte(data)})
					}
					if len(out) >= n {
						return out, nil
					}
					select {
					case <-ctx.Done():
						return out, ctx.Err()
					case <-time.After(20 * time.Millisecond):
					}
				}
			},
		}
	}})
}
