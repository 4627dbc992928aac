package redrive_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedup-go/dedup"
	dedupfranz "github.com/dedup-go/dedup/adapters/franz"
	dedupkafka "github.com/dedup-go/dedup/adapters/kafka"
	"github.com/dedup-go/dedup/cmd/dedupctl/internal/redrive"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/testenv"
)

// TestFranzDeadLetters: the dead letters dedupfranz's Consumer writes (one
// order whose handler failed its one attempt, one whose handler returned
// dedup.Permanent) carry the headers dedupkafka's do; the tool redrives
// them to their topic and partition with the original's key, value and
// headers (its Message-Id back, no Dedup-*), a dedupfranz Consumer with
// the fixed handler then handles each once, and a second run under
// another group of the tool finds their records completed and republishes
// nothing.
func TestFranzDeadLetters(t *testing.T) {
	t.Parallel()
	e := newKafkaEnv(t, 2)
	ids := []string{"a", "b"}
	e.produce(t, orders(ids...))
	stop := e.franzConsume(t, poisonReceiver(t, e.st, e.ns))
	e.waitDLQ(t, 2)
	e.drained(t, stop)

	letters := e.readAll(t, e.dlq, e.dlqParts)
	require.Len(t, letters, 2)
	orig := map[string]kafka.Message{}
	for _, m := range e.readAll(t, e.topic, 3) {
		orig[string(m.Key)] = m
	}
	reasons := map[string]string{}
	for _, l := range letters {
		id := string(l.Key)
		h := dedupkafka.Header(l.Headers)
		get := func(name string) string {
			v, ok := h.Get(name)
			require.True(t, ok, "letter of %s: no %s header; headers %v", id, name, l.Headers)
			return v
		}
		reasons[id] = get(delivery.HeaderReason)
		require.Equal(t, e.topic, get(delivery.HeaderSource), id)
		require.Equal(t, e.topic, get(delivery.HeaderStream), id)
		require.Equal(t, strconv.Itoa(orig[id].Partition), get(delivery.HeaderPartition), id)
		require.Equal(t, strconv.FormatInt(orig[id].Offset, 10), get(delivery.HeaderOffset), id)
		require.Equal(t, e.group, get(delivery.HeaderConsumerGroup), id)
		require.Equal(t, "orders:"+id, get(delivery.HeaderKey), id)
		require.Equal(t, "m-"+id, get(delivery.HeaderOriginalMessageID), id)
		require.Equal(t, "acme", get("Tenant"), id)
		require.JSONEq(t, string(orig[id].Value), string(l.Value), id)
	}
	require.Equal(t, map[string]string{"a": "attempts-exhausted", "b": "permanent-error"}, reasons)

	res := runTool(t, nil, e.args()...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	require.Equal(t, map[string]int{"republished": 2}, res.actions(), "stdout: %s", res.stdout)
	for _, r := range res.rows {
		id := r.Key[len("orders:"):]
		require.Equal(t, "m-"+id, r.MessageID)
		require.Equal(t, reasons[id], r.Reason)
		require.Equal(t, "topic orders partition "+strconv.Itoa(orig[id].Partition), r.To)
	}
	require.Zero(t, e.letters(t), "the tool's group passed every letter")

	copies := map[string]kafka.Message{}
	for _, m := range e.readAll(t, e.topic, 3) {
		if m.Offset > orig[string(m.Key)].Offset {
			copies[string(m.Key)] = m
		}
	}
	require.Len(t, copies, 2)
	for id, c := range copies {
		require.Equal(t, orig[id].Partition, c.Partition, "the original's partition")
		require.Equal(t, orig[id].Value, c.Value)
		require.Equal(t, []kafka.Header{{Key: dedupkafka.HeaderMessageID, Value: []byte("m-" + id)}, {Key: "Tenant", Value: []byte("acme")}}, c.Headers,
			"the original's headers: its Message-Id back, no Dedup-*")
	}

	eff := newEffects()
	e.drained(t, e.franzConsume(t, fixedReceiver(t, e.st, e.ns, eff)))
	requireExactlyOnce(t, eff, ids)

	res = runTool(t, nil, e.args("--group", "dedupctl-again")...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	require.Equal(t, map[string]int{"removed-completed": 2}, res.actions(), "stdout: %s", res.stdout)
	require.EqualValues(t, 4, e.written(t, e.topic, 3), "nothing republished again")
}

// TestFranzRedrivenTwice: a run that stops after a copy was acknowledged
// and before the tool's group passed its letter (a crash), then a run
// that republishes it again: two copies of dedupfranz's dead letter reach
// a dedupfranz Consumer, keyed on the record's id: one is processed, the
// other answered as its duplicate.
func TestFranzRedrivenTwice(t *testing.T) {
	t.Parallel()
	e := newKafkaEnv(t, 2)
	e.produce(t, orders("a"))
	e.drained(t, func() func() {
		stop := e.franzConsume(t, poisonReceiver(t, e.st, e.ns))
		e.waitDLQ(t, 1)
		return stop
	}())
	src, err := redrive.NewKafka(t.Context(), redrive.KafkaConfig{Brokers: e.brokers, Topic: e.dlq, Group: toolGroup, Timeout: 5 * time.Second})
	require.NoError(t, err)
	crashAfterConfirm(t, src, e.st)
	require.EqualValues(t, 1, e.letters(t), "the letter not passed")

	res := runTool(t, nil, e.args()...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	require.Equal(t, map[string]int{"republished": 1}, res.actions())
	require.EqualValues(t, 3, e.written(t, e.topic, 3), "the original and two copies")
	require.Zero(t, e.letters(t))

	eff := newEffects()
	var mu sync.Mutex
	settled := map[delivery.Reason]int{}
	cfg := receiverConfig(e.ns)
	cfg.Observer = delivery.ObserverFunc(func(_ context.Context, ev delivery.Event) {
		if !ev.Settled {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		settled[ev.Decision.Reason]++
	})
	rcv, err := dedup.NewReceiver(e.st, orderKey, func(_ context.Context, m *dedup.Message[Order]) (string, error) {
		eff.add(m.Body.ID)
		return "charged " + m.Body.ID, nil
	}, cfg)
	require.NoError(t, err)
	e.drained(t, e.franzConsume(t, rcv))
	requireExactlyOnce(t, eff, []string{"a"})
	mu.Lock()
	defer mu.Unlock()
	// The original was committed past when it was dead-lettered: the two
	// copies are what the group reads.
	require.Equal(t, map[delivery.Reason]int{"processed": 1, "duplicate": 1}, settled)
}

// franzConsume runs rcv over the orders topic in the workers' group with
// a dedupfranz Consumer until the returned stop is called (or the test
// ends).
func (e *kafkaEnv) franzConsume(t testing.TB, rcv *dedup.Receiver[*dedup.Message[Order], string]) (stop func()) {
	t.Helper()
	c, err := dedupfranz.NewConsumer([]kgo.Opt{
		kgo.SeedBrokers(e.brokers...),
		kgo.SessionTimeout(time.Second), kgo.HeartbeatInterval(100 * time.Millisecond), kgo.RebalanceTimeout(5 * time.Second),
		kgo.FetchMaxWait(50 * time.Millisecond), kgo.MetadataMinAge(50 * time.Millisecond),
	}, e.group, []string{e.topic}, rcv, &dedupfranz.Options{
		DeadLetterTopic: e.dlq, Concurrency: 3, CommitInterval: dedupfranz.CommitEveryOutcome,
	})
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		ctx, cancel := context.WithTimeout(context.Background(), testenv.WaitTimeout)
		defer cancel()
		require.NoError(t, c.Stop(ctx))
	}
	t.Cleanup(stop)
	return stop
}

// poisonReceiver fails order "b" for good (dedup.Permanent) and every
// other order with errBug (one attempt: attempts exhausted): the adapter
// dead-letters them all.
func poisonReceiver(t testing.TB, st recordStore, ns string) *dedup.Receiver[*dedup.Message[Order], string] {
	t.Helper()
	rcv, err := dedup.NewReceiver(st, orderKey, func(_ context.Context, m *dedup.Message[Order]) (string, error) {
		if m.Body.ID == "b" {
			return "", dedup.Permanent(errors.New("order b cannot be charged"))
		}
		return "", errBug
	}, receiverConfig(ns))
	require.NoError(t, err)
	return rcv
}
