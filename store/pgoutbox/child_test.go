package pgoutbox_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupnats "github.com/dedup-go/dedup/adapters/nats"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/pgoutbox"
	"github.com/dedup-go/dedup/store/pgstore"
)

// The processes of TestEndToEnd are this test binary, started with
// childRoleEnv set: TestMain runs childMain instead of the tests.
const (
	childRoleEnv   = "PGOUTBOX_E2E_ROLE" // "consumer" or "relay"
	childDSNEnv    = "PGOUTBOX_E2E_DSN"
	childNATSEnv   = "PGOUTBOX_E2E_NATS"
	childPrefixEnv = "PGOUTBOX_E2E_PREFIX" // the subjects' prefix, the streams' suffix
	childMarker    = "PGOUTBOX-CHILD "
)

// e2eNames are the names TestEndToEnd and its processes share.
type e2eNames struct {
	prefix                        string
	inStream, outStream, dlStream string
	in, out, dlq                  string
}

func newE2ENames(prefix string) e2eNames {
	return e2eNames{
		prefix:   prefix,
		inStream: "PGOUTBOX_E2E_IN_" + prefix, outStream: "PGOUTBOX_E2E_OUT_" + prefix, dlStream: "PGOUTBOX_E2E_DLQ_" + prefix,
		in: "pgoutbox.e2e." + prefix + ".in", out: "pgoutbox.e2e." + prefix + ".out", dlq: "pgoutbox.e2e." + prefix + ".dlq",
	}
}

// e2eOrder is an incoming message of TestEndToEnd.
type e2eOrder struct {
	ID       string `json:"id"`
	Customer string `json:"customer"`
}

// e2eEvent is an outgoing message: what the order's handler announces.
type e2eEvent struct {
	Order    string `json:"order"`
	Customer string `json:"customer"`
	Event    string `json:"event"`
}

// The consumer's settings, shared by its restarts.
const (
	e2eNamespace = "e2e"
	e2eLease     = 2 * time.Second
	e2eConsumer  = "orders"
)

// childMain runs a process of TestEndToEnd until it is killed.
func childMain(role string) int {
	// Should the test that kills it die first, it does not outlive it long.
	time.AfterFunc(3*time.Minute, func() { os.Exit(3) })
	ctx := context.Background()
	n := newE2ENames(os.Getenv(childPrefixEnv))
	cfg, err := pgxpool.ParseConfig(os.Getenv(childDSNEnv))
	if err != nil {
		return fail(err)
	}
	cfg.MaxConns = 12
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fail(err)
	}
	nc, err := natsgo.Connect(os.Getenv(childNATSEnv), natsgo.MaxReconnects(-1))
	if err != nil {
		return fail(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fail(err)
	}
	ob, err := pgoutbox.New(ctx, pool, &pgoutbox.Options{Logger: quiet, Timeout: 2 * time.Second})
	if err != nil {
		return fail(err)
	}
	switch role {
	case "consumer":
		err = runConsumer(ctx, pool, js, ob, n)
	case "relay":
		err = runRelay(ctx, js, ob)
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		return fail(err)
	}
	fmt.Printf("%sready\n", childMarker)
	select {} // until killed
}

func fail(err error) int {
	fmt.Fprintf(os.Stderr, "pgoutbox e2e child: %v\n", err)
	return 2
}

// runConsumer starts the order consumer: for each order, in one
// transaction, it counts the order on its customer's row (locking it, so
// that one customer's transactions follow each other), writes the order,
// and two messages with the customer as ordering key; the record
// completes in the same transaction.
func runConsumer(ctx context.Context, pool *pgxpool.Pool, js jetstream.JetStream, ob *pgoutbox.Outbox, n e2eNames) error {
	s, err := pgstore.New(ctx, pool, &pgstore.Options{Timeout: 2 * time.Second, Logger: quiet})
	if err != nil {
		return err
	}
	h, err := pgstore.TxHandler(s, func(ctx context.Context, tx pgx.Tx, m *dedup.Message[e2eOrder]) (string, error) {
		o := m.Body
		if _, err := tx.Exec(ctx, `UPDATE customers SET orders = orders + 1 WHERE id = $1`, o.Customer); err != nil {
			return "", err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, customer) VALUES ($1, $2)`, o.ID, o.Customer); err != nil {
			return "", err
		}
		w, err := ob.Writer(ctx, tx)
		if err != nil {
			return "", err
		}
		for _, event := range []string{"created", "confirmed"} {
			body, _ := json.Marshal(e2eEvent{Order: o.ID, Customer: o.Customer, Event: event})
			if _, err := w.Add(ctx, pgoutbox.Message{Name: event, Destination: n.out + "." + event, OrderingKey: o.Customer, Body: body}); err != nil {
				return "", err
			}
		}
		return o.ID, nil
	}, nil)
	if err != nil {
		return err
	}
	rcv, err := dedup.NewReceiver(s, idstrategy.BodyField("id", func(o e2eOrder) string { return o.ID }), h, &dedup.Config{
		Namespace: e2eNamespace, Lease: e2eLease, MaxAttempts: 50, StoreRetryDelay: 200 * time.Millisecond,
		Backoff: dedup.BackoffFunc(func(int) time.Duration { return 100 * time.Millisecond }), Logger: quiet,
	})
	if err != nil {
		return err
	}
	cons, err := js.Consumer(ctx, n.inStream, e2eConsumer)
	if err != nil {
		return err
	}
	c, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{DeadLetterSubject: n.dlq, Concurrency: 8, Logger: quiet})
	if err != nil {
		return err
	}
	return c.Start(ctx)
}

// runRelay starts a relay.
func runRelay(ctx context.Context, js jetstream.JetStream, ob *pgoutbox.Outbox) error {
	pub, err := dedupnats.NewOutboxPublisher(js, nil)
	if err != nil {
		return err
	}
	r, err := pgoutbox.NewRelay(ob, pub, &pgoutbox.RelayOptions{Lease: 1500 * time.Millisecond, BatchSize: 64,
		PollInterval: 200 * time.Millisecond, MaxBackoff: time.Second, Logger: quiet})
	if err != nil {
		return err
	}
	return r.Start(ctx)
}

// child is a process of TestEndToEnd.
type child struct {
	role  string
	cmd   *exec.Cmd
	lines chan string
	wg    sync.WaitGroup
}

func startChild(t *testing.T, role, dsn, natsURL string, n e2eNames) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childRoleEnv+"="+role, childDSNEnv+"="+dsn, childNATSEnv+"="+natsURL, childPrefixEnv+"="+n.prefix)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &child{role: role, cmd: cmd, lines: make(chan string, 16)}
	c.wg.Go(func() {
		defer close(c.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), childMarker); ok {
				c.lines <- line
			}
		}
	})
	t.Cleanup(c.kill)
	// A closed channel gives "": the process ended.
	require.Equal(t, "ready", testenv.Recv(t, c.lines, "the "+role+" process to start"), "the %s process ended before it was ready", role)
	return c
}

// kill kills the process with SIGKILL and reaps it.
func (c *child) kill() {
	if c.cmd.ProcessState != nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	c.wg.Wait()
	_ = c.cmd.Wait()
}
