package http_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/clock"
	deduphttp "github.com/dedup-go/dedup/middleware/http"
	"github.com/dedup-go/dedup/middleware/http/issuedkey"
	"github.com/dedup-go/dedup/store"
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
