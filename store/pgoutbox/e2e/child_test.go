package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/outbox"
	"github.com/dedup-go/dedup/store/pgoutbox"
	"github.com/dedup-go/dedup/store/pgoutbox/internal/relaytest"
	"github.com/dedup-go/dedup/store/pgstore"
)

// The processes of TestEndToEnd are this test binary, started with
// childRoleEnv set: TestMain runs childMain instead of the tests.
const (
	childRoleEnv   = "PGOUTBOX_E2E_ROLE" // "consumer" or "relay"
	childDSNEnv    = "PGOUTBOX_E2E_DSN"
	childBrokerEnv = "PGOUTBOX_E2E_BROKER" // the e2eBroker's kind
	childAddrEnv   = "PGOUTBOX_E2E_ADDR"   // the broker's address
	childPrefixEnv = "PGOUTBOX_E2E_PREFIX" // the part of the names that is the test's own
	childMarker    = "PGOUTBOX-CHILD "
)

// e2eSide is what the processes of an end-to-end test need of its
// broker: the incoming orders' consumer, the relays' publisher, and the
// destination of each outgoing message.
type e2eSide interface {
	// consume starts consuming the orders with rcv.
	consume(ctx context.Context, rcv *dedup.Receiver[*dedup.Message[e2eOrder], string]) error
	// publisher returns the relays' publisher.
	publisher(ctx context.Context) (outbox.Publisher, error)
	// destination is the Destination of the event messages.
	destination(event string) string
}

// childSide returns the side of the broker of kind, at addr, whose
// names have prefix.
func childSide(kind, addr, prefix string) (e2eSide, error) {
	switch kind {
	case "jetstream":
		return &jsE2E{addr: addr, n: newE2ENames(prefix)}, nil
	case "rabbitmq":
		return &amqpE2E{addr: addr, n: newAMQPNames(prefix)}, nil
	case "kafka":
		return &kafkaE2E{addr: addr, n: newKafkaNames(prefix)}, nil
	}
	return nil, fmt.Errorf("unknown broker %q", kind)
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

// childLog is the logger of a process of TestEndToEnd: what it logs at
// info level and above to its stderr, which the test prints should it
// fail (the Kafka consumer's reader logs its generations there). In the
// test's own process it is relaytest.Quiet.
var childLog = relaytest.Quiet

// childStates are what a process reports of itself when the test asks
// (SIGUSR1), besides its goroutines: its consumer's state, say.
var (
	childStatesMu sync.Mutex
	childStates   []func()
)

// reportState adds report to what the process reports when asked.
func reportState(report func()) {
	childStatesMu.Lock()
	defer childStatesMu.Unlock()
	childStates = append(childStates, report)
}

// childMain runs a process of TestEndToEnd until it is killed.
func childMain(role string) int {
	// Should the test that kills it die first, it does not outlive it long.
	time.AfterFunc(3*time.Minute, func() { os.Exit(3) })
	childLog = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	// Asked with SIGUSR1 (the test failed), the process reports its state
	// and goroutines on stderr, and says so on stdout.
	asked := make(chan os.Signal, 1)
	signal.Notify(asked, syscall.SIGUSR1)
	go func() {
		for range asked {
			childStatesMu.Lock()
			for _, report := range childStates {
				report()
			}
			childStatesMu.Unlock()
			_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 2)
			fmt.Printf("%sreported\n", childMarker)
		}
	}()
	ctx := context.Background()
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
	side, err := childSide(os.Getenv(childBrokerEnv), os.Getenv(childAddrEnv), os.Getenv(childPrefixEnv))
	if err != nil {
		return fail(err)
	}
	ob, err := pgoutbox.New(ctx, pool, &pgoutbox.Options{Logger: childLog, Timeout: 2 * time.Second})
	if err != nil {
		return fail(err)
	}
	switch role {
	case "consumer":
		err = runConsumer(ctx, pool, side, ob)
	case "relay":
		err = runRelay(ctx, side, ob)
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
func runConsumer(ctx context.Context, pool *pgxpool.Pool, side e2eSide, ob *pgoutbox.Outbox) error {
	s, err := pgstore.New(ctx, pool, &pgstore.Options{Timeout: 2 * time.Second, Logger: childLog})
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
			if _, err := w.Add(ctx, pgoutbox.Message{Name: event, Destination: side.destination(event), OrderingKey: o.Customer, Body: body}); err != nil {
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
		Backoff: dedup.BackoffFunc(func(int) time.Duration { return 100 * time.Millisecond }), Logger: childLog,
	})
	if err != nil {
		return err
	}
	return side.consume(ctx, rcv)
}

// runRelay starts a relay.
func runRelay(ctx context.Context, side e2eSide, ob *pgoutbox.Outbox) error {
	pub, err := side.publisher(ctx)
	if err != nil {
		return err
	}
	r, err := pgoutbox.NewRelay(ob, pub, &pgoutbox.RelayOptions{Lease: 1500 * time.Millisecond, BatchSize: 64,
		PollInterval: 200 * time.Millisecond, MaxBackoff: time.Second, Logger: childLog})
	if err != nil {
		return err
	}
	return r.Start(ctx)
}

// child is a process of TestEndToEnd.
type child struct {
	role    string
	cmd     *exec.Cmd
	lines   chan string
	wg      sync.WaitGroup
	stderr  tail
	started time.Time
	killed  time.Time // zero while it runs
	atEnd   bool      // it ran until the test ended
}

func startChild(t *testing.T, role, dsn string, b e2eBroker) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	kind, addr, prefix := b.child()
	cmd.Env = append(os.Environ(), childRoleEnv+"="+role, childDSNEnv+"="+dsn, childBrokerEnv+"="+kind, childAddrEnv+"="+addr, childPrefixEnv+"="+prefix)
	c := &child{role: role, cmd: cmd, lines: make(chan string, 16), started: time.Now()}
	cmd.Stderr = &c.stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	// Should the test fail, it prints what the process wrote to stderr
	// (after the kill below, which waits for all of it).
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s process %d (started %s, %s), its stderr:\n%s", role, cmd.Process.Pid,
				c.started.Format(time.TimeOnly), c.end(), c.stderr.String())
		}
	})
	c.wg.Go(func() {
		defer close(c.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), childMarker); ok {
				c.lines <- line
			}
		}
	})
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			c.atEnd = true
		}
		c.kill()
	})
	// A closed channel gives "": the process ended.
	require.Equal(t, "ready", testenv.Recv(t, c.lines, "the "+role+" process to start"), "the %s process ended before it was ready", role)
	return c
}

// kill kills the process with SIGKILL and reaps it.
func (c *child) kill() {
	if c.cmd.ProcessState != nil {
		return
	}
	c.killed = time.Now()
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	c.wg.Wait()
	_ = c.cmd.Wait()
}

// end says how the process ended.
func (c *child) end() string {
	if c.atEnd {
		return "running until the test ended"
	}
	return "killed " + c.killed.Format(time.TimeOnly)
}

// report asks the running process to write its state and goroutines to
// its stderr (SIGUSR1), and waits a while for it to have done so.
func (c *child) report() {
	if c.cmd.ProcessState != nil || !c.killed.IsZero() {
		return
	}
	if c.cmd.Process.Signal(syscall.SIGUSR1) != nil {
		return
	}
	timeout := time.After(10 * time.Second)
	for {
		select {
		case line, ok := <-c.lines:
			if !ok || line == "reported" {
				return
			}
		case <-timeout:
			return
		}
	}
}

// tail keeps the last tailSize bytes written to it.
type tail struct {
	mu      sync.Mutex
	buf     []byte
	dropped int
}

const tailSize = 256 << 10

func (w *tail) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if over := len(w.buf) - tailSize; over > 0 {
		w.dropped += over
		w.buf = append(w.buf[:0], w.buf[over:]...)
	}
	return len(p), nil
}

func (w *tail) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dropped > 0 {
		return fmt.Sprintf("[%d bytes before these]\n%s", w.dropped, w.buf)
	}
	return string(w.buf)
}
