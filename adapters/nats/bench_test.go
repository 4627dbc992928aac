package dedupnats_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	dedupnats "github.com/dedup-go/dedup/adapters/nats"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/memstore"
)

// benchConcurrency is the number of workers of every side.
const benchConcurrency = dedupnats.DefaultConcurrency

// benchRounds is how many paired rounds one benchmark run holds.
const benchRounds = 3

// BenchmarkJetStream compares, in paired rounds of the same run, three
// consumers of b.N distinct orders:
//
//   - bare: a JetStream consumer a user would write (decode, handler, Ack);
//   - receiver: the same loop calling dedup.Receiver.Handle over memstore
//     before the Ack, on a cancellable context (a consumer that can stop
//     its handlers needs one): the least any adapter pays, the receiver's
//     own cost;
//   - dedup: the Consumer of this package over the same receiver.
//
// All three pull with the same options (PullMaxMessages(DefaultPrefetch)),
// run DefaultConcurrency workers, decode JSON and send asynchronous Acks
// (no round trip per message: the adapter's default, AckSync false), each
// on its own connection, stream and consumer. The order of the sides
// rotates from round to round, and the heap is collected before each side,
// so that neither drift on this shared machine nor the other side's garbage
// favours one. A side is timed from the start of consuming until every
// message is acknowledged and the consumer stopped; publishing is outside
// the timer. It reports each side's median msgs/s, the medians of the
// per-round ratios (dedup/bare, receiver/bare, dedup/receiver), the client
// messages sent per message by each side (Acks and pull requests), which
// shows the ack mode is the same, and the CPU time of this process per
// message (the client's, plus the server's when it is embedded), which on
// this shared machine is steadier than msgs/s. Each side runs under the
// pprof label side=<name>, so that a CPU profile of the run tells them
// apart: go tool pprof -tagfocus side=dedup.
func BenchmarkJetStream(b *testing.B) { benchServers(b, 0) }

// BenchmarkJetStreamIO is BenchmarkJetStream with a handler that waits
// 100µs, as a fast database write would: the usual case, where the
// consumer's own overhead matters less. A 100µs time.Sleep lasts longer
// the idler the process is (its timer wakes a parked runtime late), so the
// busier sides sleep closer to 100µs: a ratio above 1 here is that, not a
// speed-up, and reads as "no measurable cost".
func BenchmarkJetStreamIO(b *testing.B) { benchServers(b, 100*time.Microsecond) }

func benchServers(b *testing.B, work time.Duration) {
	for _, srv := range []struct {
		name string
		url  func(testing.TB) string
	}{
		{"embedded", func(tb testing.TB) string { return embedded(tb) }},
		{"shared", func(tb testing.TB) string { return testenv.NATS.Addr(tb) }},
	} {
		b.Run(srv.name, func(b *testing.B) { benchPaired(b, srv.url(b), work) })
	}
}

// benchSide is one consumer under comparison.
type benchSide struct {
	name    string
	consume consumeFunc
}

var benchSides = []benchSide{
	{"bare", consumeBare},
	{"receiver", consumeReceiver},
	{"dedup", consumeDedup},
}

func benchPaired(b *testing.B, url string, work time.Duration) {
	rates := make(map[string][]float64)
	outs := make(map[string][]float64)
	cpus := make(map[string][]float64)
	for round := range benchRounds {
		for i := range benchSides {
			side := benchSides[(round+i)%len(benchSides)]
			var r benchResult
			// The goroutines of the side's connection and consumer
			// inherit the label (its publishing too: the same for all).
			pprof.Do(context.Background(), pprof.Labels("side", side.name), func(context.Context) {
				r = benchConsume(b, url, work, side.consume)
			})
			rates[side.name] = append(rates[side.name], r.rate)
			outs[side.name] = append(outs[side.name], r.sentPerMsg)
			cpus[side.name] = append(cpus[side.name], r.cpuPerMsg)
		}
	}
	ratios := func(num, den string) []float64 {
		r := make([]float64, benchRounds)
		for i := range r {
			r[i] = rates[num][i] / rates[den][i]
		}
		return r
	}
	b.ReportMetric(0, "ns/op") // a message's time is in msgs/s: rounds, setup and publishing are not
	for _, s := range benchSides {
		b.ReportMetric(median(rates[s.name]), s.name+"-msgs/s")
		b.ReportMetric(median(outs[s.name]), s.name+"-sent/msg")
		b.ReportMetric(median(cpus[s.name]), s.name+"-cpu-us/msg")
	}
	b.ReportMetric(median(ratios("dedup", "bare")), "dedup/bare")
	b.ReportMetric(median(ratios("receiver", "bare")), "receiver/bare")
	b.ReportMetric(median(ratios("dedup", "receiver")), "dedup/receiver")
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// consumeFunc consumes count messages from cons, calling handle for each,
// and returns when all are acknowledged and consuming has stopped.
type consumeFunc func(b *testing.B, js jetstream.JetStream, cons jetstream.Consumer, count int, handle func(Order))

// benchResult is what one side measured in one round.
type benchResult struct {
	rate       float64 // msgs/s
	sentPerMsg float64 // client messages sent (Acks, pull requests) per message
	cpuPerMsg  float64 // µs of this process's CPU per message: the client's, and the embedded server's
}

// benchConsume publishes b.N orders to a new stream and times consume on
// them.
func benchConsume(b *testing.B, url string, work time.Duration, consume consumeFunc) benchResult {
	b.StopTimer()
	nc, err := natsgo.Connect(url, natsgo.MaxReconnects(0))
	require.NoError(b, err)
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1<<16))
	require.NoError(b, err)
	n := newNames()
	ctx := context.Background()
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: n.stream, Subjects: []string{n.subject}, Storage: jetstream.MemoryStorage})
	require.NoError(b, err)
	defer func() { _ = js.DeleteStream(context.Background(), n.stream) }()
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
	runtime.GC()
	before := nc.Stats().OutMsgs
	b.StartTimer()
	cpu, start := dedupnats.ProcessCPU(), time.Now()
	consume(b, js, cons, b.N, handle)
	elapsed, cpu := time.Since(start), dedupnats.ProcessCPU()-cpu
	b.StopTimer()
	sent := nc.Stats().OutMsgs - before
	require.Equal(b, int64(b.N)*int64(b.N-1)/2, sum.Load(), "every message handled exactly once")
	settled(b, cons, 10*time.Second) // every Ack reached the server
	return benchResult{
		rate:       float64(b.N) / elapsed.Seconds(),
		sentPerMsg: float64(sent) / float64(b.N),
		cpuPerMsg:  float64(cpu.Microseconds()) / float64(b.N),
	}
}

// bareLoop runs the workers of the bare and receiver sides: it pulls with
// the adapter's settings and calls each message's handling, which settles
// it, until count are settled.
func bareLoop(b *testing.B, cons jetstream.Consumer, count int, each func(m jetstream.Msg)) {
	iter, err := cons.Messages(jetstream.PullMaxMessages(dedupnats.DefaultPrefetch), jetstream.WithMessagesErrOnMissingHeartbeat(false))
	require.NoError(b, err)
	var settled atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range benchConcurrency {
		wg.Go(func() {
			for {
				m, err := iter.Next()
				if err != nil {
					return
				}
				each(m)
				if settled.Add(1) == int64(count) {
					close(done)
				}
			}
		})
	}
	<-done
	iter.Stop()
	wg.Wait()
}

func consumeBare(b *testing.B, _ jetstream.JetStream, cons jetstream.Consumer, count int, handle func(Order)) {
	bareLoop(b, cons, count, func(m jetstream.Msg) {
		var o Order
		if err := json.Unmarshal(m.Data(), &o); err != nil {
			_ = m.Term()
			return
		}
		handle(o)
		_ = m.Ack()
	})
}

// benchReceiver is the receiver of the receiver and dedup sides: memstore
// sized for count keys, the key from the body, no Observer (it would time
// every delivery).
func benchReceiver(b *testing.B, count int, handle func(Order)) *dedup.Receiver[*dedup.Message[Order], struct{}] {
	store, err := memstore.New(&memstore.Options{Capacity: count + 1000})
	require.NoError(b, err)
	rcv, err := dedup.NewReceiver(store, idstrategy.BodyField("id", func(o Order) string { return o.ID }),
		func(_ context.Context, m *dedup.Message[Order]) (struct{}, error) {
			handle(m.Body)
			return struct{}{}, nil
		}, nil)
	require.NoError(b, err)
	return rcv
}

func consumeReceiver(b *testing.B, _ jetstream.JetStream, cons jetstream.Consumer, count int, handle func(Order)) {
	rcv := benchReceiver(b, count, handle)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bareLoop(b, cons, count, func(m jetstream.Msg) {
		env := &dedup.Message[Order]{Data: m.Data(), Native: m}
		if err := adapter.DecodeBody(dedup.JSONDecoder{}, env); err != nil {
			_ = m.Term()
			return
		}
		if _, err := rcv.Handle(ctx, env); err != nil {
			_ = m.Nak()
			return
		}
		_ = m.Ack()
	})
}

func consumeDedup(b *testing.B, js jetstream.JetStream, cons jetstream.Consumer, count int, handle func(Order)) {
	var handled atomic.Int64
	done := make(chan struct{})
	rcv := benchReceiver(b, count, func(o Order) {
		handle(o)
		if handled.Add(1) == int64(count) {
			close(done)
		}
	})
	c, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{Concurrency: benchConcurrency, DropPoison: true})
	require.NoError(b, err)
	require.NoError(b, c.Start(context.Background()))
	<-done
	// Stop drains: it returns once every worker has settled its message.
	if err := c.Stop(context.Background()); err != nil && !errors.Is(err, context.Canceled) {
		b.Fatal(err)
	}
}
