package redrive_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupkafka "github.com/dedup-go/dedup/adapters/kafka"
	"github.com/dedup-go/dedup/cmd/dedupctl/internal/redrive"
	"github.com/dedup-go/dedup/delivery"
)

// TestKafkaCrashHalfway: 1,000 orders dead-lettered by the adapter; the
// tool is SIGKILLed after 500 republished, the fixed consumer handles what
// went out, and a second run redrives the rest: every order has its effect
// exactly once and the tool's group has passed every letter.
func TestKafkaCrashHalfway(t *testing.T) {
	t.Parallel()
	const n = 1000
	e := newKafkaEnv(t, 2)
	ids := orderIDs(n)
	e.deadLetter(t, orders(ids...))

	first := crashRun(t, n/2, e.args()...)
	eff := newEffects()
	stop := e.consume(t, fixedReceiver(t, e.st, e.ns, eff), false)
	eventually(t, 30*time.Second, "the first run's copies handled", func() bool { return e.lag(t, e.group, e.topic, 3) == 0 })

	second := runTool(t, nil, e.args()...)
	require.Equal(t, 0, second.code, "stderr: %s", second.stderr)
	e.drained(t, stop)
	requireExactlyOnce(t, eff, ids)
	require.Zero(t, e.letters(t), "dead letters left")
	t.Logf("first run: %d redriven before the kill; second run: %v", len(first), second.summary.Actions)
}

// TestKafkaCrashAfterConfirm: a run that stops after a copy was
// acknowledged and before the group's offset passed its letter; the next
// run republishes it again (the copy was not handled yet), and the
// receiver's record answers the second copy.
func TestKafkaCrashAfterConfirm(t *testing.T) {
	t.Parallel()
	e := newKafkaEnv(t, 2)
	e.deadLetter(t, orders("a"))
	src, err := redrive.NewKafka(t.Context(), redrive.KafkaConfig{Brokers: e.brokers, Topic: e.dlq, Group: toolGroup, Timeout: 5 * time.Second})
	require.NoError(t, err)
	crashAfterConfirm(t, src, e.st)
	require.EqualValues(t, 1, e.letters(t), "the letter not passed")
	require.EqualValues(t, 2, e.written(t, e.topic, 3), "the original and the copy")

	res := runTool(t, nil, e.args()...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	require.Equal(t, "republished", res.rows[0].Action)
	require.EqualValues(t, 3, e.written(t, e.topic, 3), "a second copy")
	eff := newEffects()
	e.drained(t, e.consume(t, fixedReceiver(t, e.st, e.ns, eff), false))
	requireExactlyOnce(t, eff, []string{"a"})
	require.Zero(t, e.letters(t))
}

// TestKafkaCopy: the copy goes to the original topic and partition with
// the original key, value and headers, its Message-Id back, and none of
// the Dedup-* headers.
func TestKafkaCopy(t *testing.T) {
	t.Parallel()
	e := newKafkaEnv(t, 2)
	e.deadLetter(t, orders("a"))
	orig := e.readAll(t, e.topic, 3)
	require.Len(t, orig, 1)

	res := runTool(t, nil, e.args()...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	require.Equal(t, "republished", res.rows[0].Action)
	require.Equal(t, "topic orders partition "+strconv.Itoa(orig[0].Partition), res.rows[0].To)
	all := e.readAll(t, e.topic, 3)
	require.Len(t, all, 2)
	var c kafka.Message
	for _, m := range all {
		if m.Offset == 1 {
			c = m
		}
	}
	require.Equal(t, orig[0].Partition, c.Partition, "the original's partition")
	require.Equal(t, "a", string(c.Key))
	require.JSONEq(t, `{"id":"a","cents":100}`, string(c.Value))
	require.Equal(t, []kafka.Header{{Key: dedupkafka.HeaderMessageID, Value: []byte("m-a")}, {Key: "Tenant", Value: []byte("acme")}}, c.Headers)
	require.Zero(t, e.letters(t))
}

// TestKafkaSkipsHoldTheOffset: skipped letters stay unpassed: the group's
// offset stops at the first one of a partition, and the letters after it
// that were redriven are read again by the next run, which passes them
// as completed once their copies were handled; --force then redrives the
// skipped ones and the group passes everything.
func TestKafkaSkipsHoldTheOffset(t *testing.T) {
	t.Parallel()
	// One partition of dead letters for the whole story: a no-key letter
	// first, then two orders.
	e := newKafkaEnv(t, 1)
	eff := newEffects()
	e.produceMessages(t, []kafka.Message{{Topic: e.topic, Key: []byte("k"), Value: []byte(`{"cents": 1}`)}})
	stop := e.consume(t, brokenReceiver(t, e.st, e.ns), false)
	e.waitDLQ(t, 1)
	e.drained(t, stop)
	e.deadLetter(t, orders("a", "b"))

	res := runTool(t, nil, e.args()...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	require.Equal(t, map[string]int{"skipped": 1, "republished": 2}, res.actions())
	require.Equal(t, "no-key", res.rows[0].Why)
	e.drained(t, e.consume(t, fixedReceiver(t, e.st, e.ns, eff), false))
	requireExactlyOnce(t, eff, []string{"a", "b"})
	require.Positive(t, e.letters(t), "the skipped letter holds its partition")

	res = runTool(t, nil, e.args()...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	got := res.actions()
	require.Equal(t, 1, got["skipped"])
	require.Zero(t, got["republished"], "nothing republished twice")

	res = runTool(t, nil, e.args("--force")...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	require.Equal(t, 1, res.actions()["republished"], "the no-key letter, forced")
	require.Zero(t, e.letters(t), "the group passed every letter")
}

// TestKafkaDryRun: a dry run commits nothing, forgets nothing, writes
// nothing; with filters.
func TestKafkaDryRun(t *testing.T) {
	t.Parallel()
	e := newKafkaEnv(t, 2)
	e.deadLetter(t, orders("a", "b", "c"))
	completeRecord(t, e.st, "orders:b")

	res := runTool(t, nil, e.args("--dry-run")...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	rows := res.byKey()
	require.Len(t, rows, 3)
	require.Equal(t, "would-republish", rows["orders:a"].Action)
	require.Equal(t, "would-remove-completed", rows["orders:b"].Action)
	require.EqualValues(t, 3, e.letters(t))
	require.EqualValues(t, 3, e.written(t, e.topic, 3))
	rec, found := e.st.record(t, "orders:a")
	require.True(t, found)
	require.Equal(t, "failed", rec.State.String())

	res = runTool(t, nil, e.args("--dry-run", "--since", rows["orders:c"].Time.Format(time.RFC3339Nano), "--reason", "attempts-exhausted")...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	require.NotEmpty(t, res.rows)
	for _, r := range res.rows {
		require.False(t, r.Time.Before(rows["orders:c"].Time))
	}
	res = runTool(t, nil, e.args("--reason", "no-key")...)
	require.Equal(t, 3, res.code, "nothing matches: stderr %s", res.stderr)
	require.EqualValues(t, 3, e.letters(t), "filtered out: not passed")
}

// TestKafkaCopyRefused: a destination topic that does not exist refuses
// the copy: the letter stays and the run exits 1.
func TestKafkaCopyRefused(t *testing.T) {
	t.Parallel()
	e := newKafkaEnv(t, 2)
	e.produceMessages(t, []kafka.Message{{Topic: e.dlq, Value: orderJSON(t, Order{ID: "a"}), Headers: []kafka.Header{
		{Key: delivery.HeaderReason, Value: []byte("permanent-error")},
		{Key: delivery.HeaderSource, Value: []byte("no-such-topic")},
		{Key: delivery.HeaderStream, Value: []byte("no-such-topic")},
		{Key: delivery.HeaderPartition, Value: []byte("0")},
		{Key: delivery.HeaderKey, Value: []byte("orders:a")},
	}}})

	res := runTool(t, nil, e.args()...)
	require.Equal(t, 1, res.code, "stderr: %s", res.stderr)
	require.Len(t, res.rows, 1, "stdout: %s\nstderr: %s", res.stdout, res.stderr)
	require.Equal(t, "failed", res.rows[0].Action)
	require.Contains(t, res.rows[0].Detail, "no-such-topic")
	require.EqualValues(t, 1, e.letters(t))
}

// TestKafkaLettersOf01: dead letters a Consumer of 0.1 wrote, with the
// header names of 0.1 (Dedup-Topic for the original's topic, Dedup-Group,
// Dedup-Message-Id for the original's Message-Id), each written twice (its
// original's commit was lost), are redriven by this version: each copy
// goes to the topic and partition the letter names, with the original's
// Message-Id back and no Dedup-* header, and each order is processed once.
func TestKafkaLettersOf01(t *testing.T) {
	t.Parallel()
	e := newKafkaEnv(t, 2)
	ids := []string{"a", "b"}
	// The failed records 0.1's consumer left (one attempt: attempts
	// exhausted).
	broken := brokenReceiver(t, e.st, e.ns)
	for _, id := range ids {
		_, err := broken.Handle(t.Context(), &dedup.Message[Order]{Body: Order{ID: id, Cents: 100}})
		require.ErrorIs(t, err, errBug)
	}
	var letters []kafka.Message
	for i, id := range ids {
		partition, offset := strconv.Itoa(i+1), strconv.Itoa(10+i)
		letter := kafka.Message{Topic: e.dlq, Key: []byte(id), Value: orderJSON(t, Order{ID: id, Cents: 100}), Headers: []kafka.Header{
			{Key: "Dedup-Message-Id", Value: []byte("m-" + id)},
			{Key: "Tenant", Value: []byte("acme")},
			{Key: "Message-Id", Value: []byte("dedup-dlq:orders:" + partition + ":" + offset)},
			{Key: "Dedup-Reason", Value: []byte("attempts-exhausted")},
			{Key: "Dedup-Error", Value: []byte(errBug.Error())},
			{Key: "Dedup-Topic", Value: []byte(e.topic)},
			{Key: "Dedup-Partition", Value: []byte(partition)},
			{Key: "Dedup-Offset", Value: []byte(offset)},
			{Key: "Dedup-Group", Value: []byte(e.group)},
			{Key: "Dedup-Key", Value: []byte("orders:" + id)},
			{Key: "Dedup-Attempt", Value: []byte("1")},
			{Key: "Dedup-First-Failure", Value: []byte(time.Now().UTC().Format(time.RFC3339Nano))},
		}}
		letters = append(letters, letter, letter)
	}
	e.produceMessages(t, letters)

	res := runTool(t, nil, e.args()...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	require.Len(t, res.rows, 4, "stdout: %s\nstderr: %s", res.stdout, res.stderr)
	for _, r := range res.rows {
		require.Equal(t, "m-"+r.Key[len("orders:"):], r.MessageID, "the original's Message-Id, from Dedup-Message-Id")
		require.Equal(t, "attempts-exhausted", r.Reason)
	}
	require.Equal(t, "republished", res.byKey()["orders:a"].Action)
	require.Equal(t, "topic orders partition 1", res.rows[0].To)
	require.Zero(t, e.letters(t), "the group passed every letter")

	eff := newEffects()
	e.drained(t, e.consume(t, fixedReceiver(t, e.st, e.ns, eff), false))
	requireExactlyOnce(t, eff, ids)

	copies := e.readAll(t, e.topic, 3)
	require.NotEmpty(t, copies)
	for _, c := range copies {
		id := string(c.Key)
		require.Equal(t, map[string]int{"a": 1, "b": 2}[id], c.Partition, "the partition Dedup-Partition names")
		require.Equal(t, []kafka.Header{{Key: dedupkafka.HeaderMessageID, Value: []byte("m-" + id)}, {Key: "Tenant", Value: []byte("acme")}}, c.Headers,
			"the original's headers: its Message-Id back, no Dedup-*")
	}
}
