package e2e_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupnats "github.com/dedup-go/dedup/adapters/nats"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/adaptertest"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/outbox"
	"github.com/dedup-go/dedup/store/pgoutbox/internal/relaytest"
)

// TestEndToEnd is runE2E on JetStream: 2,000 orders and 400 copies, a
// dedupnats consumer, the relays publishing with dedupnats's
// OutboxPublisher (the id as Nats-Msg-Id), a downstream dedupnats
// consumer keyed on it (idstrategy.MessageID), 8 kills. The output
// stream's duplicate window is the shortest JetStream takes (100ms), so
// copies that the relays publish again reach the downstream consumer,
// whose dedup absorbs them.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("a slow fault test (the consumer, the relays and PostgreSQL killed and restarted, end to end on JetStream): skipped under -short")
	}
	t.Parallel()
	runE2E(t, &jsE2E{}, e2eParams{orders: 2000, duplicates: 400, customers: 100, kills: 8})
}

// e2eNames are the names of a JetStream end-to-end test.
type e2eNames struct {
	prefix                        string
	inStream, outStream, dlStream string
	in, out, dlq                  string
}

func newE2ENames(prefix string) e2eNames {
	return e2eNames{
		prefix:   prefix,
		inStream: "PGOUTBOX_E2E_IN_" + prefix, outStream: "PGOUTBOX_E2E_OUT_" + prefix, dlStream: "PGOUTBOX_E2E_DLQ_" + prefix,
		in: "pgoutbox.e2e." + prefix + ".in", out: "pgoutbox.e2e." + prefix + ".out", dlq: "pgoutbox.e2e." + prefix + ".dlq",
	}
}

// jsE2E is the e2eBroker of JetStream.
type jsE2E struct {
	addr string
	n    e2eNames
	js   jetstream.JetStream // of the test, or of a process once it consumes or publishes
	down jetstream.Consumer
}

func (b *jsE2E) child() (string, string, string) { return "jetstream", b.addr, b.n.prefix }

func (b *jsE2E) destination(event string) string { return b.n.out + "." + event }

func (b *jsE2E) setup(t *testing.T) {
	b.addr = testenv.NATS.Addr(t)
	b.n = newE2ENames(suffix())
	_, b.js = natsConn(t, b.addr)
	ctx := t.Context()
	for name, cfg := range map[string]jetstream.StreamConfig{
		b.n.inStream:  {Subjects: []string{b.n.in}, Storage: jetstream.MemoryStorage},
		b.n.outStream: {Subjects: []string{b.n.out + ".>"}, Storage: jetstream.MemoryStorage, Duplicates: 100 * time.Millisecond},
		b.n.dlStream:  {Subjects: []string{b.n.dlq}, Storage: jetstream.MemoryStorage},
	} {
		cfg.Name = name
		_, err := b.js.CreateStream(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = b.js.DeleteStream(context.Background(), name) })
	}
	_, err := b.js.CreateOrUpdateConsumer(ctx, b.n.inStream, jetstream.ConsumerConfig{Durable: e2eConsumer, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: 2 * time.Second, MaxDeliver: 100, MaxAckPending: 64})
	require.NoError(t, err)
}

func (b *jsE2E) publish(t *testing.T, orders [][]byte) {
	for _, o := range orders {
		_, err := b.js.PublishAsync(b.n.in, o)
		require.NoError(t, err)
	}
	select {
	case <-b.js.PublishAsyncComplete():
	case <-time.After(testenv.WaitTimeout):
		t.Fatal("the orders were not all published")
	}
}

func (b *jsE2E) downstreamKey() dedup.KeyFunc[*dedup.Message[e2eEvent]] {
	return idstrategy.MessageID[e2eEvent]()
}

func (b *jsE2E) startDownstream(t *testing.T, rcv *dedup.Receiver[*dedup.Message[e2eEvent], struct{}]) {
	ctx := t.Context()
	var err error
	b.down, err = b.js.CreateOrUpdateConsumer(ctx, b.n.outStream, jetstream.ConsumerConfig{Durable: "downstream", AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(t, err)
	dc, err := dedupnats.NewConsumer(b.js, b.down, rcv, &dedupnats.Options{DropPoison: true, Logger: relaytest.Quiet})
	require.NoError(t, err)
	require.NoError(t, dc.Start(context.WithoutCancel(ctx)))
	adaptertest.StopAtCleanup(t, dc)
}

func (b *jsE2E) pending(t *testing.T) (bool, string) {
	ctx := t.Context()
	in, err := b.js.Consumer(ctx, b.n.inStream, e2eConsumer)
	require.NoError(t, err)
	info, err := in.Info(ctx)
	require.NoError(t, err)
	dInfo, err := b.down.Info(ctx)
	require.NoError(t, err)
	return info.NumPending == 0 && info.NumAckPending == 0 && dInfo.NumPending == 0 && dInfo.NumAckPending == 0,
		fmt.Sprintf("%d incoming pending, %d unacked; %d downstream pending", info.NumPending, info.NumAckPending, dInfo.NumPending)
}

// idle: the consumers' pending counts include what is in flight.
func (b *jsE2E) idle(*testing.T) bool { return true }

func (b *jsE2E) deadLetters(t *testing.T) int {
	dl, err := b.js.Stream(t.Context(), b.n.dlStream)
	require.NoError(t, err)
	info, err := dl.Info(t.Context())
	require.NoError(t, err)
	return int(info.State.Msgs)
}

func (b *jsE2E) output(t *testing.T) []stored {
	return outStream{name: b.n.outStream, js: b.js}.read(t)
}

// The side of the processes.

func (b *jsE2E) connect() error {
	nc, err := natsgo.Connect(b.addr, natsgo.MaxReconnects(-1))
	if err != nil {
		return err
	}
	b.js, err = jetstream.New(nc)
	return err
}

func (b *jsE2E) consume(ctx context.Context, rcv *dedup.Receiver[*dedup.Message[e2eOrder], string]) error {
	if err := b.connect(); err != nil {
		return err
	}
	cons, err := b.js.Consumer(ctx, b.n.inStream, e2eConsumer)
	if err != nil {
		return err
	}
	c, err := dedupnats.NewConsumer(b.js, cons, rcv, &dedupnats.Options{DeadLetterSubject: b.n.dlq, Concurrency: 8, Logger: relaytest.Quiet})
	if err != nil {
		return err
	}
	return c.Start(ctx)
}

func (b *jsE2E) publisher(context.Context) (outbox.Publisher, error) {
	if err := b.connect(); err != nil {
		return nil, err
	}
	return dedupnats.NewOutboxPublisher(b.js, nil)
}
