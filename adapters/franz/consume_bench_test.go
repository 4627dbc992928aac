package dedupfranz_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedup-go/dedup"
	dedupfranz "github.com/dedup-go/dedup/adapters/franz"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/store/memstore"
)

// BenchmarkConsume measures what the Consumer costs per record on kfake
// (in process: kfake's own work is in the profile too): n orders on 3
// partitions, a trivial handler over memstore, at a 100 ms commit cadence
// and committing after every outcome. It reports allocations and
// nanoseconds per record.
func BenchmarkConsume(b *testing.B) {
	for _, bc := range []struct {
		name     string
		n        int
		interval time.Duration
	}{
		{"interval", 60000, 100 * time.Millisecond},
		{"every", 4000, dedupfranz.CommitEveryOutcome},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cluster := startCluster(b, 3)
			addrs := cluster.ListenAddrs()
			prod := newProducer(b, addrs)
			b.ReportAllocs()
			var msgs, allocs uint64
			var took, cpu time.Duration
			for i := range b.N {
				topic := fmt.Sprintf("bench-%s-%d", bc.name, i)
				createTopics(b, addrs, 3, topic)
				recs := make([]*kgo.Record, bc.n)
				for j := range recs {
					recs[j] = orderRecord(b, topic, int32(j%3), j)
				}
				produce(b, prod, recs...)
				st, err := memstore.New(&memstore.Options{Capacity: 2 * bc.n})
				require.NoError(b, err)
				var handled atomic.Int64
				done := make(chan struct{})
				rcv, err := dedup.NewReceiver(st, idstrategy.BodyField("id", func(o Order) string { return o.ID }),
					func(_ context.Context, m *dedup.Message[Order]) (struct{}, error) {
						if handled.Add(1) == int64(bc.n) {
							close(done)
						}
						return struct{}{}, nil
					}, &dedup.Config{Retention: 7 * 24 * time.Hour, Logger: slog.New(slog.DiscardHandler)})
				require.NoError(b, err)
				c, err := dedupfranz.NewConsumer(clientOpts(addrs), topic, []string{topic}, rcv,
					&dedupfranz.Options{DropPoison: true, CommitInterval: bc.interval})
				require.NoError(b, err)
				var ms0, ms1 runtime.MemStats
				runtime.ReadMemStats(&ms0)
				cpu0 := cpuTime()
				b.StartTimer()
				begin := time.Now()
				require.NoError(b, c.Start(context.Background()))
				select {
				case <-done:
				case <-time.After(time.Minute):
					b.Fatal("timeout")
				}
				took += time.Since(begin)
				cpu += cpuTime() - cpu0
				b.StopTimer()
				runtime.ReadMemStats(&ms1)
				allocs += ms1.Mallocs - ms0.Mallocs
				msgs += uint64(bc.n)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				require.NoError(b, c.Stop(ctx))
				cancel()
			}
			b.ReportMetric(float64(allocs)/float64(msgs), "allocs/msg")
			b.ReportMetric(float64(took.Nanoseconds())/float64(msgs), "ns/msg")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(msgs)/1000, "cpu-µs/msg")
		})
	}
}

// cpuTime is the CPU time the process used so far (user and system):
// kfake's, in process, too.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
