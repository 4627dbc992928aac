package deduphttp_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/dedup-go/dedup"
	deduphttp "github.com/dedup-go/dedup/middleware/http"
)

// benchPay is the handler of the benchmarks: what a small payment endpoint
// does besides its I/O (decode the order, encode the receipt).
var benchPay = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	var order struct {
		ID    string `json:"id"`
		Cents int    `json:"cents"`
	}
	if err := json.NewDecoder(r.Body).Decode(&order); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/receipts/"+order.ID)
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(struct {
		OrderID string `json:"order_id"`
		Cents   int    `json:"cents"`
		Status  string `json:"status"`
	}{order.ID, order.Cents, "paid"})
})

const benchBody = `{"id":"o-12345","cents":1250}`

func benchMiddleware(b *testing.B) http.Handler {
	m, err := deduphttp.New(newMemstore(b), &deduphttp.Options{Config: &dedup.Config{Namespace: "bench", Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		b.Fatal(err)
	}
	return m.Wrap(benchPay)
}

// BenchmarkServer: a bare handler behind a real loopback server, beside the
// same handler behind the middleware (memstore) for first requests (a new
// key each) and replays (one key), in the same run. The client's cost is
// in every line.
func BenchmarkServer(b *testing.B) {
	run := func(b *testing.B, h http.Handler, key func(i int) string) {
		srv := httptest.NewServer(h)
		defer srv.Close()
		tr := &http.Transport{MaxIdleConnsPerHost: 4}
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr}
		body := []byte(benchBody)
		send := func(i int) {
			r, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders/o-12345/pay", bytes.NewReader(body))
			if k := key(i); k != "" {
				r.Header.Set(deduphttp.HeaderKey, k)
			}
			resp, err := c.Do(r)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
		send(-1) // warm the connection, and the replayed key
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			send(i)
		}
	}
	b.Run("bare", func(b *testing.B) { run(b, benchPay, func(int) string { return "" }) })
	b.Run("first", func(b *testing.B) { run(b, benchMiddleware(b), func(i int) string { return "k-" + strconv.Itoa(i) }) })
	b.Run("replay", func(b *testing.B) { run(b, benchMiddleware(b), func(int) string { return "same" }) })
}

// BenchmarkInProcess: the same three, calling ServeHTTP with a
// ResponseRecorder, so that the middleware's own cost is not hidden by
// the network's.
func BenchmarkInProcess(b *testing.B) {
	run := func(b *testing.B, h http.Handler, key func(i int) string) {
		body := []byte(benchBody)
		rd := bytes.NewReader(body)
		r := httptest.NewRequest(http.MethodPost, "/orders/o-12345/pay", rd)
		send := func(i int) {
			rd.Reset(body)
			if k := key(i); k != "" {
				r.Header.Set(deduphttp.HeaderKey, k)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusCreated {
				b.Fatalf("status %d: %s", w.Code, w.Body)
			}
		}
		send(-1)
		key(b.N - 1) // keys are made before the clock starts
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			send(i)
		}
	}
	keys := make([]string, 0, 1<<16)
	key := func(i int) string {
		if i < 0 {
			return "warm"
		}
		for len(keys) <= i {
			keys = append(keys, "k-"+strconv.Itoa(len(keys)))
		}
		return keys[i]
	}
	b.Run("bare", func(b *testing.B) { run(b, benchPay, func(int) string { return "" }) })
	b.Run("first", func(b *testing.B) { run(b, benchMiddleware(b), key) })
	b.Run("replay", func(b *testing.B) { run(b, benchMiddleware(b), func(int) string { return "same" }) })
}
