package deduphttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/redistest"
	deduphttp "github.com/dedup-go/dedup/middleware/http"
	"github.com/dedup-go/dedup/middleware/http/issuedkey"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/redisstore"
)

// TestServerIssuedKeys: a key from the issue endpoint is accepted for its
// principal and operation, and replayed like any other; forged, expired,
// another principal's and another operation's keys are each refused with
// their status, run nothing and store nothing.
func TestServerIssuedKeys(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s store.Store) {
		clk := clock.NewFake(time.Now())
		iss, err := issuedkey.NewIssuer(&issuedkey.Options{
			Keys: []issuedkey.Key{{ID: "k1", Secret: bytes.Repeat([]byte{7}, 32)}},
			TTL:  time.Hour, Clock: clk,
		})
		require.NoError(t, err)
		var runs counter
		m := newMiddleware(t, s, &deduphttp.Options{Verifier: iss, RequireKey: true})
		mux := http.NewServeMux()
		// The client asks for a key to pay order {id}; it is bound to the
		// operation the payment request will have.
		mux.Handle("POST /orders/{id}/payment-key", deduphttp.IssueHandler(iss, tenant, func(r *http.Request) string {
			return "POST /orders/" + r.PathValue("id") + "/pay"
		}))
		mux.Handle("POST /orders/{id}/pay", m.Wrap(payHandler(&runs, false, nil)))
		srv := serve(t, mux)
		c := client(t)
		issue := func(tenant, order string) deduphttp.IssuedKey {
			r := do(t, c, srv, req{path: "/orders/" + order + "/payment-key", tenant: tenant})
			require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
			require.Equal(t, "no-store", r.Header.Get("Cache-Control"))
			var k deduphttp.IssuedKey
			require.NoError(t, json.Unmarshal(r.Body, &k))
			require.Equal(t, "POST /orders/"+order+"/pay", k.Operation)
			return k
		}

		k := issue("acme", "o-1")
		first := do(t, c, srv, req{key: k.Key, tenant: "acme", path: "/orders/o-1/pay", body: "x"})
		require.Equal(t, http.StatusCreated, first.Status, "%s", first.Body)
		again := do(t, c, srv, req{key: k.Key, tenant: "acme", path: "/orders/o-1/pay", body: "x"})
		require.True(t, again.replayed())
		equalReplay(t, first, again)
		require.Equal(t, 1, runs.total())
		require.Equal(t, 1, records(t, s))

		forged := k.Key[:len(k.Key)-3] + "AAA"
		if forged == k.Key {
			forged = k.Key[:len(k.Key)-3] + "BBB"
		}
		expiring := issue("acme", "o-3")
		for _, tc := range []struct {
			name   string
			q      req
			status int
			code   deduphttp.Code
		}{
			{"forged", req{key: forged, tenant: "acme", path: "/orders/o-1/pay"}, http.StatusBadRequest, deduphttp.CodeKeyNotIssued},
			{"client-chosen", req{key: "my-own-key", tenant: "acme", path: "/orders/o-1/pay"}, http.StatusBadRequest, deduphttp.CodeKeyNotIssued},
			{"another principal", req{key: issue("acme", "o-2").Key, tenant: "globex", path: "/orders/o-2/pay"}, http.StatusForbidden, deduphttp.CodeKeyPrincipal},
			{"another operation", req{key: issue("acme", "o-2").Key, tenant: "acme", path: "/orders/o-9/pay"}, http.StatusUnprocessableEntity, deduphttp.CodeKeyOperation},
			{"missing", req{tenant: "acme", path: "/orders/o-1/pay"}, http.StatusBadRequest, deduphttp.CodeKeyMissing},
		} {
			r := do(t, c, srv, tc.q)
			require.Equal(t, tc.status, r.Status, "%s: %s", tc.name, r.Body)
			require.Equal(t, tc.code, r.problem(t).Code, tc.name)
		}
		clk.Advance(time.Hour)
		r := do(t, c, srv, req{key: expiring.Key, tenant: "acme", path: "/orders/o-3/pay"})
		require.Equal(t, http.StatusBadRequest, r.Status)
		require.Equal(t, deduphttp.CodeKeyExpired, r.problem(t).Code)

		require.Equal(t, 1, runs.total(), "a refused key must not run the handler")
		require.Equal(t, 1, records(t, s), "a refused key must not be stored")
	})
}

// TestIssuedKeyReplayedAfterExpiry: a server-issued key whose request
// completed is answered with its replay after the key expired, for as
// long as the record is kept, and the handler does not run again; an
// expired key with no completed record (never used, or its request
// failed) is 400 idempotency-key-expired, runs nothing and leaves no
// record. A store without store.Inspector gives the same answers.
func TestIssuedKeyReplayedAfterExpiry(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, s, under store.Store) {
		clk := clock.NewFake(time.Now())
		iss, err := issuedkey.NewIssuer(&issuedkey.Options{
			Keys: []issuedkey.Key{{ID: "k1", Secret: bytes.Repeat([]byte{7}, 32)}},
			TTL:  time.Hour, Clock: clk,
		})
		require.NoError(t, err)
		var runs counter
		pay := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := runs.add(r.URL.Path)
			if r.URL.Path == "/orders/o-3/pay" {
				http.Error(w, "gateway down", http.StatusBadGateway) // released: no record completes
				return
			}
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, "paid %s, run %d", r.URL.Path, n)
		})
		m := newMiddleware(t, s, &deduphttp.Options{Verifier: iss, RequireKey: true})
		srv := serve(t, m.Wrap(pay))
		c := client(t)
		issue := func(order string) string {
			k, err := iss.Issue("acme", "POST /orders/"+order+"/pay")
			require.NoError(t, err)
			return k.Key
		}
		used, unused, failed := issue("o-1"), issue("o-2"), issue("o-3")
		first := do(t, c, srv, req{key: used, tenant: "acme", path: "/orders/o-1/pay", body: "x"})
		require.Equal(t, http.StatusCreated, first.Status, "%s", first.Body)
		r := do(t, c, srv, req{key: failed, tenant: "acme", path: "/orders/o-3/pay", body: "x"})
		require.Equal(t, http.StatusBadGateway, r.Status)
		before := records(t, under)

		clk.Advance(2 * time.Hour) // every key has expired; the records are kept 24h
		again := do(t, c, srv, req{key: used, tenant: "acme", path: "/orders/o-1/pay", body: "x"})
		require.True(t, again.replayed(), "%d %s", again.Status, again.Body)
		equalReplay(t, first, again)

		for _, q := range []req{
			{key: unused, path: "/orders/o-2/pay"},
			{key: failed, path: "/orders/o-3/pay"},
		} {
			q.tenant, q.body = "acme", "x"
			r := do(t, c, srv, q)
			require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", q.path, r.Body)
			require.Equal(t, deduphttp.CodeKeyExpired, r.problem(t).Code)
		}
		// The expired key with another body is still a reused key.
		r = do(t, c, srv, req{key: used, tenant: "acme", path: "/orders/o-1/pay", body: "y"})
		require.Equal(t, http.StatusUnprocessableEntity, r.Status)
		require.Equal(t, 1, runs.get("/orders/o-1/pay"))
		require.Zero(t, runs.get("/orders/o-2/pay"))
		require.Equal(t, 1, runs.get("/orders/o-3/pay"))
		if _, ok := s.(store.Inspector); ok {
			require.Equal(t, before, records(t, under), "an expired key with no record leaves none")
		}
	}
	forEachStore(t, func(t *testing.T, s store.Store) { check(t, s, s) })
	t.Run("store without Inspector", func(t *testing.T) {
		t.Parallel()
		s := newMemstore(t)
		check(t, plainStore{s}, s)
	})
}

// plainStore hides every optional ability of the store it wraps.
type plainStore struct{ store.Store }

// TestExpiredKeyStoreDown: when the record of an expired key cannot be
// read, the answer is 503, fail-open too: an expired key never runs the
// handler unprotected; its event is a refusal matching
// dedup.ErrStoreUnavailable.
func TestExpiredKeyStoreDown(t *testing.T) {
	t.Parallel()
	own := redistest.StartServer(t)
	rc := redis.NewClient(&redis.Options{Addr: own.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rc.Close() })
	s, err := redisstore.New(context.Background(), rc, &redisstore.Options{Timeout: 200 * time.Millisecond})
	require.NoError(t, err)
	own.Stop()

	clk := clock.NewFake(time.Now())
	iss, err := issuedkey.NewIssuer(&issuedkey.Options{
		Keys: []issuedkey.Key{{ID: "k1", Secret: bytes.Repeat([]byte{7}, 32)}},
		TTL:  time.Hour, Clock: clk,
	})
	require.NoError(t, err)
	k, err := iss.Issue("acme", "POST /orders/o-1/pay")
	require.NoError(t, err)
	clk.Advance(2 * time.Hour)
	var runs counter
	c := client(t)
	for _, failOpen := range []bool{false, true} {
		var rec recorder
		m := newMiddleware(t, s, &deduphttp.Options{Verifier: iss, Config: &dedup.Config{
			FailOpen: failOpen, StoreRetryDelay: 3 * time.Second, Logger: slog.New(slog.DiscardHandler), Observer: &rec,
		}})
		srv := serve(t, m.Wrap(payHandler(&runs, false, nil)))
		r := do(t, c, srv, req{key: k.Key, tenant: "acme", path: "/orders/o-1/pay"})
		require.Equal(t, http.StatusServiceUnavailable, r.Status, "fail-open %v: %s", failOpen, r.Body)
		require.Equal(t, deduphttp.CodeStoreDown, r.problem(t).Code)
		require.Equal(t, "3", r.Header.Get("Retry-After"))
		e := rec.one(t, "expired key, store down")
		requireRefused(t, e, http.StatusServiceUnavailable, deduphttp.CodeStoreDown, dedup.ErrStoreUnavailable, delivery.ReasonStoreUnavailable)
		require.Equal(t, 3*time.Second, e.Decision.Delay)
	}
	require.Zero(t, runs.total())
}
