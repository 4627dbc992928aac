package redrive_test

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	dedupamqp "github.com/dedup-go/dedup/adapters/rabbitmq"
	"github.com/dedup-go/dedup/cmd/dedupctl/internal/redrive"
	"github.com/dedup-go/dedup/delivery"
)

// TestRabbitMQCrashHalfway: 1,000 orders dead-lettered by the adapter; the
// tool is SIGKILLed after 500 republished (its held letters go back to the
// queue with its connection), the fixed consumer handles what went out,
// and a second run redrives the rest: every order has its effect exactly
// once and the dead-letter queue is empty.
func TestRabbitMQCrashHalfway(t *testing.T) {
	t.Parallel()
	const n = 1000
	e := newRabbitEnv(t)
	ids := orderIDs(n)
	e.deadLetter(t, orders(ids...), false)

	first := crashRun(t, n/2, e.args()...)
	eff := newEffects()
	fixed := e.consumer(t, fixedReceiver(t, e.st, e.ns, eff), false, false)
	stop := fixed()
	// The tool may have republished a letter or two past the last one it
	// reported before the kill: those are handled, not back in the queue.
	eventually(t, 30*time.Second, "the dead letters to come back after the kill", func() bool {
		return e.depth(t, e.top.DeadLetterQueue)+len(eff.snapshot()) >= n
	})

	second := runTool(t, nil, e.args()...)
	require.Equal(t, 0, second.code, "stderr: %s", second.stderr)
	e.drained(t, stop, fixed)
	requireExactlyOnce(t, eff, ids)
	require.Zero(t, e.depth(t, e.top.DeadLetterQueue), "dead letters left")
	t.Logf("first run: %d redriven before the kill; second run: %v", len(first), second.summary.Actions)
}

// TestRabbitMQCrashAfterConfirm: a run that stops after a copy was
// confirmed and before its letter was acknowledged leaves the letter; the
// next run republishes it again (the copy was not handled yet), and the
// receiver's record answers the second copy.
func TestRabbitMQCrashAfterConfirm(t *testing.T) {
	t.Parallel()
	e := newRabbitEnv(t)
	e.deadLetter(t, orders("a"), false)
	src, err := redrive.NewRabbitMQ(t.Context(), redrive.RabbitMQConfig{URL: e.url, Queue: e.top.DeadLetterQueue, Timeout: 5 * time.Second})
	require.NoError(t, err)
	crashAfterConfirm(t, src, e.st)
	eventually(t, 10*time.Second, "the letter back in its queue", func() bool { return e.depth(t, e.top.DeadLetterQueue) == 1 })
	require.Equal(t, 1, e.depth(t, e.top.Queue), "the copy")

	res := runTool(t, nil, e.args()...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	require.Equal(t, "republished", res.rows[0].Action)
	require.Equal(t, 2, e.depth(t, e.top.Queue), "a second copy")
	eff := newEffects()
	fixed := e.consumer(t, fixedReceiver(t, e.st, e.ns, eff), false, false)
	e.drained(t, fixed(), fixed)
	requireExactlyOnce(t, eff, []string{"a"})
	require.Zero(t, e.depth(t, e.top.DeadLetterQueue))
}

// TestRabbitMQCopy: the copy goes to the original queue with the original
// body, properties and headers, without the Dedup-* headers but for the
// two that say where the producer published it.
func TestRabbitMQCopy(t *testing.T) {
	t.Parallel()
	e := newRabbitEnv(t)
	e.deadLetter(t, orders("a"), false)

	res := runTool(t, nil, e.args()...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	require.Equal(t, "republished", res.rows[0].Action)
	require.Equal(t, "orders:a", res.rows[0].Key)
	require.Equal(t, "queue "+e.top.Queue, res.rows[0].To)
	copies := e.getAll(t, e.top.Queue)
	require.Len(t, copies, 1)
	c := copies[0]
	require.JSONEq(t, `{"id":"a","cents":100}`, string(c.Body))
	require.Equal(t, "m-a", c.MessageId)
	require.Equal(t, "application/json", c.ContentType)
	require.Equal(t, amqp.Persistent, c.DeliveryMode)
	require.Equal(t, amqp.Table{
		"Tenant": "acme", dedupamqp.HeaderOriginalExchange: "", dedupamqp.HeaderOriginalRoutingKey: e.top.Queue,
	}, c.Headers)
	require.Zero(t, e.depth(t, e.top.DeadLetterQueue))
}

// poisonRabbitMQ dead-letters, through the adapter, a body without an id
// (no-key), one that is not JSON (undecodable) and an order whose id was
// first used with other data (key-reused), and puts a message without any
// dead-letter header in the dead-letter queue.
func poisonRabbitMQ(t *testing.T, e *rabbitEnv) {
	t.Helper()
	eff := newEffects()
	e.publishOrders(t, []Order{{ID: "reused", Cents: 1}})
	fixed := e.consumer(t, fixedReceiver(t, e.st, e.ns, eff), false, true)
	e.drained(t, fixed(), fixed)
	e.publish(t, e.top.Queue, []amqp.Publishing{
		{Body: []byte(`{"cents": 5}`)},
		{Body: []byte("not json")},
		{Body: orderJSON(t, Order{ID: "reused", Cents: 2})},
	})
	broken := e.consumer(t, brokenReceiver(t, e.st, e.ns), false, true)
	stop := broken()
	e.waitDLQ(t, 3)
	e.drained(t, stop, broken)
	e.publish(t, e.top.DeadLetterQueue, []amqp.Publishing{{Body: []byte(`{"id":"plain"}`), Headers: amqp.Table{"Source": "a producer"}}})
}

// TestRabbitMQSkips: the letters a copy would meet again and one without
// dead-letter headers are skipped with their reason, read once each
// (their being held keeps the pass from meeting them again), and left in
// the queue; --force republishes the first three, never the last.
func TestRabbitMQSkips(t *testing.T) {
	t.Parallel()
	e := newRabbitEnv(t)
	poisonRabbitMQ(t, e)

	res := runTool(t, nil, e.args()...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	whys := map[string]int{}
	for _, r := range res.rows {
		require.Equal(t, "skipped", r.Action, "row %+v", r)
		whys[r.Why]++
	}
	require.Equal(t, map[string]int{"no-key": 1, "undecodable": 1, "key-reused": 1, "no-dedup-headers": 1}, whys)
	require.Equal(t, 4, res.summary.Read, "one pass")
	eventually(t, 10*time.Second, "the letters back in their queue", func() bool { return e.depth(t, e.top.DeadLetterQueue) == 4 })
	require.Zero(t, e.depth(t, e.top.Queue), "nothing republished")

	res = runTool(t, nil, e.args("--force")...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	require.Equal(t, map[string]int{"republished": 3, "skipped": 1}, res.actions())
	require.Equal(t, 3, e.depth(t, e.top.Queue))
	eventually(t, 10*time.Second, "the unmarked letter back in its queue", func() bool { return e.depth(t, e.top.DeadLetterQueue) == 1 })
}

// TestRabbitMQDryRun: a dry run reads each letter once (one pass: held,
// never met again) and changes nothing.
func TestRabbitMQDryRun(t *testing.T) {
	t.Parallel()
	e := newRabbitEnv(t)
	e.deadLetter(t, orders("a", "b", "c"), false)
	completeRecord(t, e.st, "orders:b")

	res := runTool(t, nil, e.args("--dry-run")...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	require.Len(t, res.rows, 3, "each letter once")
	rows := res.byKey()
	require.Equal(t, "would-republish", rows["orders:a"].Action)
	require.Equal(t, "would-remove-completed", rows["orders:b"].Action)
	require.Equal(t, "would-republish", rows["orders:c"].Action)
	eventually(t, 10*time.Second, "the letters back in their queue", func() bool { return e.depth(t, e.top.DeadLetterQueue) == 3 })
	require.Zero(t, e.depth(t, e.top.Queue))
	rec, found := e.st.record(t, "orders:a")
	require.True(t, found)
	require.Equal(t, "failed", rec.State.String())
}

// TestRabbitMQRecordDecides: completed → removed without a copy; held
// under a live lease → left; failed → forgotten and republished.
func TestRabbitMQRecordDecides(t *testing.T) {
	t.Parallel()
	e := newRabbitEnv(t)
	e.deadLetter(t, orders("done", "held", "failed"), false)
	completeRecord(t, e.st, "orders:done")
	holdRecord(t, e.st, "orders:held")

	res := runTool(t, nil, e.args()...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	rows := res.byKey()
	require.Equal(t, "removed-completed", rows["orders:done"].Action)
	require.Equal(t, "in-flight", rows["orders:held"].Why)
	require.Equal(t, "republished", rows["orders:failed"].Action)
	require.Equal(t, 1, e.depth(t, e.top.Queue), "only the failed one republished")
	eventually(t, 10*time.Second, "the held one's letter back", func() bool { return e.depth(t, e.top.DeadLetterQueue) == 1 })
}

// TestRabbitMQCopyRefused: a copy the broker returns (its queue was
// deleted: unroutable, mandatory) leaves the letter and exits 1.
func TestRabbitMQCopyRefused(t *testing.T) {
	t.Parallel()
	e := newRabbitEnv(t)
	e.deadLetter(t, orders("a"), false)
	_, err := e.channel(t).QueueDelete(e.top.Queue, false, false, false)
	require.NoError(t, err)

	res := runTool(t, nil, e.args()...)
	require.Equal(t, 1, res.code, "stderr: %s", res.stderr)
	require.Len(t, res.rows, 1, "stdout: %s\nstderr: %s", res.stdout, res.stderr)
	require.Equal(t, "failed", res.rows[0].Action)
	require.Contains(t, res.rows[0].Detail, "NO_ROUTE")
	eventually(t, 10*time.Second, "the letter back", func() bool { return e.depth(t, e.top.DeadLetterQueue) == 1 })
}

// TestRabbitMQBrokerLetters: letters of the broker's own dead-lettering
// (DropPoison: x-death only) go back to the queue x-death names;
// with --key-from their records are forgotten, so the copies (their
// records at MaxAttempts) run once each; without, a dry run says their
// records are not read.
func TestRabbitMQBrokerLetters(t *testing.T) {
	t.Parallel()
	e := newRabbitEnv(t)
	e.deadLetter(t, orders("a", "b"), true)

	res := runTool(t, nil, e.args("--dry-run")...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	require.Len(t, res.rows, 2)
	for _, r := range res.rows {
		require.Equal(t, "would-republish", r.Action)
		require.Equal(t, "rejected", r.Reason)
		require.Equal(t, "queue "+e.top.Queue, r.To)
		require.Empty(t, r.Key)
		require.Contains(t, r.Detail, "--key-from")
		require.False(t, r.Time.IsZero(), "x-death's time")
	}

	res = runTool(t, nil, e.args("--key-from", "json:id", "--namespace", e.ns, "--since", "1h")...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	require.Equal(t, map[string]int{"republished": 2}, res.actions())
	require.Equal(t, "orders:a", res.byKey()["orders:a"].Key)
	copies := e.getAll(t, e.top.Queue)
	require.Len(t, copies, 2)
	for _, c := range copies {
		require.NotContains(t, c.Headers, "x-death")
		require.Equal(t, "", c.Headers[dedupamqp.HeaderOriginalExchange], "the default exchange, from x-death")
		require.Equal(t, e.top.Queue, c.Headers[dedupamqp.HeaderOriginalRoutingKey])
	}
	e.publish(t, e.top.Queue, publishings(copies))
	eff := newEffects()
	fixed := e.consumer(t, fixedReceiver(t, e.st, e.ns, eff), true, false)
	e.drained(t, fixed(), fixed)
	requireExactlyOnce(t, eff, []string{"a", "b"})
	require.Zero(t, e.depth(t, e.top.DeadLetterQueue))
}

// publishings turns deliveries back into publishings.
func publishings(ds []amqp.Delivery) []amqp.Publishing {
	out := make([]amqp.Publishing, len(ds))
	for i, d := range ds {
		out[i] = amqp.Publishing{Headers: d.Headers, Body: d.Body, MessageId: d.MessageId, ContentType: d.ContentType, DeliveryMode: d.DeliveryMode}
	}
	return out
}

// TestRabbitMQFormerHeaders: letters as dedupamqp 0.1 wrote them, naming
// their queue in Dedup-Queue (now Dedup-Source), are redriven to that
// queue, --since reading their Dedup-Dead-Lettered-At, and processed once.
func TestRabbitMQFormerHeaders(t *testing.T) {
	t.Parallel()
	e := newRabbitEnv(t)
	ids := []string{"a", "b"}
	e.deadLetter(t, orders(ids...), false)
	// The same letters, their records as the adapter left them, under the
	// names of 0.1.
	letters := e.getAll(t, e.top.DeadLetterQueue)
	require.Len(t, letters, len(ids))
	for i, d := range letters {
		h := amqp.Table{}
		for k, v := range d.Headers {
			if k != delivery.HeaderSource {
				h[k] = v
			}
		}
		require.Equal(t, e.top.Queue, d.Headers[delivery.HeaderSource])
		h["Dedup-Queue"] = e.top.Queue
		letters[i].Headers = h
	}
	e.publish(t, e.top.DeadLetterQueue, publishings(letters))

	res := runTool(t, nil, e.args("--since", "1h")...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	require.Len(t, res.rows, len(ids), "rows: %+v", res.rows)
	for _, r := range res.rows {
		require.Equal(t, "republished", r.Action, "row %+v", r)
		require.Equal(t, "queue "+e.top.Queue, r.To)
		require.Equal(t, "attempts-exhausted", r.Reason)
		require.False(t, r.Time.IsZero(), "Dedup-Dead-Lettered-At")
	}
	require.Equal(t, "orders:a", res.byKey()["orders:a"].Key)
	require.Zero(t, e.depth(t, e.top.DeadLetterQueue))
	eff := newEffects()
	fixed := e.consumer(t, fixedReceiver(t, e.st, e.ns, eff), false, false)
	e.drained(t, fixed(), fixed)
	requireExactlyOnce(t, eff, ids)
}

// TestRabbitMQSince: --since reads the time the adapter wrote on its
// letters (Dedup-Dead-Lettered-At): the letters made before it stay.
func TestRabbitMQSince(t *testing.T) {
	t.Parallel()
	e := newRabbitEnv(t)
	e.deadLetter(t, orders("a", "b"), false)
	// The header has milliseconds: mid is after every millisecond a and b
	// were dead-lettered in, and c is dead-lettered after mid.
	mid := time.Now().Truncate(time.Millisecond).Add(time.Millisecond)
	for !time.Now().After(mid) {
		time.Sleep(time.Millisecond)
	}
	e.deadLetter(t, orders("c"), false)

	res := runTool(t, nil, e.args("--since", mid.UTC().Format(time.RFC3339Nano))...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	require.Len(t, res.rows, 1, "rows: %+v", res.rows)
	require.Equal(t, "orders:c", res.rows[0].Key)
	require.Equal(t, "republished", res.rows[0].Action)
	eventually(t, 10*time.Second, "a and b back in their queue", func() bool { return e.depth(t, e.top.DeadLetterQueue) == 2 })
}
