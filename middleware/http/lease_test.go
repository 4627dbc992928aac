package deduphttp_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/internal/tcpproxy"
	"github.com/dedup-go/dedup/internal/testenv"
	deduphttp "github.com/dedup-go/dedup/middleware/http"
	"github.com/dedup-go/dedup/store/memstore"
	"github.com/dedup-go/dedup/store/redisstore"
)

// TestLeaseExpiryTakeover (memstore, injected clocks): process A is stuck
// in its handler and its heartbeat never runs (its clock stands still);
// meanwhile B's request is 409, until A's lease ends on the store's clock.
// Then B takes the key over and runs the handler; A's late success is not
// stored (fenced), and every replay is B's response.
func TestLeaseExpiryTakeover(t *testing.T) {
	t.Parallel()
	epoch := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	storeClock := clock.NewFake(epoch)
	s, err := memstore.New(&memstore.Options{Clock: storeClock})
	require.NoError(t, err)
	const lease = 3 * time.Second
	var runs counter
	hold := make(chan struct{})
	var logs bytes.Buffer
	var logMu sync.Mutex
	a := newMiddleware(t, s, &deduphttp.Options{Config: &dedup.Config{
		Lease: lease, Clock: clock.NewFake(epoch), Logger: slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &logMu}, nil)),
	}})
	b := newMiddleware(t, s, &deduphttp.Options{Config: &dedup.Config{Lease: lease, Clock: storeClock}})
	srvA := serve(t, a.Wrap(payHandler(&runs, false, hold)))
	srvB := serve(t, b.Wrap(payHandler(&runs, false, nil)))
	c := client(t)
	q := req{key: "stuck", tenant: "acme", body: "x"}

	aReply := make(chan reply, 1)
	hr := q.build(t, srvA.URL)
	go func() {
		r, err := send(c, hr)
		if err != nil {
			r = reply{Status: -1, Body: []byte(err.Error())}
		}
		aReply <- r
	}()
	require.Eventually(t, func() bool { return runs.total() == 1 }, testenv.WaitTimeout, time.Millisecond)

	r := do(t, c, srvB, q)
	require.Equal(t, http.StatusConflict, r.Status, "A holds the key")
	require.Equal(t, "1", r.Header.Get("Retry-After"))

	storeClock.Advance(lease + time.Second)
	taken := do(t, c, srvB, q)
	require.Equal(t, http.StatusCreated, taken.Status, "%s", taken.Body)
	require.Contains(t, string(taken.Body), `"run":2`)

	close(hold)
	late := testenv.Recv(t, aReply, "A's response")
	require.Equal(t, http.StatusCreated, late.Status, "A's client still gets the answer of the effect A had")
	require.Contains(t, string(late.Body), `"run":1`)
	require.Equal(t, "true", late.Header.Get(deduphttp.HeaderNotStored), "its retries get B's response, not this one")
	require.Empty(t, taken.Header.Get(deduphttp.HeaderNotStored))
	logMu.Lock()
	require.Contains(t, logs.String(), "lease lost")
	logMu.Unlock()

	for _, srv := range []*httptest.Server{srvA, srvB} {
		r := do(t, c, srv, q)
		require.True(t, r.replayed())
		equalReplay(t, taken, r)
	}
	require.Equal(t, 2, runs.total())
}

// TestLeaseExpiryTakeoverRedis: the same on the real Redis. A reaches
// Redis through a proxy that the test cuts while A's handler is stuck: A
// cannot extend its lease, its handler is cancelled when the lease ends by
// its own clock, and B, which still reaches Redis, takes the key over.
func TestLeaseExpiryTakeoverRedis(t *testing.T) {
	t.Parallel()
	shared := redistest.Client(t)
	prefix := redistest.Prefix(t, shared)
	proxy := tcpproxy.Start(t, shared.Options().Addr)
	viaProxy := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = viaProxy.Close() })
	sa, err := redisstore.New(context.Background(), viaProxy, &redisstore.Options{Prefix: prefix, Timeout: 5 * time.Second}) // the cut fails calls at once
	require.NoError(t, err)
	sb, err := redisstore.New(context.Background(), shared, &redisstore.Options{Prefix: prefix})
	require.NoError(t, err)

	const lease = 600 * time.Millisecond
	var runs counter
	cancelled := make(chan error, 1)
	stuck := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.add("a")
		<-r.Context().Done() // stuck until the lease is lost
		cancelled <- context.Cause(r.Context())
		http.Error(w, "cancelled", http.StatusServiceUnavailable)
	})
	quiet := slog.New(slog.DiscardHandler)
	a := newMiddleware(t, sa, &deduphttp.Options{Config: &dedup.Config{Lease: lease, Logger: quiet}})
	b := newMiddleware(t, sb, &deduphttp.Options{Config: &dedup.Config{Lease: lease, Logger: quiet}})
	srvA := serve(t, a.Wrap(stuck))
	srvB := serve(t, b.Wrap(payHandler(&runs, false, nil)))
	c := client(t)
	q := req{key: "stuck", tenant: "acme", body: "x"}

	aDone := make(chan reply, 1)
	hr := q.build(t, srvA.URL)
	go func() {
		r, err := send(c, hr)
		if err != nil {
			r = reply{Status: -1, Body: []byte(err.Error())}
		}
		aDone <- r
	}()
	require.Eventually(t, func() bool { return runs.get("a") == 1 }, testenv.WaitTimeout, time.Millisecond)
	proxy.Cut()

	require.ErrorIs(t, testenv.Recv(t, cancelled, "A's handler to be cancelled"), dedup.ErrLeaseLost)
	require.Equal(t, http.StatusServiceUnavailable, testenv.Recv(t, aDone, "A's response").Status)

	var taken reply
	require.Eventually(t, func() bool {
		taken = do(t, c, srvB, q)
		return taken.Status != http.StatusConflict
	}, testenv.WaitTimeout, 50*time.Millisecond, "B never got the key")
	require.Equal(t, http.StatusCreated, taken.Status, "%s", taken.Body)
	again := do(t, c, srvB, q)
	require.True(t, again.replayed())
	equalReplay(t, taken, again)
	require.Equal(t, 1, runs.get("a"))
	require.Equal(t, 1, runs.get("acme"))
}

// TestStoreDown: with the store down, fail-closed answers 503 with
// Retry-After and runs nothing; fail-open runs the handler, says so in a
// header, and logs it.
func TestStoreDown(t *testing.T) {
	t.Parallel()
	srvRedis := redistest.StartServer(t)
	rc := redis.NewClient(&redis.Options{Addr: srvRedis.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rc.Close() })
	s, err := redisstore.New(context.Background(), rc, &redisstore.Options{Timeout: 200 * time.Millisecond})
	require.NoError(t, err)
	srvRedis.Stop()

	var logs bytes.Buffer
	var logMu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &logMu}, nil))
	var runs counter
	closed := newMiddleware(t, s, &deduphttp.Options{Config: &dedup.Config{StoreRetryDelay: 7 * time.Second, Logger: logger}})
	open := newMiddleware(t, s, &deduphttp.Options{Config: &dedup.Config{FailOpen: true, Logger: logger}})
	c := client(t)

	r := do(t, c, serve(t, closed.Wrap(payHandler(&runs, false, nil))), req{key: "k", tenant: "acme"})
	require.Equal(t, http.StatusServiceUnavailable, r.Status)
	require.Equal(t, "7", r.Header.Get("Retry-After"))
	require.Equal(t, deduphttp.CodeStoreDown, r.problem(t).Code)
	require.Zero(t, runs.total())

	srvOpen := serve(t, open.Wrap(payHandler(&runs, false, nil)))
	for i := 1; i <= 2; i++ {
		r = do(t, c, srvOpen, req{key: "k", tenant: "acme"})
		require.Equal(t, http.StatusCreated, r.Status)
		require.Equal(t, "true", r.Header.Get(deduphttp.HeaderBypassed))
		require.False(t, r.replayed())
		require.Contains(t, string(r.Body), fmt.Sprintf(`"run":%d`, i), "unprotected: every request runs")
	}
	logMu.Lock()
	out := logs.String()
	logMu.Unlock()
	require.Contains(t, out, "fail-closed")
	require.Equal(t, 2, strings.Count(out, "handler runs unprotected (fail-open)"))
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
