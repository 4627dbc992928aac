package deduphttp_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/internal/tcpproxy"
	"github.com/dedup-go/dedup/internal/testenv"
	deduphttp "github.com/dedup-go/dedup/middleware/http"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/redisstore"
)

// TestKeyReusedOnAnotherEndpoint: with the default scope (principal and
// key), the key sent to another path or with another method is 422
// idempotency-key-reused, and the handler does not run again; with an
// Operation of the user's, the key is scoped by it, and another operation
// is another record.
func TestKeyReusedOnAnotherEndpoint(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s store.Store) {
		var runs counter
		m := newMiddleware(t, s, &deduphttp.Options{Methods: []string{"POST", "PATCH"}})
		srv := serve(t, m.Wrap(payHandler(&runs, false, nil)))
		c := client(t)
		first := do(t, c, srv, req{key: "k", tenant: "acme", body: "x", path: "/orders/o-1/pay"})
		require.Equal(t, http.StatusCreated, first.Status)
		for _, other := range []req{
			{path: "/orders/o-2/pay"},
			{path: "/refunds"},
			{path: "/orders/o-1/pay", method: "PATCH"},
		} {
			other.key, other.tenant, other.body = "k", "acme", "x"
			r := do(t, c, srv, other)
			require.Equal(t, http.StatusUnprocessableEntity, r.Status, "%+v: %s", other, r.Body)
			require.Equal(t, deduphttp.CodeKeyReused, r.problem(t).Code)
		}
		require.Equal(t, 1, runs.total(), "the key on another endpoint must not run the handler again")
		require.Equal(t, 1, records(t, s))
		again := do(t, c, srv, req{key: "k", tenant: "acme", body: "x", path: "/orders/o-1/pay"})
		require.True(t, again.replayed())
		equalReplay(t, first, again)

		// An Operation of the user's scopes the key: one key per operation.
		var opRuns counter
		byRoute := newMiddleware(t, s, &deduphttp.Options{
			Config:    &dedup.Config{Namespace: "orders"},
			Operation: func(r *http.Request) string { return r.Method + " " + r.URL.Path },
		})
		srv2 := serve(t, byRoute.Wrap(payHandler(&opRuns, false, nil)))
		for _, path := range []string{"/a", "/b", "/a"} {
			r := do(t, c, srv2, req{key: "k2", tenant: "acme", body: "x", path: path})
			require.Equal(t, http.StatusCreated, r.Status, "%s: %s", path, r.Body)
		}
		require.Equal(t, 2, opRuns.total(), "two operations, two records; the third request is a replay")
	})
}

// TestSharedScope: with SharedScope (and no Principal), every caller's
// keys are one scope: the same key from another caller is the first
// caller's record.
func TestSharedScope(t *testing.T) {
	t.Parallel()
	var runs counter
	m, err := deduphttp.New(newMemstore(t), &deduphttp.Options{SharedScope: true})
	require.NoError(t, err)
	srv := serve(t, m.Wrap(payHandler(&runs, false, nil)))
	c := client(t)
	a := do(t, c, srv, req{key: "k", tenant: "acme", body: "x"})
	b := do(t, c, srv, req{key: "k", tenant: "globex", body: "x"})
	require.Equal(t, http.StatusCreated, a.Status)
	require.True(t, b.replayed())
	equalReplay(t, a, b)
	require.Equal(t, 1, runs.total())
}

// TestNotStoredHeader: replica A reaches Redis through a proxy, which A's
// handler cuts while it runs, so that A's completion fails for the whole
// lease: A's client gets the handler's response marked
// Idempotency-Not-Stored: true, and that is true: the client's retry,
// which reaches replica B once the lease ended, runs the handler again.
// A response whose outcome was recorded carries no such header.
func TestNotStoredHeader(t *testing.T) {
	t.Parallel()
	shared := redistest.Client(t)
	prefix := redistest.Prefix(t, shared)
	proxy := tcpproxy.Start(t, shared.Options().Addr)
	viaProxy := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = viaProxy.Close() })
	sa, err := redisstore.New(context.Background(), viaProxy, &redisstore.Options{Prefix: prefix, Timeout: 200 * time.Millisecond})
	require.NoError(t, err)
	sb, err := redisstore.New(context.Background(), shared, &redisstore.Options{Prefix: prefix})
	require.NoError(t, err)

	var runs counter
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.add(tenant(r))
		if n == 1 {
			proxy.Cut() // A is cut off from Redis from now on
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "run %d", n)
	})
	opts := func() *deduphttp.Options {
		return &deduphttp.Options{Config: &dedup.Config{Lease: time.Second, Logger: slog.New(slog.DiscardHandler)}}
	}
	a, b := newMiddleware(t, sa, opts()), newMiddleware(t, sb, opts())
	srvA, srvB := serve(t, a.Wrap(h)), serve(t, b.Wrap(h))
	c := client(t)
	q := req{key: "k", tenant: "acme", body: "x"}

	first := do(t, c, srvA, q)
	require.Equal(t, http.StatusCreated, first.Status, "%s", first.Body)
	require.Equal(t, "run 1", string(first.Body))
	require.Equal(t, "true", first.Header.Get(deduphttp.HeaderNotStored), "the client must learn that its retry may run again")
	require.Equal(t, uint64(1), a.Stats().ResultsNotStored)

	var again reply
	require.Eventually(t, func() bool {
		again = do(t, c, srvB, q)
		return again.Status != http.StatusConflict // until A's claim ends in Redis
	}, testenv.WaitTimeout, 50*time.Millisecond)
	require.Equal(t, http.StatusCreated, again.Status, "%s", again.Body)
	require.Equal(t, "run 2", string(again.Body), "the retry ran the handler again, as the header said it might")
	require.Empty(t, again.Header.Get(deduphttp.HeaderNotStored), "this outcome was recorded")
	require.False(t, again.replayed())

	replay := do(t, c, srvB, q)
	require.True(t, replay.replayed())
	require.Equal(t, "run 2", string(replay.Body))
	require.Empty(t, replay.Header.Get(deduphttp.HeaderNotStored))
	require.Equal(t, 2, runs.total())
}

// TestNotStoredTrailer: a response over MaxResponseSize goes out before
// its outcome is known; when the completion then fails for the whole
// lease, Idempotency-Not-Stored: true comes as a trailer of the chunked
// body.
func TestNotStoredTrailer(t *testing.T) {
	t.Parallel()
	shared := redistest.Client(t)
	proxy := tcpproxy.Start(t, shared.Options().Addr)
	viaProxy := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = viaProxy.Close() })
	s, err := redisstore.New(context.Background(), viaProxy, &redisstore.Options{Prefix: redistest.Prefix(t, shared), Timeout: 200 * time.Millisecond})
	require.NoError(t, err)
	big := bytes.Repeat([]byte("x"), 64<<10) // over the cap, and over net/http's buffer: chunked
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(big)
		if r.Header.Get("X-Cut") != "" {
			proxy.Cut()
		}
	})
	m := newMiddleware(t, s, &deduphttp.Options{MaxResponseSize: 1024, Config: &dedup.Config{
		Lease: time.Second, Logger: slog.New(slog.DiscardHandler),
	}})
	srv := serve(t, m.Wrap(h))
	c := client(t)
	get := func(key string, cut bool) *http.Response {
		hr := req{key: key, tenant: "acme"}.build(t, srv.URL)
		if cut {
			hr.Header.Set("X-Cut", "1")
		}
		resp, err := c.Do(hr)
		require.NoError(t, err)
		t.Cleanup(func() { _ = resp.Body.Close() })
		body, err := io.ReadAll(resp.Body) // the trailer comes after the body
		require.NoError(t, err)
		require.Equal(t, big, body)
		return resp
	}
	ok := get("k-1", false)
	require.Empty(t, ok.Trailer.Get(deduphttp.HeaderNotStored), "recorded")
	cut := get("k-2", true)
	require.Equal(t, http.StatusOK, cut.StatusCode)
	require.Equal(t, []string{"chunked"}, cut.TransferEncoding)
	require.Empty(t, cut.Header.Get(deduphttp.HeaderNotStored), "the header went out before the outcome was known")
	require.Equal(t, "true", cut.Trailer.Get(deduphttp.HeaderNotStored))
}
