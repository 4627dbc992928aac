package deduphttp_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/dedup-go/dedup"
	deduphttp "github.com/dedup-go/dedup/middleware/http"
	"github.com/dedup-go/dedup/store/memstore"
)

// A support request: tenant acme's payment with Idempotency-Key pay-7 must
// be run again. RecordID names its record, found and forgotten in the
// store as dedupctl does it: dedupctl get --namespace payments-http
// --principal acme --idempotency-key pay-7.
func ExampleRecordID() {
	s, err := memstore.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	idem, err := deduphttp.New(s, &deduphttp.Options{
		Config:    &dedup.Config{Namespace: "payments-http"},
		Principal: func(r *http.Request) string { return r.Header.Get("X-Tenant") },
	})
	if err != nil {
		log.Fatal(err)
	}
	pay := idem.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) }))
	r := httptest.NewRequest(http.MethodPost, "/pay", nil)
	r.Header.Set("X-Tenant", "acme")
	r.Header.Set("Idempotency-Key", "pay-7")
	pay.ServeHTTP(httptest.NewRecorder(), r)

	key := "payments-http:" + deduphttp.RecordID("acme", "", "pay-7", 0)
	fmt.Println(key)
	rec, err := s.Get(context.Background(), key)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(rec.State)
	// Output:
	// payments-http:4:acme0:pay-7
	// completed
}
