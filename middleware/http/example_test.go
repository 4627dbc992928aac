package deduphttp_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"

	"github.com/dedup-go/dedup"
	deduphttp "github.com/dedup-go/dedup/middleware/http"
	"github.com/dedup-go/dedup/middleware/http/issuedkey"
	"github.com/dedup-go/dedup/store/memstore"
)

// The payment endpoint runs once per Idempotency-Key and tenant; a retry
// gets the first response back, and the key reused for another payment is
// refused.
func ExampleMiddleware() {
	s, err := memstore.New(nil) // redisstore for more than one process
	if err != nil {
		log.Fatal(err)
	}
	idem, err := deduphttp.New(s, &deduphttp.Options{
		Config:    &dedup.Config{Namespace: "orders-api"},
		Principal: func(r *http.Request) string { return r.Header.Get("X-Tenant") }, // from your authentication
	})
	if err != nil {
		log.Fatal(err)
	}
	var charges atomic.Int32
	pay := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := charges.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"order":%q,"charge":"ch_%d"}`, r.PathValue("id"), n)
	})
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{id}/pay", idem.Wrap(pay))

	send := func(key, body string) {
		r := httptest.NewRequest(http.MethodPost, "/orders/o-1/pay", strings.NewReader(body))
		r.Header.Set("Idempotency-Key", key)
		r.Header.Set("X-Tenant", "acme")
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("Idempotency-Replayed"), strings.TrimSpace(w.Body.String()))
	}
	send("pay-o-1", `{"cents":1250}`)
	send("pay-o-1", `{"cents":1250}`) // the client retries
	send("pay-o-1", `{"cents":9999}`) // the same key for another payment
	fmt.Println("charges:", charges.Load())
	// Output:
	// 201  {"order":"o-1","charge":"ch_1"}
	// 201 true {"order":"o-1","charge":"ch_1"}
	// 422  {"type":"about:blank","title":"Unprocessable Entity","status":422,"detail":"this Idempotency-Key was used with another request (method, path, query or body)","code":"idempotency-key-reused"}
	// charges: 1
}

// Server-issued keys: the client asks for a key before paying, and only
// keys the server issued, to that client for that payment, are accepted.
func ExampleIssueHandler() {
	iss, err := issuedkey.NewIssuer(&issuedkey.Options{
		Keys: []issuedkey.Key{{ID: "2026-11", Secret: bytes.Repeat([]byte("s"), 32)}}, // a real secret is random
	})
	if err != nil {
		log.Fatal(err)
	}
	s, err := memstore.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	tenant := func(r *http.Request) string { return r.Header.Get("X-Tenant") }
	idem, err := deduphttp.New(s, &deduphttp.Options{
		Config:     &dedup.Config{Namespace: "orders-api"},
		Principal:  tenant,
		Verifier:   iss,
		RequireKey: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{id}/payment-key", deduphttp.IssueHandler(iss, tenant,
		func(r *http.Request) string { return "POST /orders/" + r.PathValue("id") + "/pay" }))
	mux.Handle("POST /orders/{id}/pay", idem.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "paid")
	})))

	send := func(path, tenant, key string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, path, nil)
		r.Header.Set("X-Tenant", tenant)
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w
	}
	var k deduphttp.IssuedKey
	if err := json.Unmarshal(send("/orders/o-1/payment-key", "acme", "").Body.Bytes(), &k); err != nil {
		log.Fatal(err)
	}
	fmt.Println("issued for:", k.Operation)
	fmt.Println("acme pays:", send("/orders/o-1/pay", "acme", k.Key).Code)
	fmt.Println("acme retries:", send("/orders/o-1/pay", "acme", k.Key).Header().Get("Idempotency-Replayed"))
	fmt.Println("globex uses acme's key:", send("/orders/o-1/pay", "globex", k.Key).Code)
	fmt.Println("acme's key on another order:", send("/orders/o-2/pay", "acme", k.Key).Code)
	fmt.Println("a key of the client's own:", send("/orders/o-1/pay", "acme", "my-key").Code)
	// Output:
	// issued for: POST /orders/o-1/pay
	// acme pays: 201
	// acme retries: true
	// globex uses acme's key: 403
	// acme's key on another order: 422
	// a key of the client's own: 400
}
