package deduphttp_test

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/testenv"
	deduphttp "github.com/dedup-go/dedup/middleware/http"
	"github.com/dedup-go/dedup/store"
)

// payHandler charges an order: it counts its runs per tenant and answers
// 201 with a receipt naming the tenant, the run and the body it read, a
// Location, a cookie and a request id (neither of which may be replayed).
// With gz, the receipt is gzip-encoded.
func payHandler(runs *counter, gz bool, hold <-chan struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		t := tenant(r)
		n := runs.add(t)
		if hold != nil {
			<-hold
		}
		receipt := fmt.Sprintf(`{"tenant":%q,"run":%d,"paid":%q,"at":%d}`, t, n, body, time.Now().UnixNano())
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Location", "/receipts/"+t+"-"+strconv.Itoa(n))
		h.Set("Set-Cookie", "session=secret-"+strconv.Itoa(n))
		h.Set("X-Request-Id", strconv.FormatInt(time.Now().UnixNano(), 10))
		if gz {
			h.Set("Content-Encoding", "gzip")
			w.WriteHeader(http.StatusCreated)
			zw := gzip.NewWriter(w)
			_, _ = io.WriteString(zw, receipt)
			_ = zw.Close()
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, receipt)
	})
}

// TestConcurrentRequestsOneKey sends 100 POSTs with one key at once: the
// handler runs once, one response is the original, every other is a 409
// or a replay byte-identical to it (gzip-encoded bodies too), and replays
// never carry the cookie.
func TestConcurrentRequestsOneKey(t *testing.T) {
	for _, gz := range []bool{false, true} {
		t.Run(fmt.Sprintf("gzip=%v", gz), func(t *testing.T) {
			t.Parallel()
			forEachStore(t, func(t *testing.T, s store.Store) {
				var runs counter
				release := make(chan struct{})
				srv := serve(t, newMiddleware(t, s, nil).Wrap(payHandler(&runs, gz, release)))
				c := client(t)
				q := req{key: "order-1-payment", tenant: "acme", body: `{"cents":1250}`}

				const n = 100
				replies := make([]reply, n)
				var wg sync.WaitGroup
				var conflicts atomic.Int32
				errs := make(chan error, n)
				for i := range n {
					hr := q.build(t, srv.URL)
					wg.Go(func() {
						var err error
						if replies[i], err = send(c, hr); err != nil {
							errs <- err
							conflicts.Add(n) // nothing to wait for
						}
						if replies[i].Status == http.StatusConflict {
							conflicts.Add(1)
						}
					})
				}
				// Hold the handler until some requests met it in flight, so
				// that both answers are seen.
				require.Eventually(t, func() bool { return conflicts.Load() >= 10 }, testenv.WaitTimeout, time.Millisecond)
				close(release)
				testenv.Wait(t, &wg, "100 requests")
				close(errs)
				for err := range errs {
					require.NoError(t, err)
				}

				require.Equal(t, 1, runs.total(), "the handler must run once")
				var original *reply
				replays, inFlight := 0, 0
				for i := range replies {
					r := &replies[i]
					switch {
					case r.Status == http.StatusConflict:
						inFlight++
						p := r.problem(t)
						require.Equal(t, deduphttp.CodeInFlight, p.Code)
						require.Equal(t, "1", r.Header.Get("Retry-After"))
					case r.replayed():
						replays++
					default:
						require.Nil(t, original, "two originals")
						original = r
					}
				}
				require.NotNil(t, original)
				require.Equal(t, http.StatusCreated, original.Status)
				require.Equal(t, "session=secret-1", original.Header.Get("Set-Cookie"))
				require.Equal(t, n, 1+replays+inFlight)
				require.GreaterOrEqual(t, inFlight, 10)

				// One more request after the storm is a replay too.
				replies = append(replies, do(t, c, srv, q))
				replays++
				for _, r := range replies {
					if !r.replayed() {
						continue
					}
					replays--
					equalReplay(t, *original, r)
					require.Empty(t, r.Header.Values("Set-Cookie"), "a cookie was replayed")
					require.Empty(t, r.Header.Values("X-Request-Id"), "a header outside the allowlist was replayed")
				}
				require.Zero(t, replays)
				if gz {
					require.Equal(t, "gzip", original.Header.Get("Content-Encoding"))
					zr, err := gzip.NewReader(bytes.NewReader(original.Body))
					require.NoError(t, err)
					plain, err := io.ReadAll(zr)
					require.NoError(t, err)
					require.Contains(t, string(plain), `"tenant":"acme","run":1`)
				}
				require.Equal(t, 1, records(t, s))
			})
		})
	}
}

// TestPrincipalsNeverShareResponses: the same key from two tenants, each
// request sent three times at once and retried until answered, runs once
// per tenant, and each tenant's copies get its own response.
func TestPrincipalsNeverShareResponses(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s store.Store) {
		var runs counter
		srv := serve(t, newMiddleware(t, s, nil).Wrap(payHandler(&runs, false, nil)))
		rep := retried(t, srv, []req{{key: "k1", tenant: "acme", body: "x"}, {key: "k1", tenant: "globex", body: "x"}}, runs.get)
		// Once per tenant (a tenant answered with the other's record would
		// show no effect), every copy answered, every replay its tenant's
		// first answer.
		rep.Check(t)
		require.Equal(t, 2, records(t, s))
	})
}

// TestScopeEncodingNeverCollides: principals and operations whose plain
// concatenations are equal are still separate scopes, and a principal too
// long for a plain record id is hashed into it: each runs once.
func TestScopeEncodingNeverCollides(t *testing.T) {
	t.Parallel()
	var runs counter
	m := newMiddleware(t, newMemstore(t), &deduphttp.Options{
		Operation: func(r *http.Request) string { return r.Header.Get("X-Op") },
	})
	srv := serve(t, m.Wrap(payHandler(&runs, false, nil)))
	var reqs []req
	for _, scope := range [][2]string{{"a:b", "c"}, {"a", "b:c"}, {"a:bc", ""}, {"", "a:bc"}, {"1:a", "1:b"}, {strings.Repeat("p", 600), "op"}} {
		reqs = append(reqs, req{key: "k", tenant: scope[0], header: map[string]string{"X-Op": scope[1]}})
	}
	retried(t, srv, reqs, runs.get).Check(t)
}

// TestKeyReusedWithAnotherRequest: the same key with another body, query
// or method is refused (422, or 409 when configured), never replayed, and
// the handler does not run.
func TestKeyReusedWithAnotherRequest(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s store.Store) {
		for _, status := range []int{0, http.StatusConflict} {
			var runs counter
			m := newMiddleware(t, s, &deduphttp.Options{
				MismatchStatus: status,
				Methods:        []string{"POST", "PUT"},
				// A route name: one operation whatever the method and path.
				Operation: func(*http.Request) string { return "pay" },
			})
			srv := serve(t, m.Wrap(payHandler(&runs, false, nil)))
			c := client(t)
			key := fmt.Sprintf("k-%d", status)
			first := do(t, c, srv, req{key: key, tenant: "acme", body: `{"cents":1}`})
			require.Equal(t, http.StatusCreated, first.Status)
			want := cmpInt(status, http.StatusUnprocessableEntity)
			for _, other := range []req{
				{body: `{"cents":2}`},
				{body: `{"cents":1}`, path: "/orders/o-1/pay?currency=eur"},
				{body: `{"cents":1}`, path: "/orders/o-2/pay"},
				{body: `{"cents":1}`, method: "PUT"},
			} {
				other.key, other.tenant = key, "acme"
				r := do(t, c, srv, other)
				require.Equal(t, want, r.Status, "%+v: %s", other, r.Body)
				require.Equal(t, deduphttp.CodeKeyReused, r.problem(t).Code)
			}
			require.Equal(t, 1, runs.total())
			again := do(t, c, srv, req{key: key, tenant: "acme", body: `{"cents":1}`})
			equalReplay(t, first, again)
		}
	})
}

func cmpInt(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

// TestFailedResponsesRelease: a 500 or a 429 releases the key (a retry
// runs the handler again); a 4xx is stored and replayed.
func TestFailedResponsesRelease(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s store.Store) {
		var runs counter
		statuses := []int{http.StatusInternalServerError, http.StatusTooManyRequests, http.StatusConflict}
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := runs.add(tenant(r))
			if n <= len(statuses) {
				w.WriteHeader(statuses[n-1])
				fmt.Fprintf(w, "run %d", n)
				return
			}
			w.WriteHeader(http.StatusCreated)
		})
		srv := serve(t, newMiddleware(t, s, nil).Wrap(h))
		c := client(t)
		q := req{key: "retry-me", tenant: "acme"}

		r := do(t, c, srv, q)
		require.Equal(t, http.StatusInternalServerError, r.Status)
		require.Equal(t, "run 1", string(r.Body), "the client gets the handler's own 500")
		r = do(t, c, srv, q)
		require.Equal(t, http.StatusTooManyRequests, r.Status)
		require.False(t, r.replayed())
		r = do(t, c, srv, q)
		require.Equal(t, http.StatusConflict, r.Status)
		require.False(t, r.replayed())
		require.Equal(t, "run 3", string(r.Body))
		// The 409 of the handler (a 4xx) completed the key.
		r = do(t, c, srv, q)
		require.Equal(t, http.StatusConflict, r.Status)
		require.True(t, r.replayed())
		require.Equal(t, "run 3", string(r.Body))
		require.Equal(t, 3, runs.total())
	})
}

// TestStoreEveryStatus: a StoreStatus hook that stores everything replays
// a 500.
func TestStoreEveryStatus(t *testing.T) {
	t.Parallel()
	var runs counter
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.add("")
		http.Error(w, "boom", http.StatusInternalServerError)
	})
	m := newMiddleware(t, newMemstore(t), &deduphttp.Options{StoreStatus: func(int) bool { return true }})
	srv := serve(t, m.Wrap(h))
	c := client(t)
	first := do(t, c, srv, req{key: "k"})
	again := do(t, c, srv, req{key: "k"})
	require.Equal(t, http.StatusInternalServerError, again.Status)
	require.True(t, again.replayed())
	equalReplay(t, first, again)
	require.Equal(t, 1, runs.total())
}

// TestPanicReleasesTheKey: a panicking handler gets a 500 problem, the key
// is released, the server keeps serving, and the retry runs the handler.
func TestPanicReleasesTheKey(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s store.Store) {
		var runs counter
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Partial", "yes")
			if runs.add("") == 1 {
				_, _ = io.WriteString(w, "half a receipt")
				panic("payment gateway client bug")
			}
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, "receipt")
		})
		wrapped := newMiddleware(t, s, nil).Wrap(h)
		outer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Outer", "kept") // set before the middleware
			wrapped.ServeHTTP(w, r)
		})
		srv := serve(t, outer)
		c := client(t)
		r := do(t, c, srv, req{key: "p"})
		require.Equal(t, http.StatusInternalServerError, r.Status)
		require.Equal(t, deduphttp.CodeHandlerPanic, r.problem(t).Code)
		require.Empty(t, r.Header.Get("X-Partial"), "the panicking handler's headers must not leak into the problem")
		require.Equal(t, "kept", r.Header.Get("X-Outer"))
		require.NotContains(t, string(r.Body), "half a receipt")

		r = do(t, c, srv, req{key: "p"})
		require.Equal(t, http.StatusCreated, r.Status)
		require.False(t, r.replayed())
		r = do(t, c, srv, req{key: "p"})
		require.True(t, r.replayed())
		require.Equal(t, "receipt", string(r.Body))
		require.Equal(t, 2, runs.total())
	})
}

// TestStreamingReleasesTheKey: a handler that flushes or hijacks streams
// as usual, and its key is released.
func TestStreamingReleasesTheKey(t *testing.T) {
	t.Parallel()
	var runs counter
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.add(r.URL.Path)
		if r.URL.Path == "/hijack" {
			conn, rw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(err)
			}
			defer conn.Close()
			_, _ = rw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nraw ok")
			_ = rw.Flush()
			return
		}
		_, _ = io.WriteString(w, "part 1;")
		require.NoError(t, http.NewResponseController(w).Flush())
		_, _ = io.WriteString(w, "part 2")
	})
	srv := serve(t, newMiddleware(t, newMemstore(t), nil).Wrap(h))
	c := client(t)
	for _, path := range []string{"/stream", "/hijack"} {
		for range 2 {
			r := do(t, c, srv, req{key: "s" + path, path: path})
			// A hijacked response reaches the client before its handler
			// returns and the key is released: a request right behind it
			// may still find the key held (409, its handler not run).
			for deadline := time.Now().Add(testenv.WaitTimeout); path == "/hijack" && r.Status == http.StatusConflict && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
				r = do(t, c, srv, req{key: "s" + path, path: path})
			}
			require.Equal(t, http.StatusOK, r.Status)
			require.False(t, r.replayed())
			if path == "/stream" {
				require.Equal(t, "part 1;part 2", string(r.Body))
			} else {
				require.Equal(t, "raw ok", string(r.Body))
			}
		}
		require.Equal(t, 2, runs.get(path), "a streamed response must release its key")
	}
}

// TestPassThrough: other methods and requests without a key are not
// deduplicated; RequireKey refuses a missing key with 400.
func TestPassThrough(t *testing.T) {
	t.Parallel()
	var runs counter
	s := newMemstore(t)
	srv := serve(t, newMiddleware(t, s, nil).Wrap(payHandler(&runs, false, nil)))
	c := client(t)
	for _, q := range []req{{method: "GET", key: "k"}, {method: "PUT", key: "k"}, {method: "DELETE", key: "k"}, {}} {
		for range 2 {
			r := do(t, c, srv, q)
			require.Equal(t, http.StatusCreated, r.Status)
			require.False(t, r.replayed())
		}
	}
	require.Equal(t, 8, runs.total())
	require.Equal(t, 0, records(t, s))

	strict := serve(t, newMiddleware(t, s, &deduphttp.Options{RequireKey: true}).Wrap(payHandler(&runs, false, nil)))
	r := do(t, c, strict, req{})
	require.Equal(t, http.StatusBadRequest, r.Status)
	require.Equal(t, deduphttp.CodeKeyMissing, r.problem(t).Code)
	require.Equal(t, 8, runs.total())
}
