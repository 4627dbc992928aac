package redrive_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupredisstream "github.com/dedup-go/dedup/adapters/redisstream"
	"github.com/dedup-go/dedup/cmd/dedupctl/internal/redrive"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/store"
)

// redisStreamEnv is a stream, its dead-letter stream and a store, under
// prefixes of the test's own on the shared Redis. The receivers key on the
// entries' message id field (idstrategy.MessageID), so that a copy without
// it would not be deduplicated.
type redisStreamEnv struct {
	c           *redis.Client
	st          testStore
	ns          string
	stream, dlq string
	group       string
}

func newRedisStreamEnv(t testing.TB) *redisStreamEnv {
	t.Helper()
	c := redistest.Client(t)
	p := redistest.Prefix(t, c)
	return &redisStreamEnv{c: c, st: newStore(t), ns: "orders", stream: p + "orders", dlq: p + "orders.dlq", group: "billing"}
}

func (e *redisStreamEnv) args(extra ...string) []string {
	return append(append([]string{"redrive", "redisstream", "--stream", e.dlq}, e.st.flags...), extra...)
}

func (e *redisStreamEnv) produce(t testing.TB, os []Order) {
	t.Helper()
	p, err := dedupredisstream.NewProducer(e.c, e.stream, nil)
	require.NoError(t, err)
	for _, o := range os {
		_, _, err := p.Add(t.Context(), "m-"+o.ID, orderJSON(t, o), map[string]string{"tenant": "acme"})
		require.NoError(t, err)
	}
}

// receiver keys on the message id field.
func (e *redisStreamEnv) receiver(t testing.TB, h dedup.Handler[*dedup.Message[Order], string]) *dedup.Receiver[*dedup.Message[Order], string] {
	t.Helper()
	rcv, err := dedup.NewReceiver(e.st, idstrategy.MessageID[Order](), h, receiverConfig(e.ns))
	require.NoError(t, err)
	return rcv
}

func (e *redisStreamEnv) broken(t testing.TB) *dedup.Receiver[*dedup.Message[Order], string] {
	return e.receiver(t, func(context.Context, *dedup.Message[Order]) (string, error) { return "", errBug })
}

func (e *redisStreamEnv) fixed(t testing.TB, eff *effects) *dedup.Receiver[*dedup.Message[Order], string] {
	return e.receiver(t, func(ctx context.Context, m *dedup.Message[Order]) (string, error) {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		eff.add(m.Body.ID)
		return "charged " + m.Body.ID, nil
	})
}

// consume runs a dedupredisstream Consumer with rcv until every entry of
// the stream was settled (the group's lag 0, nothing pending), and stops
// it.
func (e *redisStreamEnv) consume(t testing.TB, rcv *dedup.Receiver[*dedup.Message[Order], string]) {
	t.Helper()
	k, err := dedupredisstream.NewConsumer(e.c, e.stream, e.group, rcv, &dedupredisstream.Options{
		Consumer: "c", CreateGroup: true, DeadLetterStream: e.dlq, Block: 50 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, k.Start(context.Background()))
	eventually(t, 30*time.Second, "the stream consumed", func() bool {
		groups, err := e.c.XInfoGroups(t.Context(), e.stream).Result()
		if err != nil || len(groups) != 1 {
			return false
		}
		return groups[0].Lag == 0 && groups[0].Pending == 0
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, k.Stop(ctx))
}

// deadLetter adds the orders and has a broken consumer dead-letter them
// (attempts exhausted, their records failed).
func (e *redisStreamEnv) deadLetter(t testing.TB, os []Order) {
	t.Helper()
	before := e.letters(t)
	e.produce(t, os)
	e.consume(t, e.broken(t))
	require.EqualValues(t, before+int64(len(os)), e.letters(t), "dead letters")
}

func (e *redisStreamEnv) letters(t testing.TB) int64 {
	t.Helper()
	n, err := e.c.XLen(t.Context(), e.dlq).Result()
	require.NoError(t, err)
	return n
}

func (e *redisStreamEnv) entries(t testing.TB, stream string) []redis.XMessage {
	t.Helper()
	msgs, err := e.c.XRange(t.Context(), stream, "-", "+").Result()
	require.NoError(t, err)
	return msgs
}

// TestRedisStreamRedrive: orders dead-lettered by a real Consumer (one of
// them dead-lettered twice, as a crash between the dead letter's XADD and
// the original's XACK leaves it) are added back to their stream with their
// fields and message id, without Dedup-* fields; the letters are deleted;
// the fixed Consumer handles each order once; a second run finds nothing.
func TestRedisStreamRedrive(t *testing.T) {
	t.Parallel()
	e := newRedisStreamEnv(t)
	ids := orderIDs(20)
	e.deadLetter(t, orders(ids...))
	first := e.entries(t, e.dlq)[0]
	require.NoError(t, e.c.XAdd(t.Context(), &redis.XAddArgs{Stream: e.dlq, Values: first.Values}).Err())
	originals := len(e.entries(t, e.stream))

	res := runTool(t, nil, e.args()...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	require.Equal(t, map[string]int{"republished": 21}, res.actions(), "stdout: %s", res.stdout)
	r := res.byKey()["orders:m-"+ids[3]]
	require.Equal(t, "stream "+e.stream, r.To)
	require.Equal(t, "m-"+ids[3], r.MessageID)
	require.Equal(t, "attempts-exhausted", r.Reason)
	require.WithinDuration(t, time.Now(), r.Time, time.Minute, "the time of Dedup-Dead-Lettered-At")
	require.Zero(t, e.letters(t), "letters left")

	all := e.entries(t, e.stream)
	require.Len(t, all, originals+21)
	for _, c := range all[originals:] {
		require.Len(t, c.Values, 3, "%v", c.Values)
		id := strings.TrimPrefix(c.Values["message-id"].(string), "m-")
		require.Equal(t, "acme", c.Values["tenant"])
		require.JSONEq(t, string(orderJSON(t, Order{ID: id, Cents: 100 + indexOf(ids, id)})), c.Values["data"].(string))
	}

	eff := newEffects()
	e.consume(t, e.fixed(t, eff))
	requireExactlyOnce(t, eff, ids)

	res = runTool(t, nil, e.args()...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	require.Zero(t, res.summary.Read)
}

func indexOf(ids []string, id string) int {
	for i, x := range ids {
		if x == id {
			return i
		}
	}
	return -1
}

// TestRedisStreamRedrivenTwice: a run that stops after its copy was added
// and before the letter was deleted; the next run adds a second copy (the
// first was not handled yet). Both copies carry the original's message id:
// the receiver runs the order once.
func TestRedisStreamRedrivenTwice(t *testing.T) {
	t.Parallel()
	e := newRedisStreamEnv(t)
	e.deadLetter(t, orders("a", "b"))
	src, err := redrive.NewRedisStream(t.Context(), redrive.RedisStreamConfig{Client: redistest.Client(t), Stream: e.dlq})
	require.NoError(t, err)
	crashAfterConfirm(t, src, e.st)
	require.EqualValues(t, 2, e.letters(t), "the letter deleted before the run ended")
	require.Len(t, e.entries(t, e.stream), 3, "the originals and the first copy")

	res := runTool(t, nil, e.args()...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	require.Equal(t, map[string]int{"republished": 2}, res.actions())
	require.Len(t, e.entries(t, e.stream), 5, "a second copy of a")

	eff := newEffects()
	e.consume(t, e.fixed(t, eff))
	requireExactlyOnce(t, eff, []string{"a", "b"})
	require.Zero(t, e.letters(t))
}

// TestRedisStreamDryRunFiltersLimit: a dry run adds and deletes nothing and
// forgets no record; a completed record removes its letter without a copy;
// --reason, --since and --limit leave what they do not take.
func TestRedisStreamDryRunFiltersLimit(t *testing.T) {
	t.Parallel()
	e := newRedisStreamEnv(t)
	e.deadLetter(t, orders("a", "b", "c"))
	completeRecord(t, e.st, "orders:m-b")
	n := len(e.entries(t, e.stream))

	res := runTool(t, nil, e.args("--dry-run", "--stream-redis", e.st.flags[1]+"/0")...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	rows := res.byKey()
	require.Equal(t, "would-republish", rows["orders:m-a"].Action)
	require.Equal(t, "would-remove-completed", rows["orders:m-b"].Action)
	require.EqualValues(t, 3, e.letters(t))
	require.Len(t, e.entries(t, e.stream), n)
	rec, found := e.st.record(t, "orders:m-a")
	require.True(t, found)
	require.Equal(t, store.StateFailed, rec.State)

	res = runTool(t, nil, e.args("--reason", "permanent-error")...)
	require.Equal(t, 3, res.code, "nothing matches: stderr %s", res.stderr)
	require.EqualValues(t, 3, e.letters(t))

	res = runTool(t, nil, e.args("--since", time.Now().Add(time.Hour).Format(time.RFC3339))...)
	require.Equal(t, 3, res.code, "stderr %s", res.stderr)

	// The broken consumer's 8 workers dead-lettered the three in any
	// order: --limit 2 takes the first two letters.
	want, copies := map[string]int{}, 0
	for _, l := range e.entries(t, e.dlq)[:2] {
		if l.Values[delivery.HeaderKey] == "orders:m-b" {
			want["removed-completed"]++
		} else {
			want["republished"]++
			copies++
		}
	}
	res = runTool(t, nil, e.args("--limit", "2")...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	require.Equal(t, want, res.actions())
	require.EqualValues(t, 1, e.letters(t))
	require.Len(t, e.entries(t, e.stream), n+copies, "a copy for each letter taken but the completed b's")
}

// TestRedisStreamSkipsAndRefusals: a letter without a message id (no-key)
// is skipped unless --force; one naming a stream that does not exist is
// refused (XADD NOMKSTREAM: nothing created) and stays, the run exiting 1;
// a dead-letter stream that does not exist exits 3.
func TestRedisStreamSkipsAndRefusals(t *testing.T) {
	t.Parallel()
	e := newRedisStreamEnv(t)
	ctx := t.Context()
	require.NoError(t, e.c.XGroupCreateMkStream(ctx, e.stream, e.group, "0").Err())
	require.NoError(t, e.c.XAdd(ctx, &redis.XAddArgs{Stream: e.stream, Values: []any{"data", `{"id":"x"}`}}).Err())
	e.consume(t, e.broken(t))
	require.EqualValues(t, 1, e.letters(t))
	missing := e.stream + ".gone"
	require.NoError(t, e.c.XAdd(ctx, &redis.XAddArgs{Stream: e.dlq, Values: []any{
		"data", `{"id":"y"}`, "message-id", "m-y",
		delivery.HeaderReason, "permanent-error", delivery.HeaderSource, missing, delivery.HeaderStream, missing,
		delivery.HeaderKey, "orders:m-y",
	}}).Err())

	res := runTool(t, nil, e.args()...)
	require.Equal(t, 1, res.code, "stderr: %s", res.stderr)
	require.Equal(t, map[string]int{"skipped": 1, "failed": 1}, res.actions(), "stdout: %s", res.stdout)
	require.Equal(t, "no-key", res.rows[0].Why)
	require.Contains(t, res.rows[1].Detail, "does not exist")
	require.EqualValues(t, 2, e.letters(t))
	require.Zero(t, e.c.Exists(ctx, missing).Val(), "the copy created the stream")

	require.NoError(t, e.c.XGroupCreateMkStream(ctx, missing, e.group, "0").Err())
	res = runTool(t, nil, e.args("--force")...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	require.Equal(t, map[string]int{"republished": 2}, res.actions())
	require.Zero(t, e.letters(t))
	require.Len(t, e.entries(t, missing), 1)

	res = runTool(t, nil, "redrive", "redisstream", "--stream", e.dlq+".none", "--redis", e.st.flags[1])
	require.Equal(t, 3, res.code, "stderr: %s", res.stderr)
	require.Contains(t, res.stderr, "not found")
}
