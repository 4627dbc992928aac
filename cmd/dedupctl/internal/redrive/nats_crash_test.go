package redrive_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/cmd/dedupctl/internal/redrive"
	"github.com/dedup-go/dedup/internal/tcpproxy"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/redisstore"
)

// TestNATSCrashHalfway: 1,000 orders dead-lettered by the adapter (a
// handler that fails, one attempt each); the tool is SIGKILLed after 500
// republished, the fixed consumer handles what went out, and a second
// run redrives the rest: every order has its effect exactly once and the
// dead-letter stream is empty.
func TestNATSCrashHalfway(t *testing.T) {
	t.Parallel()
	const n = 1000
	e := newNATSEnv(t)
	ids := orderIDs(n)
	e.deadLetter(t, orders(ids...))

	first := crashRun(t, n/2, e.args()...)
	eff := newEffects()
	e.consume(t, fixedReceiver(t, e.st, e.ns, eff), false)
	e.settled(t)

	second := runTool(t, nil, e.args()...)
	require.Equal(t, 0, second.code, "stderr: %s", second.stderr)
	e.settled(t)
	requireExactlyOnce(t, eff, ids)
	require.Zero(t, e.count(t, e.dlqStream), "dead letters left")
	t.Logf("first run: %d redriven before the kill; second run: %v", len(first), second.summary.Actions)
}

// TestNATSCrashAfterConfirm: a run that stops after a copy was confirmed
// and before its letter was removed leaves the letter; the next run, the
// copy not handled yet (no record), republishes it again, and the
// receiver's record answers the second copy: one effect, no letter left.
func TestNATSCrashAfterConfirm(t *testing.T) {
	t.Parallel()
	e := newNATSEnv(t)
	e.deadLetter(t, orders("a"))
	src, err := redrive.NewNATS(t.Context(), redrive.NATSConfig{URL: e.url, Stream: e.dlqStream, Timeout: 5 * time.Second})
	require.NoError(t, err)
	crashAfterConfirm(t, src, e.st)
	require.EqualValues(t, 1, e.count(t, e.dlqStream), "the letter stays")
	require.EqualValues(t, 2, e.count(t, e.stream), "the original and the copy")

	res := runTool(t, nil, e.args()...)
	require.Equal(t, 0, res.code, "stderr: %s", res.stderr)
	require.Equal(t, "republished", res.rows[0].Action)
	require.EqualValues(t, 3, e.count(t, e.stream), "a second copy")
	eff := newEffects()
	e.consume(t, fixedReceiver(t, e.st, e.ns, eff), false)
	e.settled(t)
	requireExactlyOnce(t, eff, []string{"a"})
	require.Zero(t, e.count(t, e.dlqStream))
}

// TestNATSStoreDown: a store that stops answering stops the run at the
// first letter whose record it cannot read, naming the store; the letter
// stays and nothing is republished.
func TestNATSStoreDown(t *testing.T) {
	t.Parallel()
	e := newNATSEnv(t)
	e.deadLetter(t, orders("a"))
	proxy := tcpproxy.Start(t, testenv.Redis.Addr(t))
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	st, err := redisstore.New(t.Context(), c, &redisstore.Options{Prefix: e.st.flags[3]})
	require.NoError(t, err)
	proxy.Cut()

	src, err := redrive.NewNATS(t.Context(), redrive.NATSConfig{URL: e.url, Stream: e.dlqStream, Timeout: 5 * time.Second})
	require.NoError(t, err)
	defer src.Close(t.Context())
	_, err = redrive.Run(t.Context(), src, redrive.Options{Store: st, StoreName: "Redis " + proxy.Addr(), Timeout: time.Second},
		func(redrive.Outcome) error { return nil })
	require.ErrorContains(t, err, "Redis "+proxy.Addr()+`: the record of "orders:a"`)
	require.EqualValues(t, 1, e.count(t, e.dlqStream), "the letter stays")
	require.EqualValues(t, 1, e.count(t, e.stream), "nothing republished")
	rec, found := e.st.record(t, "orders:a")
	require.True(t, found)
	require.Equal(t, "failed", rec.State.String())
}
