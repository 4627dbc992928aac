package dedupnats

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/store/memstore"
)

// fakeMsg is a JetStream delivery without a server: its metadata is
// allocated per call, as nats.go's is, and its settlements only count.
type fakeMsg struct {
	data  []byte
	acked int
}

func (m *fakeMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{Stream: "ORDERS", Consumer: "worker", NumDelivered: 1, Sequence: jetstream.SequencePair{Stream: 1, Consumer: 1}}, nil
}
func (m *fakeMsg) Data() []byte                     { return m.data }
func (m *fakeMsg) Headers() natsgo.Header           { return nil }
func (m *fakeMsg) Subject() string                  { return "orders" }
func (m *fakeMsg) Reply() string                    { return "" }
func (m *fakeMsg) Ack() error                       { m.acked++; return nil }
func (m *fakeMsg) DoubleAck(context.Context) error  { m.acked++; return nil }
func (m *fakeMsg) Nak() error                       { return nil }
func (m *fakeMsg) NakWithDelay(time.Duration) error { return nil }
func (m *fakeMsg) InProgress() error                { return nil }
func (m *fakeMsg) Term() error                      { return nil }
func (m *fakeMsg) TermWithReason(string) error      { return nil }
func (m *fakeMsg) reset(data []byte) *fakeMsg       { m.data, m.acked = data, 0; return m }

var _ jetstream.Msg = (*fakeMsg)(nil)

type overheadOrder struct {
	ID    string `json:"id"`
	Cents int    `json:"cents"`
}

// BenchmarkHandleOverhead measures, without a server, what the Consumer
// adds per new message to the receiver it wraps, on defaultConcurrency
// goroutines as its workers: "receiver" decodes an envelope and calls
// Handle, the least any adapter does; "consumer" runs the Consumer's
// handling of one delivery (metadata, envelope, decode, Handle, Decide,
// Ack, the settled event). Both run on a cancellable context, as Start's
// is, over memstore with a new key per message, so the difference is the
// adapter's. cpu-ns/op is the process's CPU time (GC included) per
// message, steadier than ns/op on a shared machine.
func BenchmarkHandleOverhead(b *testing.B) {
	data := make([][]byte, 0, 1<<18)
	for i := range cap(data) {
		data = append(data, fmt.Appendf(nil, `{"id":"o-%09d","cents":%d}`, i, i))
	}
	var handled atomic.Int64
	newRcv := func(b *testing.B) *dedup.Receiver[*dedup.Message[overheadOrder], struct{}] {
		handled.Store(0)
		store, err := memstore.New(&memstore.Options{Capacity: 1 << 20})
		require.NoError(b, err)
		rcv, err := dedup.NewReceiver(store, idstrategy.BodyField("id", func(o overheadOrder) string { return o.ID }),
			func(context.Context, *dedup.Message[overheadOrder]) (struct{}, error) {
				handled.Add(1)
				return struct{}{}, nil
			}, nil)
		require.NoError(b, err)
		return rcv
	}
	// parallel runs each message on defaultConcurrency goroutines, a new
	// key each (the round count keeps keys new past len(data)), and checks
	// that every one was handled once and acknowledged once.
	parallel := func(b *testing.B, each func(ctx context.Context, m *fakeMsg)) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var next, acked atomic.Int64
		b.SetParallelism((defaultConcurrency + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
		b.ReportAllocs()
		b.ResetTimer()
		cpu := processCPU()
		b.RunParallel(func(pb *testing.PB) {
			var m fakeMsg
			for pb.Next() {
				i := next.Add(1) - 1
				d := data[i%int64(len(data))]
				if round := i / int64(len(data)); round > 0 {
					d = fmt.Appendf(nil, `{"id":"o-%09d-%d","cents":%d}`, i%int64(len(data)), round, i)
				}
				each(ctx, m.reset(d))
				acked.Add(int64(m.acked))
			}
		})
		b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
		require.Equal(b, int64(b.N), handled.Load(), "messages handled")
		require.Equal(b, int64(b.N), acked.Load(), "messages acknowledged")
	}
	b.Run("receiver", func(b *testing.B) {
		rcv := newRcv(b)
		parallel(b, func(ctx context.Context, msg *fakeMsg) {
			env := &dedup.Message[overheadOrder]{Data: msg.Data(), Native: msg}
			if adapter.DecodeBody(dedup.JSONDecoder{}, env) != nil {
				return // not acknowledged: the count fails
			}
			if res, err := rcv.Handle(ctx, env); err == nil && res.Status == delivery.StatusProcessed {
				_ = msg.Ack()
			}
		})
	})
	b.Run("consumer", func(b *testing.B) {
		rcv := adapter.Bind(newRcv(b))
		c := &Consumer[overheadOrder, struct{}]{rcv: rcv, opts: (&Options{DropPoison: true}).withDefaults(rcv.Logger()), maxDeliver: 5}
		parallel(b, func(ctx context.Context, msg *fakeMsg) { c.handle(ctx, msg) })
	})
}
