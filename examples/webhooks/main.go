// Command webhooks is a service's webhook endpoint, deduplicated by dedup's
// HTTP middleware over Redis: a billing platform delivers Standard Webhooks
// (the webhook-id, webhook-timestamp and webhook-signature headers, as Svix
// sends them) and a GitHub hook delivers issues events (X-GitHub-Delivery,
// X-Hub-Signature-256). Each delivery is verified, then deduplicated by its
// event id, then handled; an event's effect happens once, however often
// and however concurrently the sender delivers it.
//
//	go -C examples/webhooks run .           two replicas on loopback and senders that replay every event; prints what happened
//	go -C examples/webhooks run . -serve    one replica on -listen (127.0.0.1:8080) until interrupted
//
// Records are kept in Redis at $REDIS_ADDR (127.0.0.1:6379), which every
// replica shares. The signing secrets are $BILLING_WEBHOOK_SECRET
// (whsec_...) and $GITHUB_WEBHOOK_SECRET, or random ones printed at start.
//
//	POST /webhooks/billing   Standard Webhooks: invoice.paid credits an account; other types are acknowledged
//	POST /webhooks/github    GitHub: an issue opened is queued for triage; other events are acknowledged
package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedup-go/dedup/store/redisstore"
)

func main() {
	serveFlag := flag.Bool("serve", false, "serve until interrupted instead of playing the senders")
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve on with -serve")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	redisAddr := os.Getenv("REDIS_ADDR")
	if redisAddr == "" {
		redisAddr = "127.0.0.1:6379"
	}
	var err error
	if *serveFlag {
		err = serve(ctx, *listen, redisAddr)
	} else {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		_, err = demo(ctx, redisAddr, "dedup-example-webhooks:"+randomHex(4)+":", os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "webhooks example:", err)
		os.Exit(1)
	}
}

// replicas runs n replicas of the endpoint on loopback, over one Redis
// store under prefix; stop shuts them down and deletes the prefix's keys.
func replicas(ctx context.Context, redisAddr, prefix string, n int, secrets Secrets, l *ledger, g *gates, logger *slog.Logger) (urls []string, stop func(), err error) {
	c := redis.NewClient(&redis.Options{Addr: redisAddr})
	s, err := redisstore.New(ctx, c, &redisstore.Options{Prefix: prefix})
	if err != nil {
		_ = c.Close()
		return nil, nil, fmt.Errorf("redis at %s: %w", redisAddr, err)
	}
	var servers []*http.Server
	stop = func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, srv := range servers {
			_ = srv.Shutdown(sctx)
		}
		deletePrefix(sctx, c, prefix)
		_ = c.Close()
	}
	for range n {
		rc, err := newReceiver(s, "webhooks", secrets, l, logger)
		if err != nil {
			stop()
			return nil, nil, err
		}
		rc.hold = g.hold
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			stop()
			return nil, nil, err
		}
		srv := &http.Server{Handler: rc.routes(), ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, srv)
		go func() { _ = srv.Serve(ln) }()
		urls = append(urls, "http://"+ln.Addr().String())
	}
	return urls, stop, nil
}

// demo runs two replicas and plays the senders against them, writing the
// report to out.
func demo(ctx context.Context, redisAddr, prefix string, out io.Writer) (*outcome, error) {
	secrets := Secrets{Billing: "whsec_" + base64.StdEncoding.EncodeToString(randomBytes(32)), GitHub: randomHex(20)}
	l, g := newLedger(), &gates{}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	urls, stop, err := replicas(ctx, redisAddr, prefix, 2, secrets, l, g, logger)
	if err != nil {
		return nil, err
	}
	defer stop()
	defer g.releaseAll() // no handler left waiting when the replicas stop
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	fmt.Fprintf(out, "Two replicas over Redis at %s: %v\n", redisAddr, urls)
	return play(ctx, urls, standardSender(client, secrets.Billing, time.Now), gitHubSender(client, secrets.GitHub), g, l, out)
}

// serve runs one replica on addr until ctx ends.
func serve(ctx context.Context, addr, redisAddr string) error {
	secrets := Secrets{Billing: os.Getenv("BILLING_WEBHOOK_SECRET"), GitHub: os.Getenv("GITHUB_WEBHOOK_SECRET")}
	if secrets.Billing == "" {
		secrets.Billing = "whsec_" + base64.StdEncoding.EncodeToString(randomBytes(32))
		slog.InfoContext(ctx, "random billing secret", "BILLING_WEBHOOK_SECRET", secrets.Billing)
	}
	if secrets.GitHub == "" {
		secrets.GitHub = randomHex(20)
		slog.InfoContext(ctx, "random GitHub secret", "GITHUB_WEBHOOK_SECRET", secrets.GitHub)
	}
	c := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer c.Close()
	s, err := redisstore.New(ctx, c, &redisstore.Options{Prefix: "dedup-example-webhooks:"})
	if err != nil {
		return fmt.Errorf("redis at %s: %w", redisAddr, err)
	}
	l := newLedger()
	rc, err := newReceiver(s, "webhooks", secrets, l, slog.Default())
	if err != nil {
		return err
	}
	srv := &http.Server{Addr: addr, Handler: rc.routes(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	slog.InfoContext(ctx, "webhook endpoint listening", "addr", addr, "redis", redisAddr)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	for _, id := range l.events() {
		slog.InfoContext(ctx, "event handled", "id", id, "effects", l.count(id))
	}
	return nil
}

// deletePrefix removes the demo's records.
func deletePrefix(ctx context.Context, c *redis.Client, prefix string) {
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, prefix+"*", 1000).Result()
		if err != nil {
			return
		}
		if len(keys) > 0 {
			c.Del(ctx, keys...)
		}
		if cursor = next; cursor == 0 {
			return
		}
	}
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}
