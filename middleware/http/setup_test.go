package deduphttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/internal/redistest"
	deduphttp "github.com/dedup-go/dedup/middleware/http"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/memstore"
	"github.com/dedup-go/dedup/store/redisstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// forEachStore runs fn against memstore and against the shared Redis.
func forEachStore(t *testing.T, fn func(t *testing.T, s store.Store)) {
	t.Run("memstore", func(t *testing.T) {
		t.Parallel()
		fn(t, newMemstore(t))
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		fn(t, newRedisStore(t))
	})
}

func newMemstore(t testing.TB) *memstore.Store {
	s, err := memstore.New(nil)
	require.NoError(t, err)
	return s
}

func newRedisStore(t testing.TB) *redisstore.Store {
	c := redistest.Client(t)
	s, err := redisstore.New(context.Background(), c, &redisstore.Options{Prefix: redistest.Prefix(t, c)})
	require.NoError(t, err)
	return s
}

// tenant is the test's principal: the X-Tenant header (a real service
// reads it from what its authentication put in the context).
func tenant(r *http.Request) string { return r.Header.Get("X-Tenant") }

// newMiddleware returns a middleware on s with the test's principal and
// a namespace of its own.
func newMiddleware(t testing.TB, s store.Store, opts *deduphttp.Options) *deduphttp.Middleware {
	t.Helper()
	if opts == nil {
		opts = &deduphttp.Options{}
	}
	if opts.Config == nil {
		opts.Config = &dedup.Config{}
	}
	opts.Config.Namespace = "orders"
	if opts.Principal == nil {
		opts.Principal = tenant
	}
	m, err := deduphttp.New(s, opts)
	require.NoError(t, err)
	return m
}

// serve starts a real HTTP server (loopback) for h, closed when t ends.
func serve(t testing.TB, h http.Handler) *httptest.Server {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// client returns an HTTP client that keeps 128 connections per host and
// does not decode gzip, so that tests see bodies as they were sent.
func client(t testing.TB) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 128, DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// reply is a response as the client read it.
type reply struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r reply) replayed() bool { return r.Header.Get(deduphttp.HeaderReplayed) == "true" }

// problem decodes a problem body, checking its media type.
func (r reply) problem(t testing.TB) deduphttp.Problem {
	t.Helper()
	require.Equal(t, deduphttp.ProblemContentType, r.Header.Get("Content-Type"), "body: %s", r.Body)
	var p deduphttp.Problem
	require.NoError(t, json.Unmarshal(r.Body, &p))
	require.Equal(t, r.Status, p.Status)
	require.Equal(t, "about:blank", p.Type)
	require.Equal(t, http.StatusText(r.Status), p.Title)
	return p
}

// req describes one request of a test.
type req struct {
	method, path, key, tenant, body string
	header                          map[string]string
}

func (q req) build(t testing.TB, base string) *http.Request {
	r, err := q.request(context.Background(), base)
	require.NoError(t, err)
	return r
}

// request is build for a goroutine other than the test's.
func (q req) request(ctx context.Context, base string) (*http.Request, error) {
	method := q.method
	if method == "" {
		method = http.MethodPost
	}
	path := q.path
	if path == "" {
		path = "/orders/o-1/pay"
	}
	r, err := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(q.body))
	if err != nil {
		return nil, err
	}
	if q.key != "" {
		r.Header.Set(deduphttp.HeaderKey, q.key)
	}
	if q.tenant != "" {
		r.Header.Set("X-Tenant", q.tenant)
	}
	for k, v := range q.header {
		r.Header.Set(k, v)
	}
	return r, nil
}

// do sends q to srv.
func do(t testing.TB, c *http.Client, srv *httptest.Server, q req) reply {
	t.Helper()
	r, err := send(c, q.build(t, srv.URL))
	require.NoError(t, err)
	return r
}

// send sends r and reads the answer; safe outside the test's goroutine.
func send(c *http.Client, r *http.Request) (reply, error) {
	resp, err := c.Do(r)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return reply{Status: resp.StatusCode, Header: resp.Header, Body: body}, err
}

// record sends q straight to h through a ResponseRecorder: for requests
// that net/http's client refuses to send (control characters in a header).
func record(t testing.TB, h http.Handler, q req, raw map[string][]string) reply {
	t.Helper()
	r := httptest.NewRequest(cmpOr(q.method, http.MethodPost), cmpOr(q.path, "/orders/o-1/pay"), strings.NewReader(q.body))
	if q.tenant != "" {
		r.Header.Set("X-Tenant", q.tenant)
	}
	for k, v := range raw {
		r.Header[k] = v
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return reply{Status: w.Code, Header: w.Result().Header, Body: w.Body.Bytes()}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// counter is a handler that counts its runs per tenant.
type counter struct {
	mu   sync.Mutex
	runs map[string]int
}

func (c *counter) add(tenant string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runs == nil {
		c.runs = map[string]int{}
	}
	c.runs[tenant]++
	return c.runs[tenant]
}

func (c *counter) get(tenant string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[tenant]
}

func (c *counter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.runs {
		n += v
	}
	return n
}

// records counts the records a store holds under the middleware's
// namespace ("orders").
func records(t testing.TB, s store.Store) int {
	t.Helper()
	in, ok := s.(store.Inspector)
	require.True(t, ok)
	n := 0
	for _, err := range in.Scan(context.Background(), "orders:") {
		require.NoError(t, err)
		n++
	}
	return n
}

// equalReplay requires that b replays a: same status, same replayable
// headers, same body bytes.
func equalReplay(t testing.TB, a, b reply) {
	t.Helper()
	require.Equal(t, a.Status, b.Status)
	for _, h := range []string{"Content-Type", "Content-Encoding", "Content-Length", "Location", "Content-Language", "Content-Disposition"} {
		require.Equal(t, a.Header.Values(h), b.Header.Values(h), "header %s", h)
	}
	require.True(t, bytes.Equal(a.Body, b.Body), "bodies differ:\n%q\n%q", a.Body, b.Body)
}
