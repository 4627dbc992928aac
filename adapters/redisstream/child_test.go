package dedupredisstream_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedup-go/dedup"
	dedupredisstream "github.com/dedup-go/dedup/adapters/redisstream"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/store/redisstore"
)

// The test binary re-executed with childEnv set is a consumer process of
// TestFaultKilledConsumers: it consumes the stream in the group over
// redisstore (both on the test's own redis-server), one entry at a time,
// writes one line per effect ("E <id> <unix ns>") and per trimmed entry
// reported ("T <entry id>") to its effects file, and stops on SIGTERM. On
// SIGUSR1 its next handler announces itself ("S <id>") and hangs, so that
// the test kills it inside a handler, before the effect.
const (
	childEnv     = "DEDUP_REDISSTREAM_CHILD"
	childRedis   = "DEDUP_REDISSTREAM_CHILD_REDIS"
	childStream  = "DEDUP_REDISSTREAM_CHILD_STREAM"
	childName    = "DEDUP_REDISSTREAM_CHILD_NAME"
	childEffects = "DEDUP_REDISSTREAM_CHILD_EFFECTS"
	childMarker  = "CHILD "
)

func childMain() int {
	if err := runChild(); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

func runChild() error {
	out, err := os.OpenFile(os.Getenv(childEffects), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	var mu sync.Mutex
	line := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = out.WriteString(fmt.Sprintf(format, args...) + "\n")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	hang := make(chan os.Signal, 1)
	signal.Notify(hang, syscall.SIGUSR1)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

	client := redis.NewClient(&redis.Options{Addr: os.Getenv(childRedis)})
	defer client.Close()
	st, err := redisstore.New(ctx, client, &redisstore.Options{Prefix: "records:"})
	if err != nil {
		return err
	}
	handler := func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
		select {
		case <-hang:
			fmt.Printf("%sS %s\n", childMarker, m.Body.ID)
			<-ctx.Done() // until the test kills the process
			return Receipt{}, ctx.Err()
		default:
		}
		line("E %s %d", m.Body.ID, time.Now().UnixNano())
		return Receipt{OrderID: m.Body.ID}, nil
	}
	cfg := faultConfig()
	cfg.Logger = log
	cfg.Observer = delivery.ObserverFunc(func(ctx context.Context, e delivery.Event) {
		if errors.Is(e.Err, dedupredisstream.ErrTrimmed) {
			id, _ := e.Header.Get(delivery.HeaderOffset)
			line("T %s", id)
		}
	})
	rcv, err := dedup.NewReceiver(st, idstrategy.MessageID[Order](), handler, cfg)
	if err != nil {
		return err
	}
	c, err := dedupredisstream.NewConsumer(client, os.Getenv(childStream), "billing", rcv, &dedupredisstream.Options{
		Consumer: os.Getenv(childName), DeadLetterStream: os.Getenv(childStream) + ".dlq",
		Concurrency: 1, Batch: 4, Block: 100 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	if err := c.Start(context.Background()); err != nil {
		return err
	}
	fmt.Printf("%sstarted\n", childMarker)
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Stop(sctx)
}

// faultConfig is the receivers' configuration of the fault tests: a 1s
// lease (the claim idle time), fail-closed.
func faultConfig() *dedup.Config {
	return &dedup.Config{Namespace: "billing", Lease: time.Second, MaxAttempts: 1000, StoreRetryDelay: 100 * time.Millisecond,
		Backoff: dedup.BackoffFunc(func(int) time.Duration { return 50 * time.Millisecond })}
}

// effects reads the effects files: effect lines by message id, effect
// times, and the trimmed entry ids reported.
func readEffects(files []string) (counts map[string]int, at map[string]time.Time, trimmed map[string]bool) {
	counts, at, trimmed = map[string]int{}, map[string]time.Time{}, map[string]bool{}
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for l := range strings.SplitSeq(string(b), "\n") {
			var id string
			var ns int64
			switch {
			case strings.HasPrefix(l, "E "):
				if _, err := fmt.Sscanf(l, "E %s %d", &id, &ns); err == nil {
					counts[id]++
					at[id] = time.Unix(0, ns)
				}
			case strings.HasPrefix(l, "T "):
				trimmed[strings.TrimPrefix(l, "T ")] = true
			}
		}
	}
	return counts, at, trimmed
}
