package dedupkafka_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/dedup-go/dedup"
	dedupkafka "github.com/dedup-go/dedup/adapters/kafka"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/redisstore"
	"github.com/dedup-go/dedup/store/tieredstore"
)

// The test binary re-executed with childEnv set is a consumer process of
// TestScaleOut: it consumes the orders topic in a group over a Redis
// Cluster (tieredstore in front of redisstore), writes one line per effect
// to its effects file, and stops cleanly on SIGTERM. On SIGUSR1 its next
// handler announces itself ("S <id>") and hangs, so that the test can kill
// it in the middle of a handler, before the handler's effect.
const (
	childEnv         = "DEDUP_KAFKA_CHILD"
	childBrokers     = "DEDUP_KAFKA_CHILD_BROKERS"
	childTopic       = "DEDUP_KAFKA_CHILD_TOPIC"
	childGroup       = "DEDUP_KAFKA_CHILD_GROUP"
	childRedis       = "DEDUP_KAFKA_CHILD_REDIS"
	childRedisPrefix = "DEDUP_KAFKA_CHILD_PREFIX"
	childEffects     = "DEDUP_KAFKA_CHILD_EFFECTS"
)

func childMain() int {
	run := runChild
	if os.Getenv(childMode) == rebalanceMode {
		run = runRebalanceChild
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

// child is what a consumer process of the tests starts with: a logger, a
// context that ends at SIGTERM, SIGUSR1 to make a handler hang (until the
// test kills the process), and the effects file the test reads.
type child struct {
	log  *slog.Logger
	ctx  context.Context
	hang chan os.Signal
	out  *os.File
	mu   sync.Mutex
	stop context.CancelFunc
}

func startChild() (*child, error) {
	out, err := os.OpenFile(os.Getenv(childEffects), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	c := &child{log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})), out: out,
		hang: make(chan os.Signal, 1)}
	c.ctx, c.stop = signal.NotifyContext(context.Background(), syscall.SIGTERM)
	signal.Notify(c.hang, syscall.SIGUSR1)
	return c, nil
}

// line writes one line of the effects file, in one write: a kill never
// leaves half a line.
func (c *child) line(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, _ = c.out.WriteString(fmt.Sprintf(format, args...) + "\n")
}

func (c *child) close() {
	c.stop()
	_ = c.out.Close()
}

func runChild() error {
	ch, err := startChild()
	if err != nil {
		return err
	}
	defer ch.close()
	log, ctx, hang, line := ch.log, ch.ctx, ch.hang, ch.line

	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(os.Getenv(childRedis), ",")})
	defer cc.Close()
	remote, err := redisstore.New(ctx, cc, &redisstore.Options{Prefix: os.Getenv(childRedisPrefix)})
	if err != nil {
		return err
	}
	st, err := tieredstore.New(remote, nil)
	if err != nil {
		return err
	}
	handler := func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
		i, err := strconv.Atoi(strings.TrimPrefix(m.Body.ID, "o-"))
		if err != nil {
			return Receipt{}, dedup.Permanent(err)
		}
		select {
		case <-hang:
			line("S %s %d", m.Body.ID, time.Now().UnixNano())
			<-ctx.Done() // until the test kills the process
			return Receipt{}, ctx.Err()
		default:
		}
		held, _ := store.ClaimFromContext(ctx)
		switch {
		case isPermanent(i):
			return Receipt{}, dedup.Permanent(errors.New("card declined"))
		case failsOnce(i) && held.Attempt == 1:
			return Receipt{}, errors.New("payment service timed out")
		}
		line("E %s %d %d", m.Body.ID, os.Getpid(), time.Now().UnixNano())
		return Receipt{OrderID: m.Body.ID}, nil
	}
	cfg := fastConfig("billing")
	cfg.Logger = log
	rcv, err := dedup.NewReceiver(st, idstrategy.MessageHeader[Order](dedupkafka.HeaderMessageID), handler, cfg)
	if err != nil {
		return err
	}
	r := kafka.NewReader(readerConfig(strings.Split(os.Getenv(childBrokers), ","), os.Getenv(childGroup), os.Getenv(childTopic)))
	defer r.Close() // after the Consumer's Stop: leaves the group
	// One handler at a time, one message at a time: when the test kills the
	// process in the hanging handler, no other handler is between its
	// effect and its completion. (A kill there repeats that effect: the one
	// window a consumer cannot close without a transactional store. In a
	// batch the window is wider: the batch's completions are recorded
	// together after its last handler, so a kill mid-batch repeats the
	// effects of the handlers of the batch that already ran.)
	c, err := dedupkafka.NewConsumer(r, rcv, &dedupkafka.Options{DropPoison: true,
		Concurrency: 1, CommitInterval: 100 * time.Millisecond, MinRetryDelay: 10 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	if err := c.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-c.Stopped():
		return fmt.Errorf("consumer stopped: %w", c.Err())
	}
	sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return c.Stop(sctx)
}
