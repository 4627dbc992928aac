// An HTTP program: a payment endpoint that runs once per Idempotency-Key,
// served on a test server and called twice with the same key.
package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"

	"github.com/dedup-go/dedup"
	deduphttp "github.com/dedup-go/dedup/middleware/http"
	"github.com/dedup-go/dedup/store/memstore"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run() error {
	s, err := memstore.New(nil)
	if err != nil {
		return err
	}
	idem, err := deduphttp.New(s, &deduphttp.Options{
		Config:    &dedup.Config{Namespace: "orders-api"},
		Principal: func(r *http.Request) string { return r.Header.Get("X-Tenant") },
	})
	if err != nil {
		return err
	}
	var charges atomic.Int32
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{id}/pay", idem.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "charge %d for %s", charges.Add(1), r.PathValue("id"))
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	var first string
	for i := range 2 {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/orders/o-1/pay", nil)
		if err != nil {
			return err
		}
		req.Header.Set(deduphttp.HeaderKey, "7f3c9a")
		req.Header.Set("X-Tenant", "tenant-1")
		resp, err := srv.Client().Do(req)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return err
		}
		got := fmt.Sprint(resp.StatusCode, " ", string(body))
		fmt.Println(got)
		if i == 0 {
			first = got
		} else if got != first {
			return fmt.Errorf("the retry got %q, not the first response %q replayed", got, first)
		}
	}
	return nil
}
