package dedupfranz_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/dedup-go/dedup"
	dedupfranz "github.com/dedup-go/dedup/adapters/franz"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/store/redisstore"
	"github.com/dedup-go/dedup/store/tieredstore"
)

// The consumer processes of the stall measurements (stalls_test.go) are
// the test binary re-executed with stallsChild set, running
// TestStallsChild alone. The environment tells them where the cluster,
// the group and the shared Redis are, and where to write their effects.
const (
	stallsChild        = "DEDUP_FRANZ_STALLS_CHILD"
	stallsChildBrokers = "DEDUP_FRANZ_STALLS_BROKERS"
	stallsChildTopic   = "DEDUP_FRANZ_STALLS_TOPIC"
	stallsChildGroup   = "DEDUP_FRANZ_STALLS_GROUP"
	stallsChildRedis   = "DEDUP_FRANZ_STALLS_REDIS"
	stallsChildPrefix  = "DEDUP_FRANZ_STALLS_PREFIX"
	stallsChildEffects = "DEDUP_FRANZ_STALLS_EFFECTS"
	stallsChildID      = "DEDUP_FRANZ_STALLS_INSTANCE" // a kgo.InstanceID (static membership), or none
	stallsChildSession = "DEDUP_FRANZ_STALLS_SESSION"  // the group session timeout (a time.Duration), 1s by default
)

// stallsHandlerCost is what each handler of the measurements costs (as in
// dedupkafka's TestRebalanceStalls).
const stallsHandlerCost = 4 * time.Millisecond

// TestStallsChild is a consumer process of the stall measurements, and
// skips unless run as one. It consumes the topic in the group through a
// dedupfranz.Consumer over a tieredstore in front of the shared Redis,
// with the default lease (30s) and one handler at a time, and writes one
// line per event to its effects file:
//
//	E <id> <pid> <partition> <offset> <unix ns>  an effect
//	S <id> <unix ns>                              after SIGUSR1, a handler hangs (until the test kills the process)
//	R <event> <partitions> <unix ns>              a group callback (assigned, revoked, lost) that named partitions
//	T <processed> <duplicates> <in flight>        the receiver's Stats, once stopped cleanly on SIGTERM
func TestStallsChild(t *testing.T) {
	if os.Getenv(stallsChild) == "" {
		t.Skip("a consumer process of the stall measurements: run by them, not alone")
	}
	if err := runStallsChild(); err != nil {
		t.Fatal(err)
	}
}

func runStallsChild() error {
	out, err := os.OpenFile(os.Getenv(stallsChildEffects), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	var mu sync.Mutex
	// One write per line: a kill never leaves half a line.
	line := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = out.WriteString(fmt.Sprintf(format, args...) + "\n")
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	hang := make(chan os.Signal, 1)
	signal.Notify(hang, syscall.SIGUSR1)
	defer signal.Stop(hang)

	rc := redis.NewClient(&redis.Options{Addr: os.Getenv(stallsChildRedis)})
	defer rc.Close()
	remote, err := redisstore.New(ctx, rc, &redisstore.Options{Prefix: os.Getenv(stallsChildPrefix)})
	if err != nil {
		return err
	}
	st, err := tieredstore.New(remote, nil)
	if err != nil {
		return err
	}
	handler := func(ctx context.Context, m *dedup.Message[Order]) (Receipt, error) {
		select {
		case <-hang:
			line("S %s %d", m.Body.ID, time.Now().UnixNano())
			<-ctx.Done() // until the test kills the process
			return Receipt{}, ctx.Err()
		default:
		}
		t := time.NewTimer(stallsHandlerCost)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return Receipt{}, ctx.Err()
		}
		line("E %s %d %d %d %d", m.Body.ID, os.Getpid(), m.Partition, m.Offset, time.Now().UnixNano())
		return Receipt{OrderID: m.Body.ID}, nil
	}
	// The default lease: what is measured is what a rebalance and a crash
	// cost with it.
	rcv, err := dedup.NewReceiver(st, idstrategy.MessageHeader[Order](dedupfranz.HeaderMessageID), handler,
		&dedup.Config{Namespace: "billing", Logger: log})
	if err != nil {
		return err
	}
	session := time.Second
	if s := os.Getenv(stallsChildSession); s != "" {
		if session, err = time.ParseDuration(s); err != nil {
			return err
		}
	}
	kopts := clientOpts(strings.Split(os.Getenv(stallsChildBrokers), ","), kgo.SessionTimeout(session))
	if id := os.Getenv(stallsChildID); id != "" {
		kopts = append(kopts, kgo.InstanceID(id))
	}
	// One handler at a time (Concurrency 1, as dedupkafka's measurement):
	// when the test kills the process in the hanging handler, no other
	// handler is between its effect and its completion, so a kill repeats
	// no effect. The other options are the defaults.
	c, err := dedupfranz.NewConsumer(kopts, os.Getenv(stallsChildGroup), []string{os.Getenv(stallsChildTopic)}, rcv,
		&dedupfranz.Options{DropPoison: true, Concurrency: 1})
	if err != nil {
		return err
	}
	dedupfranz.OnRebalance(c, func(event string, parts map[string][]int32) {
		n := 0
		for _, ps := range parts {
			n += len(ps)
		}
		if n > 0 {
			line("R %s %d %d", event, n, time.Now().UnixNano())
		}
	})
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
	err = c.Stop(sctx)
	s := rcv.Stats()
	line("T %d %d %d", s.Processed, s.Duplicates, s.InFlight)
	return err
}
