package deduphttp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/testenv"
	deduphttp "github.com/dedup-go/dedup/middleware/http"
	"github.com/dedup-go/dedup/middleware/http/issuedkey"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/memstore"
)

// traceparent is the W3C trace context the test's clients send.
const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// outerKey is the context key of the value an outer middleware sets.
type outerKey struct{}

// outer stands for otelhttp or any middleware before deduphttp: it puts
// the request's X-Req in the context.
func outer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), outerKey{}, r.Header.Get("X-Req"))))
	})
}

// seen is an event with what the Observer read while it had it.
type seen struct {
	delivery.Event
	outer       any // the outer middleware's value in Observe's ctx
	traceparent string
	keyVisible  bool // Origin.Header gave the Idempotency-Key
}

// recorder is an Observer that keeps every event.
type recorder struct {
	mu     sync.Mutex
	events []seen
}

func (r *recorder) Observe(ctx context.Context, e delivery.Event) {
	s := seen{Event: e, outer: ctx.Value(outerKey{})}
	if e.Header != nil {
		s.traceparent, _ = e.Header.Get("traceparent") // as a propagator asks: lower case
		_, s.keyVisible = e.Header.Get(deduphttp.HeaderKey)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, s)
}

// one requires that exactly one event came since the last call, and
// returns it. Events are reported before the response is written, so a
// request's event is in once its response is.
func (r *recorder) one(t testing.TB, what string) seen {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Len(t, r.events, 1, "%s: one event per request", what)
	e := r.events[0]
	r.events = nil
	return e
}

// none requires that no event came since the last call.
func (r *recorder) none(t testing.TB, what string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Empty(t, r.events, what)
}

// requireOrigin checks what every event of a request sent with X-Req tag
// carries.
func requireOrigin(t testing.TB, e seen, tag, source string) {
	t.Helper()
	require.Equal(t, "http", e.Broker, tag)
	require.Equal(t, source, e.Source, tag)
	require.Empty(t, e.MessageID, tag)
	require.Equal(t, "orders", e.Namespace, tag)
	require.Equal(t, tag, e.outer, "%s: Observe gets the request's context, as outer middleware made it", tag)
	require.Equal(t, traceparent, e.traceparent, "%s: the request's headers are readable through Origin.Header", tag)
	require.False(t, e.keyVisible, "%s: the Idempotency-Key is never in the Origin", tag)
	require.False(t, e.Settled, tag)
}

// requireRefused checks the event of a request the middleware refused
// itself.
func requireRefused(t testing.TB, e seen, status int, code deduphttp.Code, is error, reason delivery.Reason) {
	t.Helper()
	var re *deduphttp.RefusedError
	require.ErrorAs(t, e.Err, &re)
	require.Equal(t, status, re.Status)
	require.Equal(t, code, re.Code)
	require.ErrorIs(t, e.Err, is)
	require.Equal(t, reason, e.Decision.Reason)
	require.Equal(t, delivery.StatusNone, e.Status)
	require.False(t, e.Stored)
}

// TestObserverEvents: an Observer hears one event per request the
// middleware deduplicates (a key, or RequireKey refusing its absence),
// none for a method it leaves alone; each says what happened (processed,
// replayed, in flight, reused, released, refused), with Broker "http",
// the route the mux will serve as Source, the request's headers readable
// and the request's context.
func TestObserverEvents(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s store.Store) {
		var rec recorder
		entered, release := make(chan struct{}, 1), make(chan struct{})
		mux := http.NewServeMux()
		mux.HandleFunc("/orders/{id}/pay", func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			switch string(body) {
			case "hold":
				entered <- struct{}{}
				select {
				case <-release:
				case <-r.Context().Done():
					return
				}
			case "fail":
				http.Error(w, "down", http.StatusBadGateway)
				return
			}
			w.WriteHeader(http.StatusCreated)
		})
		m := newMiddleware(t, s, &deduphttp.Options{RequireKey: true, MaxRequestSize: 16, Config: &dedup.Config{Observer: &rec}})
		srv := serve(t, outer(m.Wrap(mux)))
		var once sync.Once
		unblock := func() { once.Do(func() { close(release) }) }
		t.Cleanup(unblock) // before the server's Close, which waits for handlers
		c := client(t)
		const route = "/orders/{id}/pay"
		send := func(tag string, q req) reply {
			q.tenant = "acme"
			q.header = map[string]string{"X-Req": tag, "Traceparent": traceparent}
			return do(t, c, srv, q)
		}

		r := send("processed", req{key: "k1", body: "a"})
		require.Equal(t, http.StatusCreated, r.Status)
		e := rec.one(t, "processed")
		requireOrigin(t, e, "processed", route)
		require.Equal(t, delivery.StatusProcessed, e.Status)
		require.NoError(t, e.Err)
		require.True(t, e.Stored)
		require.Equal(t, "orders:"+deduphttp.RecordID("acme", "", "k1", 0), e.Key)

		r = send("replayed", req{key: "k1", body: "a"})
		require.True(t, r.replayed())
		e = rec.one(t, "replayed")
		requireOrigin(t, e, "replayed", route)
		require.Equal(t, delivery.StatusDuplicate, e.Status)
		require.True(t, e.Stored)
		require.Equal(t, delivery.ReasonDuplicate, e.Decision.Reason)

		r = send("reused", req{key: "k1", body: "b"})
		require.Equal(t, http.StatusUnprocessableEntity, r.Status)
		e = rec.one(t, "reused")
		requireOrigin(t, e, "reused", route)
		require.ErrorIs(t, e.Err, dedup.ErrKeyReused)
		require.False(t, e.Stored)

		held := make(chan reply, 1)
		hr := req{key: "k2", body: "hold", tenant: "acme", header: map[string]string{"X-Req": "held", "Traceparent": traceparent}}.build(t, srv.URL)
		go func() {
			r, err := sendReq(c, hr)
			if err != nil {
				r = reply{Status: -1, Body: []byte(err.Error())}
			}
			held <- r
		}()
		testenv.Recv(t, entered, "the held request's handler")
		r = send("in flight", req{key: "k2", body: "hold"})
		require.Equal(t, http.StatusConflict, r.Status)
		e = rec.one(t, "in flight")
		requireOrigin(t, e, "in flight", route)
		require.Equal(t, delivery.StatusInFlight, e.Status)
		require.False(t, e.Stored)
		unblock()
		require.Equal(t, http.StatusCreated, testenv.Recv(t, held, "the held request").Status)
		e = rec.one(t, "held")
		requireOrigin(t, e, "held", route)
		require.Equal(t, delivery.StatusProcessed, e.Status)

		r = send("released", req{key: "k3", body: "fail"})
		require.Equal(t, http.StatusBadGateway, r.Status)
		e = rec.one(t, "released")
		requireOrigin(t, e, "released", route)
		require.Error(t, e.Err, "a response not stored (5xx) releases the key")
		require.False(t, e.Stored)

		r = send("missing", req{body: "a"})
		require.Equal(t, http.StatusBadRequest, r.Status)
		e = rec.one(t, "missing")
		requireOrigin(t, e, "missing", route)
		requireRefused(t, e, http.StatusBadRequest, deduphttp.CodeKeyMissing, dedup.ErrNoKey, delivery.ReasonNoKey)
		require.Empty(t, e.Key)

		r = send("bad key", req{key: strings.Repeat("k", deduphttp.MaxKeyLength+1), body: "a"})
		require.Equal(t, http.StatusBadRequest, r.Status)
		e = rec.one(t, "bad key")
		requireOrigin(t, e, "bad key", route)
		requireRefused(t, e, http.StatusBadRequest, deduphttp.CodeKeyInvalid, dedup.ErrInvalidKey, delivery.ReasonInvalidKey)
		require.Empty(t, e.Key)

		r = send("too large", req{key: "k4", body: strings.Repeat("x", 17)})
		require.Equal(t, http.StatusRequestEntityTooLarge, r.Status)
		e = rec.one(t, "too large")
		requireOrigin(t, e, "too large", route)
		requireRefused(t, e, http.StatusRequestEntityTooLarge, deduphttp.CodeRequestTooLarge, dedup.ErrUndecodable, delivery.ReasonUndecodable)
		require.Equal(t, "orders:"+deduphttp.RecordID("acme", "", "k4", 0), e.Key)

		r = send("get", req{method: http.MethodGet, key: "k5"})
		require.Equal(t, http.StatusCreated, r.Status, "passed through to the handler")
		rec.none(t, "a method the middleware leaves alone is not its event")
	})
}

// sendReq is send, for a request built beforehand.
func sendReq(c *http.Client, r *http.Request) (reply, error) { return send(c, r) }

// TestObserverNotStored: a request whose key another request took over
// (its lease ended in the store while its handler was stuck) is answered
// with Idempotency-Not-Stored, and its event says so: processed, Problem
// ErrLeaseLost, not Stored. Source is the method alone when the
// middleware wraps a plain handler: never the path.
func TestObserverNotStored(t *testing.T) {
	t.Parallel()
	epoch := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	storeClock := clock.NewFake(epoch)
	s, err := memstore.New(&memstore.Options{Clock: storeClock})
	require.NoError(t, err)
	const lease = 3 * time.Second
	var rec recorder
	var runs counter
	hold := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.add("") == 1 {
			<-hold // stuck, deaf to its context
		}
		w.WriteHeader(http.StatusCreated)
	})
	// The middleware's clock stands still: its heartbeat never extends the
	// lease, which ends on the store's clock.
	m := newMiddleware(t, s, &deduphttp.Options{Config: &dedup.Config{Lease: lease, Clock: clock.NewFake(epoch), Observer: &rec}})
	srv := serve(t, outer(m.Wrap(h)))
	var once sync.Once
	unblock := func() { once.Do(func() { close(hold) }) }
	t.Cleanup(unblock) // before the server's Close, which waits for handlers
	c := client(t)
	q := func(tag string) *http.Request {
		return req{key: "k", tenant: "acme", body: "x", header: map[string]string{"X-Req": tag, "Traceparent": traceparent}}.build(t, srv.URL)
	}
	stuck := make(chan reply, 1)
	first := q("stuck")
	go func() {
		r, err := sendReq(c, first)
		if err != nil {
			r = reply{Status: -1, Body: []byte(err.Error())}
		}
		stuck <- r
	}()
	require.Eventually(t, func() bool { return runs.total() == 1 }, testenv.WaitTimeout, time.Millisecond)
	storeClock.Advance(lease + time.Second)
	r, err := sendReq(c, q("takeover"))
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, r.Status)
	e := rec.one(t, "takeover")
	requireOrigin(t, e, "takeover", http.MethodPost)
	require.True(t, e.Stored)

	unblock()
	r = testenv.Recv(t, stuck, "the stuck request")
	require.Equal(t, "true", r.Header.Get(deduphttp.HeaderNotStored))
	e = rec.one(t, "stuck")
	requireOrigin(t, e, "stuck", http.MethodPost)
	require.Equal(t, delivery.StatusProcessed, e.Status)
	require.ErrorIs(t, e.Problem, dedup.ErrLeaseLost)
	require.False(t, e.Stored)
	require.Equal(t, delivery.ReasonNotStored, e.Decision.Reason)
}

// TestObserverIssuedKeys: the Verifier's refusals and an expired key with
// no completed record are one event each, whose Err matches
// dedup.ErrInvalidKey and the issuedkey error; an expired key whose record
// completed is a replay. Source is r.Pattern when the middleware wraps a
// route's handler.
func TestObserverIssuedKeys(t *testing.T) {
	t.Parallel()
	s := newMemstore(t)
	clk := clock.NewFake(time.Now())
	iss, err := issuedkey.NewIssuer(&issuedkey.Options{
		Keys: []issuedkey.Key{{ID: "k1", Secret: bytes.Repeat([]byte{7}, 32)}},
		TTL:  time.Hour, Clock: clk,
	})
	require.NoError(t, err)
	var rec recorder
	m := newMiddleware(t, s, &deduphttp.Options{Verifier: iss, Config: &dedup.Config{Observer: &rec}})
	const route = "POST /orders/{id}/pay"
	mux := http.NewServeMux()
	mux.Handle(route, m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})))
	srv := serve(t, outer(mux))
	c := client(t)
	issue := func(tenant, order string) string {
		k, err := iss.Issue(tenant, "POST /orders/"+order+"/pay")
		require.NoError(t, err)
		return k.Key
	}
	send := func(tag, key, tenant string) reply {
		return do(t, c, srv, req{key: key, tenant: tenant, body: "x", header: map[string]string{"X-Req": tag, "Traceparent": traceparent}})
	}
	used, unused := issue("acme", "o-1"), issue("acme", "o-1")

	for _, c := range []struct {
		tag, key, tenant string
		status           int
		code             deduphttp.Code
		is               error
	}{
		{"not issued", "v1.k1.forged", "acme", http.StatusBadRequest, deduphttp.CodeKeyNotIssued, issuedkey.ErrNotIssued},
		{"another principal", used, "globex", http.StatusForbidden, deduphttp.CodeKeyPrincipal, issuedkey.ErrWrongPrincipal},
	} {
		r := send(c.tag, c.key, c.tenant)
		require.Equal(t, c.status, r.Status, c.tag)
		e := rec.one(t, c.tag)
		requireOrigin(t, e, c.tag, route)
		requireRefused(t, e, c.status, c.code, dedup.ErrInvalidKey, delivery.ReasonInvalidKey)
		require.ErrorIs(t, e.Err, c.is, c.tag)
	}

	r := send("first", used, "acme")
	require.Equal(t, http.StatusCreated, r.Status)
	require.Equal(t, delivery.StatusProcessed, rec.one(t, "first").Status)
	clk.Advance(2 * time.Hour)

	r = send("expired, completed", used, "acme")
	require.True(t, r.replayed())
	e := rec.one(t, "expired, completed")
	requireOrigin(t, e, "expired, completed", route)
	require.Equal(t, delivery.StatusDuplicate, e.Status)

	r = send("expired", unused, "acme")
	require.Equal(t, http.StatusBadRequest, r.Status)
	e = rec.one(t, "expired")
	requireOrigin(t, e, "expired", route)
	requireRefused(t, e, http.StatusBadRequest, deduphttp.CodeKeyExpired, issuedkey.ErrExpired, delivery.ReasonInvalidKey)
	require.NotEmpty(t, e.Key, "the key was usable: its record was looked up")
	require.True(t, errors.Is(e.Err, dedup.ErrInvalidKey))
	require.Contains(t, fmt.Sprint(e.Err), string(deduphttp.CodeKeyExpired))
}
