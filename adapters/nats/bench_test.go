package nats_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupnats "github.com/dedup-go/dedup/adapters/nats"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/memstore"
)

const benchConcurrency = 8

// BenchmarkJetStream consumes b.N distinct orders from a stream with a bare
// JetStream consumer (decode, handler, Ack, on the same number of workers)
// and with the same consumer wrapped by dedup over memstore, in the same
// run, so the two msgs/s read as a ratio. Both pull DefaultPrefetch
// messages ahead. Publishing is outside the timer.
func BenchmarkJetStream(b *testing.B) { benchServers(b, 0) }

// BenchmarkJetStreamIO is BenchmarkJetStream with a handler that waits
// 100µs, as a fast database write would: the usual case, where the
// consumer's own overhead matters less.
func BenchmarkJetStreamIO(b *testing.B) { benchServers(b, 100*time.Microsecond) }

func benchServers(b *testing.B, work time.Duration) {
	for _, srv := range []struct {
		name string
		url  func(testing.TB) string
	}{
		{"embedded", func(tb testing.TB) string { return embedded(tb) }},
		{"shared", func(tb testing.TB) string { return testenv.NATS.Addr(tb) }},
	} {
		b.Run(srv.name, func(b *testing.B) {
			url := srv.url(b)
			b.Run("bare", func(b *testing.B) { benchConsume(b, url, work, consumeBare) })
			b.Run("dedup", func(b *testing.B) { benchConsume(b, url, work, consumeDedup) })
		})
	}
}

// consumeFunc consumes count messages from cons, calling handle for each,
// and returns when all are acknowledged.
type consumeFunc func(b *testing.B, js jetstream.JetStream, cons jetstream.Consumer, count int, handle func(Order))

func benchConsume(b *testing.B, url string, work time.Duration, consume consumeFunc) {
	_, js := connect(b, url)
	n := newNames()
	streams(b, js, n)
	cons := consumer(b, js, n, jetstream.ConsumerConfig{AckWait: 30 * time.Second, MaxDeliver: 5})
	for i := range b.N {
		data, _ := json.Marshal(Order{ID: fmt.Sprintf("o-%09d", i), Cents: i})
		if _, err := js.PublishAsync(n.subject, data); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("publishing did not complete")
	}
	var sum atomic.Int64
	handle := func(o Order) { // the user's work
		if work > 0 {
			time.Sleep(work)
		}
		sum.Add(int64(o.Cents))
	}
	b.ResetTimer()
	start := time.Now()
	consume(b, js, cons, b.N, handle)
	elapsed := time.Since(start)
	b.StopTimer()
	require.Equal(b, int64(b.N)*int64(b.N-1)/2, sum.Load(), "every message handled exactly once")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
}

func consumeBare(b *testing.B, _ jetstream.JetStream, cons jetstream.Consumer, count int, handle func(Order)) {
	iter, err := cons.Messages(jetstream.PullMaxMessages(dedupnats.DefaultPrefetch), jetstream.WithMessagesErrOnMissingHeartbeat(false))
	require.NoError(b, err)
	var acked atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range benchConcurrency {
		wg.Go(func() {
			for {
				m, err := iter.Next()
				if err != nil {
					return
				}
				var o Order
				if err := json.Unmarshal(m.Data(), &o); err != nil {
					_ = m.Term()
					continue
				}
				handle(o)
				_ = m.Ack()
				if acked.Add(1) == int64(count) {
					close(done)
				}
			}
		})
	}
	<-done
	iter.Stop()
	wg.Wait()
}

func consumeDedup(b *testing.B, js jetstream.JetStream, cons jetstream.Consumer, count int, handle func(Order)) {
	store, err := memstore.New(&memstore.Options{Capacity: count + 1000})
	require.NoError(b, err)
	// No Observer (it would time every delivery): the handlers count, and
	// Stop waits for the workers, so every Ack is out when it returns.
	var handled atomic.Int64
	done := make(chan struct{})
	rcv, err := dedup.NewReceiver(store, idstrategy.BodyField("id", func(o Order) string { return o.ID }),
		func(_ context.Context, m *dedup.Message[Order]) (struct{}, error) {
			handle(m.Body)
			if handled.Add(1) == int64(count) {
				close(done)
			}
			return struct{}{}, nil
		}, nil)
	require.NoError(b, err)
	c, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{Concurrency: benchConcurrency, DropPoison: true})
	require.NoError(b, err)
	require.NoError(b, c.Start(context.Background()))
	<-done
	if err := c.Stop(context.Background()); err != nil && !errors.Is(err, context.Canceled) {
		b.Fatal(err)
	}
}
