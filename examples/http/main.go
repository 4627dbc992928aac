// Command http is an order API whose writes are protected by dedup's
// Idempotency-Key middleware: creating an order takes a key of the
// client's own, and paying for it takes a key that the server issued for
// that payment (signed, bound to the tenant and the order, expiring).
//
//	go -C examples/http run .           plays a scripted client against the API, prints what happened, exits
//	go -C examples/http run . -serve    serves on -listen (127.0.0.1:8080) until interrupted
//
// Records are kept in memory (memstore), or in Redis when $REDIS_ADDR is set
// (host:port), which is what several replicas of the API would share.
//
//	POST /orders                     {"item":"...","cents":N}, Idempotency-Key required -> 201 order
//	GET  /orders/{id}                the order
//	POST /orders/{id}/payment-key    a server-issued key for paying the order
//	POST /orders/{id}/pay            {"cents":N}, with the issued key -> 201 receipt
//
// The caller's tenant is the X-Tenant header, standing in for what your
// authentication puts in the request's context.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedup-go/dedup"
	deduphttp "github.com/dedup-go/dedup/middleware/http"
	"github.com/dedup-go/dedup/middleware/http/issuedkey"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/memstore"
	"github.com/dedup-go/dedup/store/redisstore"
)

func main() {
	serveFlag := flag.Bool("serve", false, "serve until interrupted instead of playing the scripted client")
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve on with -serve")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var err error
	if *serveFlag {
		err = serve(ctx, *listen, os.Getenv("REDIS_ADDR"))
	} else {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		err = demo(ctx, os.Getenv("REDIS_ADDR"), os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "http example:", err)
		os.Exit(1)
	}
}

// openStore returns memstore, or redisstore on redisAddr; close releases
// it.
func openStore(ctx context.Context, redisAddr string) (s store.Store, name string, close func(), err error) {
	if redisAddr == "" {
		m, err := memstore.New(nil)
		return m, "memstore", func() {}, err
	}
	c := redis.NewClient(&redis.Options{Addr: redisAddr})
	rs, err := redisstore.New(ctx, c, &redisstore.Options{Prefix: "dedup-example:"})
	if err != nil {
		_ = c.Close()
		return nil, "", nil, err
	}
	return rs, "redis at " + redisAddr, func() { _ = c.Close() }, nil
}

// serve runs the API on addr until ctx ends, then shuts down gracefully.
func serve(ctx context.Context, addr, redisAddr string) error {
	s, name, closeStore, err := openStore(ctx, redisAddr)
	if err != nil {
		return err
	}
	defer closeStore()
	api, err := newAPI(s, "orders", secret(), slog.Default())
	if err != nil {
		return err
	}
	srv := &http.Server{Addr: addr, Handler: api.routes(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	slog.InfoContext(ctx, "order API listening", "addr", addr, "store", name)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// secret is the HMAC secret of issued keys: $DEDUP_KEY_SECRET, else a
// random one (keys then die with the process: fine for a demo only, and
// every replica must share the same secret).
func secret() []byte {
	if s := os.Getenv("DEDUP_KEY_SECRET"); len(s) >= issuedkey.MinSecretSize {
		return []byte(s)
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return b
}

// Order is what POST /orders creates.
type Order struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	Item   string `json:"item"`
	Cents  int    `json:"cents"`
	Paid   bool   `json:"paid"`
}

// Receipt is what POST /orders/{id}/pay answers.
type Receipt struct {
	OrderID  string `json:"order_id"`
	ChargeID string `json:"charge_id"`
	Cents    int    `json:"cents"`
}

// api is the order service: its data, a payment gateway that fails now
// and then, and the two middlewares.
type api struct {
	mu      sync.Mutex
	orders  map[string]*Order
	charges map[string][]string // order id -> charge ids: a second charge is the bug dedup prevents
	nextID  int
	// gatewayDown makes the next charge fail with 503, as a gateway
	// timeout would.
	gatewayDown bool

	issuer   *issuedkey.Issuer
	orderKey *deduphttp.Middleware // client-chosen keys
	payKey   *deduphttp.Middleware // server-issued keys only
}

func tenant(r *http.Request) string { return r.Header.Get("X-Tenant") }

func newAPI(s store.Store, namespace string, secret []byte, logger *slog.Logger) (*api, error) {
	iss, err := issuedkey.NewIssuer(&issuedkey.Options{Keys: []issuedkey.Key{{ID: "k1", Secret: secret}}, TTL: time.Hour})
	if err != nil {
		return nil, err
	}
	a := &api{orders: map[string]*Order{}, charges: map[string][]string{}, issuer: iss}
	cfg := func(ns string) *dedup.Config { return &dedup.Config{Namespace: ns, Logger: logger} }
	if a.orderKey, err = deduphttp.New(s, &deduphttp.Options{Config: cfg(namespace), Principal: tenant, RequireKey: true}); err != nil {
		return nil, err
	}
	a.payKey, err = deduphttp.New(s, &deduphttp.Options{Config: cfg(namespace + "-pay"), Principal: tenant, RequireKey: true, Verifier: iss})
	return a, err
}

func (a *api) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /orders", a.orderKey.Wrap(http.HandlerFunc(a.createOrder)))
	mux.HandleFunc("GET /orders/{id}", a.getOrder)
	// The key is bound to the operation the payment request will have:
	// the middleware's default, method and path.
	mux.Handle("POST /orders/{id}/payment-key", deduphttp.IssueHandler(a.issuer, tenant,
		func(r *http.Request) string { return "POST /orders/" + r.PathValue("id") + "/pay" }))
	mux.Handle("POST /orders/{id}/pay", a.payKey.Wrap(http.HandlerFunc(a.pay)))
	return mux
}

func (a *api) createOrder(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Item  string `json:"item"`
		Cents int    `json:"cents"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Item == "" || in.Cents <= 0 {
		http.Error(w, "want {\"item\":...,\"cents\":...}", http.StatusBadRequest) // a 4xx is stored: the same request is as bad next time
		return
	}
	a.mu.Lock()
	a.nextID++
	o := &Order{ID: fmt.Sprintf("o-%d", a.nextID), Tenant: tenant(r), Item: in.Item, Cents: in.Cents}
	a.orders[o.ID] = o
	a.mu.Unlock()
	w.Header().Set("Location", "/orders/"+o.ID)
	writeJSON(w, http.StatusCreated, o)
}

func (a *api) getOrder(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	o, ok := a.orders[r.PathValue("id")]
	var cp Order
	if ok {
		cp = *o
	}
	a.mu.Unlock()
	if !ok || cp.Tenant != tenant(r) {
		http.NotFound(w, r)
		return
	}
	writeJSON(w, http.StatusOK, cp)
}

func (a *api) pay(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Cents int `json:"cents"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		http.Error(w, "want {\"cents\":...}", http.StatusBadRequest)
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	o, ok := a.orders[r.PathValue("id")]
	switch {
	case !ok || o.Tenant != tenant(r):
		http.NotFound(w, r)
		return
	case in.Cents != o.Cents:
		http.Error(w, "the amount does not match the order", http.StatusUnprocessableEntity)
		return
	case a.gatewayDown:
		// A 5xx releases the key: the client's retry charges.
		a.gatewayDown = false
		http.Error(w, "payment gateway unavailable", http.StatusServiceUnavailable)
		return
	}
	charge := fmt.Sprintf("ch_%03d", len(a.charges)+100)
	a.charges[o.ID] = append(a.charges[o.ID], charge)
	o.Paid = true
	writeJSON(w, http.StatusCreated, Receipt{OrderID: o.ID, ChargeID: charge, Cents: o.Cents})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// demo serves the API on a loopback port and plays a client against it,
// writing what happens to out.
func demo(ctx context.Context, redisAddr string, out io.Writer) error {
	s, name, closeStore, err := openStore(ctx, redisAddr)
	if err != nil {
		return err
	}
	defer closeStore()
	// A namespace of this run's own, so that a shared Redis does not
	// replay an earlier run's responses.
	ns := "orders-demo-" + rand.Text()[:8]
	api, err := newAPI(s, ns, secret(), slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: api.routes(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-served
	}()
	c := &client{base: "http://" + ln.Addr().String(), http: &http.Client{Timeout: 10 * time.Second}}
	defer c.http.CloseIdleConnections()
	fmt.Fprintf(out, "Order API on %s, records in %s.\n\n", ln.Addr(), name)

	fmt.Fprintln(out, "1. acme creates an order; the response is lost on the way, so the app sends the request again with its key.")
	create := `{"item":"espresso machine","cents":24900}`
	r1, err := c.do(ctx, "POST", "/orders", "acme", "create-7f3a", create)
	if err != nil {
		return err
	}
	r2, err := c.do(ctx, "POST", "/orders", "acme", "create-7f3a", create)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "   first:  %s\n   retry:  %s\n", r1, r2)
	var order Order
	if err := json.Unmarshal(r1.body, &order); err != nil {
		return fmt.Errorf("create order: %w (%s)", err, r1)
	}
	fmt.Fprintf(out, "   same key from globex (another tenant): %s\n", must(c.do(ctx, "POST", "/orders", "globex", "create-7f3a", create)))
	fmt.Fprintf(out, "   no key: %s\n\n", must(c.do(ctx, "POST", "/orders", "acme", "", create)))

	fmt.Fprintln(out, "2. acme asks for a payment key and pays; the gateway is down the first time.")
	kr := must(c.do(ctx, "POST", "/orders/"+order.ID+"/payment-key", "acme", "", ""))
	var issued deduphttp.IssuedKey
	if err := json.Unmarshal(kr.body, &issued); err != nil {
		return fmt.Errorf("payment key: %w (%s)", err, kr)
	}
	fmt.Fprintf(out, "   key issued for %q\n", issued.Operation)
	api.mu.Lock()
	api.gatewayDown = true
	api.mu.Unlock()
	pay := fmt.Sprintf(`{"cents":%d}`, order.Cents)
	payPath := "/orders/" + order.ID + "/pay"
	for _, what := range []string{"pay:    ", "retry:  ", "retry:  "} {
		fmt.Fprintf(out, "   %s%s\n", what, must(c.do(ctx, "POST", payPath, "acme", issued.Key, pay)))
	}
	fmt.Fprintln(out)

	fmt.Fprintln(out, "3. Keys the server did not issue for this payment are refused.")
	fmt.Fprintf(out, "   globex with acme's key:   %s\n", must(c.do(ctx, "POST", payPath, "globex", issued.Key, pay)))
	fmt.Fprintf(out, "   a key made up by the app: %s\n", must(c.do(ctx, "POST", payPath, "acme", "pay-"+order.ID, pay)))
	fmt.Fprintf(out, "   the key with another body: %s\n\n", must(c.do(ctx, "POST", payPath, "acme", issued.Key, `{"cents":1}`)))

	fmt.Fprintln(out, "4. A second order, paid by 20 concurrent retries of one request (a gateway replaying it).")
	o2 := must(c.do(ctx, "POST", "/orders", "acme", "create-91bc", `{"item":"grinder","cents":8900}`))
	var order2 Order
	if err := json.Unmarshal(o2.body, &order2); err != nil {
		return fmt.Errorf("create order: %w (%s)", err, o2)
	}
	var k2 deduphttp.IssuedKey
	if err := json.Unmarshal(must(c.do(ctx, "POST", "/orders/"+order2.ID+"/payment-key", "acme", "", "")).body, &k2); err != nil {
		return err
	}
	statuses := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			r, err := c.do(ctx, "POST", "/orders/"+order2.ID+"/pay", "acme", k2.Key, `{"cents":8900}`)
			what := "error: " + fmt.Sprint(err)
			if err == nil {
				what = fmt.Sprint(r.status)
				if r.replayed {
					what += " (replayed)"
				}
			}
			mu.Lock()
			statuses[what]++
			mu.Unlock()
		})
	}
	wg.Wait()
	var seen []string
	for k, n := range statuses {
		seen = append(seen, fmt.Sprintf("%s x%d", k, n))
	}
	sort.Strings(seen)
	fmt.Fprintf(out, "   answers: %s\n\n", strings.Join(seen, ", "))

	api.mu.Lock()
	defer api.mu.Unlock()
	// acme's two orders and globex's one: acme's retried create made none.
	once := len(api.orders) == 3
	fmt.Fprintf(out, "Orders created: %d (acme 2, globex 1)\n", len(api.orders))
	for _, id := range []string{order.ID, order2.ID} {
		fmt.Fprintf(out, "%s charged %d time(s): %v\n", id, len(api.charges[id]), api.charges[id])
		once = once && len(api.charges[id]) == 1
	}
	fmt.Fprintf(out, "Every order created once and charged once: %v\n", once)
	if !once {
		return errors.New("an order was created or charged twice")
	}
	return nil
}

type client struct {
	base string
	http *http.Client
}

// result is one answer, as the demo prints it.
type result struct {
	status   int
	replayed bool
	body     []byte
}

func (r result) String() string {
	s := fmt.Sprint(r.status)
	if r.replayed {
		s += " (replayed)"
	}
	return s + " " + strings.TrimSpace(string(r.body))
}

func (c *client) do(ctx context.Context, method, path, tenant, key, body string) (result, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewBufferString(body))
	if err != nil {
		return result{}, err
	}
	req.Header.Set("X-Tenant", tenant)
	if key != "" {
		req.Header.Set(deduphttp.HeaderKey, key)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return result{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return result{status: resp.StatusCode, replayed: resp.Header.Get(deduphttp.HeaderReplayed) == "true", body: b}, err
}

// must turns a failed request into a result that says so, so that the
// report shows it.
func must(r result, err error) result {
	if err != nil {
		return result{body: []byte("request failed: " + err.Error())}
	}
	return r
}
