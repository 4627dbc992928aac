package deduphttp_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"iter"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/internal/testenv"
	deduphttp "github.com/dedup-go/dedup/middleware/http"
	"github.com/dedup-go/dedup/store"
)

// TestBadKeys: each unusable key is a 400 problem; the handler does not
// run and nothing is stored. A key is printable ASCII, as an RFC 8941
// sf-string is: a non-ASCII character is refused, raw or quoted.
func TestBadKeys(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s store.Store) {
		var runs counter
		h := newMiddleware(t, s, nil).Wrap(payHandler(&runs, false, nil))
		for name, values := range map[string][]string{
			"empty":               {""},
			"256 bytes":           {strings.Repeat("k", 256)},
			"control character":   {"order\x01-1"},
			"tab":                 {"order\t1"},
			"DEL":                 {"order\x7f"},
			"C1 control":          {"order\u0085"},
			"invalid UTF-8":       {"order\xff"},
			"non-ASCII":           {"caf\u00e9-1"},
			"non-ASCII quoted":    {"\"caf\u00e9-1\""},
			"unterminated quote":  {`"order-1`},
			"quote inside":        {`"or"der"`},
			"bad escape":          {`"or\der"`},
			"control when quoted": {"\"or\x01der\""},
			"empty when quoted":   {`""`},
			"two headers":         {"a", "b"},
		} {
			r := record(t, h, req{tenant: "acme"}, map[string][]string{deduphttp.HeaderKey: values})
			require.Equal(t, http.StatusBadRequest, r.Status, name)
			require.Equal(t, deduphttp.CodeKeyInvalid, r.problem(t).Code, name)
		}
		require.Zero(t, runs.total())
		require.Zero(t, records(t, s))

		// The longest key is fine, and a quoted key is the key it quotes.
		for _, values := range [][]string{{strings.Repeat("k", 255)}, {"~ !#$%&'()*+,-./09:;<=>?@AZ[\\]^_`az{|}"}, {`"a \"quoted\" key"`}, {`a "quoted" key`}} {
			r := record(t, h, req{tenant: "acme"}, map[string][]string{deduphttp.HeaderKey: values})
			require.Equal(t, http.StatusCreated, r.Status, "%q: %s", values, r.Body)
		}
		require.Equal(t, 3, runs.total(), "the quoted key must be the same record as the raw one")
		require.Equal(t, 3, records(t, s))
	})
}

// TestRequestBodyOverCap: a request body over MaxRequestSize is 413, with
// or without a Content-Length; nothing runs and nothing is stored.
func TestRequestBodyOverCap(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s store.Store) {
		var runs counter
		m := newMiddleware(t, s, &deduphttp.Options{MaxRequestSize: 1000})
		srv := serve(t, m.Wrap(payHandler(&runs, false, nil)))
		c := client(t)
		r := do(t, c, srv, req{key: "big", body: strings.Repeat("x", 1001)})
		require.Equal(t, http.StatusRequestEntityTooLarge, r.Status)
		require.Equal(t, deduphttp.CodeRequestTooLarge, r.problem(t).Code)

		// Chunked: no Content-Length, so the limit is found while reading.
		hr, err := http.NewRequest(http.MethodPost, srv.URL+"/orders/o-1/pay", io.MultiReader(strings.NewReader(strings.Repeat("x", 1001))))
		require.NoError(t, err)
		hr.Header.Set(deduphttp.HeaderKey, "big-chunked")
		resp, err := c.Do(hr)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "%s", body)

		// A Content-Length over the limit is refused before the body is
		// read: this client never sends it.
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		require.NoError(t, err)
		defer conn.Close()
		require.NoError(t, conn.SetDeadline(time.Now().Add(testenv.WaitTimeout)))
		_, err = io.WriteString(conn, "POST /orders/o-1/pay HTTP/1.1\r\nHost: x\r\nIdempotency-Key: huge\r\nContent-Length: 1000000000\r\n\r\n")
		require.NoError(t, err)
		resp, err = http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err, "the server waited for a body it should have refused")
		_ = resp.Body.Close()
		require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)

		r = do(t, c, srv, req{key: "fits", body: strings.Repeat("x", 1000)})
		require.Equal(t, http.StatusCreated, r.Status)
		require.Equal(t, 1, runs.total())
		require.Equal(t, 1, records(t, s))
	})
}

// TestResponseOverCap: a response body over MaxResponseSize reaches the
// client whole and completes the key; the handler never runs again for it,
// and replays get 410 saying the response was too large to keep.
func TestResponseOverCap(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s store.Store) {
		var runs counter
		big := bytes.Repeat([]byte("0123456789"), 1000) // 10,000 bytes
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.add("")
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Set("Location", "/exports/1")
			w.WriteHeader(http.StatusCreated)
			for i := 0; i < len(big); i += 999 { // many writes across the cap
				_, _ = w.Write(big[i:min(i+999, len(big))])
			}
		})
		m := newMiddleware(t, s, &deduphttp.Options{MaxResponseSize: 4096})
		srv := serve(t, m.Wrap(h))
		c := client(t)
		first := do(t, c, srv, req{key: "export"})
		require.Equal(t, http.StatusCreated, first.Status)
		require.Equal(t, big, first.Body)
		require.False(t, first.replayed())

		for range 2 {
			r := do(t, c, srv, req{key: "export"})
			require.Equal(t, http.StatusGone, r.Status)
			require.True(t, r.replayed())
			require.Equal(t, "201", r.Header.Get(deduphttp.HeaderOriginalStatus))
			require.Equal(t, deduphttp.CodeNotKept, r.problem(t).Code)
		}
		require.Equal(t, 1, runs.total())
		// The record is complete, without the body.
		in := s.(interface {
			Scan(context.Context, string) iter.Seq2[store.Record, error]
		})
		n := 0
		for rec, err := range in.Scan(context.Background(), "orders:") {
			require.NoError(t, err)
			require.Equal(t, store.StateCompleted, rec.State)
			require.Less(t, len(rec.Result), 200, "the body over the cap was stored")
			n++
		}
		require.Equal(t, 1, n)

		// Exactly at the cap is kept.
		exact := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.add("exact")
			_, _ = w.Write(big[:4096])
		})
		srv2 := serve(t, m.Wrap(exact))
		first = do(t, c, srv2, req{key: "exact"})
		again := do(t, c, srv2, req{key: "exact"})
		require.True(t, again.replayed())
		equalReplay(t, first, again)
		require.Equal(t, "text/plain; charset=utf-8", again.Header.Get("Content-Type"), "the sniffed type is stored")
		require.Equal(t, 1, runs.get("exact"))
	})
}

// TestOptionsRefused: invalid options are errors, not panics later.
func TestOptionsRefused(t *testing.T) {
	t.Parallel()
	s := newMemstore(t)
	for name, o := range map[string]*deduphttp.Options{
		"mismatch 400":         {MismatchStatus: 400},
		"negative response":    {MaxResponseSize: -1},
		"negative request":     {MaxRequestSize: -1},
		"replays Set-Cookie":   {ReplayHeaders: []string{"set-cookie"}},
		"replays Connection":   {ReplayHeaders: []string{"Connection"}},
		"replays empty":        {ReplayHeaders: []string{" "}},
		"bad method":           {Methods: []string{"PO ST"}},
		"short MaxIDLength":    {Config: cfg(func(c *dedup.Config) { c.MaxIDLength = 100 })},
		"codec set":            {Config: cfg(func(c *dedup.Config) { c.Codec = dedup.JSONCodec{} })},
		"namespace has colon":  {Config: cfg(func(c *dedup.Config) { c.Namespace = "a:b" })},
		"negative retry":       {InFlightRetryAfter: -1},
		"no principal":         {Config: cfg(func(c *dedup.Config) {})},
		"principal and shared": {Principal: tenant, SharedScope: true},
	} {
		if name != "no principal" && !o.SharedScope {
			o.Principal = tenant // each case fails for its own reason
		}
		_, err := deduphttp.New(s, o)
		require.Error(t, err, name)
		require.ErrorIs(t, err, dedup.ErrInvalidConfig, name)
	}
	_, err := deduphttp.New(nil, nil)
	require.ErrorIs(t, err, dedup.ErrInvalidConfig)
	_, err = deduphttp.New(s, nil)
	require.ErrorIs(t, err, dedup.ErrInvalidConfig, "nil options set no Principal")
	require.ErrorContains(t, err, "SharedScope")
	for _, o := range []*deduphttp.Options{{Principal: tenant}, {SharedScope: true}} {
		m, err := deduphttp.New(s, o)
		require.NoError(t, err)
		require.NotNil(t, m)
	}
}

func cfg(f func(*dedup.Config)) *dedup.Config {
	c := &dedup.Config{}
	f(c)
	return c
}
