package redrive_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/cmd/dedupctl/internal/redrive"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/pgstore"
	"github.com/dedup-go/dedup/store/redisstore"
)

// Order is the test message; its id is the key.
type Order struct {
	ID    string `json:"id,omitempty"`
	Cents int    `json:"cents"`
	Pad   string `json:"pad,omitempty"`
}

func orderID(i int) string { return fmt.Sprintf("o-%05d", i) }

func orderJSON(t testing.TB, o Order) []byte {
	t.Helper()
	b, err := json.Marshal(o)
	require.NoError(t, err)
	return b
}

func orderIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = orderID(i)
	}
	return ids
}

// effects counts the fixed handler's effects per order id.
type effects struct {
	mu     sync.Mutex
	counts map[string]int
	total  atomic.Int64
}

func newEffects() *effects { return &effects{counts: map[string]int{}} }

func (e *effects) add(id string) {
	e.mu.Lock()
	e.counts[id]++
	e.mu.Unlock()
	e.total.Add(1)
}

func (e *effects) snapshot() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]int, len(e.counts))
	for k, v := range e.counts {
		out[k] = v
	}
	return out
}

// requireExactlyOnce checks that every id in want had its effect exactly
// once, and nothing else had one.
func requireExactlyOnce(t testing.TB, e *effects, want []string) {
	t.Helper()
	got := e.snapshot()
	var missing, doubled []string
	for _, id := range want {
		switch got[id] {
		case 1:
		case 0:
			missing = append(missing, id)
		default:
			doubled = append(doubled, id)
		}
	}
	sort.Strings(missing)
	sort.Strings(doubled)
	require.Empty(t, missing, "orders never handled (lost)")
	require.Empty(t, doubled, "orders handled more than once")
	require.Len(t, got, len(want), "effects of orders never published")
}

// recordStore is a store the receivers and the tool share.
type recordStore interface {
	store.Store
	store.Inspector
}

// testStore is a store of the test's own, and the flags that name it to
// the tool.
type testStore struct {
	recordStore
	flags []string
}

// newStore is a redisstore on the shared Redis under a prefix of the
// test's own.
func newStore(t testing.TB) testStore {
	t.Helper()
	c := redistest.Client(t)
	prefix := redistest.Prefix(t, c)
	s, err := redisstore.New(t.Context(), c, &redisstore.Options{Prefix: prefix})
	require.NoError(t, err)
	addr := testenv.Redis.Addr(t)
	if !strings.Contains(addr, "://") {
		addr = "redis://" + addr
	}
	return testStore{recordStore: s, flags: []string{"--redis", addr, "--prefix", prefix}}
}

// newPGStore is a pgstore on the shared PostgreSQL, in a table of the
// test's own (dropped at cleanup).
func newPGStore(t testing.TB) testStore {
	t.Helper()
	dsn := testenv.Postgres.Addr(t)
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	table := "dedupctl_redrive_" + strings.ToLower(suffix())
	s, err := pgstore.New(t.Context(), pool, &pgstore.Options{Table: table, Migrate: true})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP TABLE IF EXISTS "+table); err != nil {
			t.Logf("drop table %s: %v", table, err)
		}
	})
	return testStore{recordStore: s, flags: []string{"--postgres", dsn, "--table", table}}
}

// record returns the record of key, or a zero one with found false.
func (s testStore) record(t testing.TB, key string) (store.Record, bool) {
	t.Helper()
	rec, err := s.Get(t.Context(), key)
	if errors.Is(err, store.ErrNotFound) {
		return rec, false
	}
	require.NoError(t, err)
	return rec, true
}

// receiverConfig: one attempt, so that a failure is dead-lettered at once
// as attempts-exhausted and its failed record must be forgotten before a
// copy can run; quiet logs.
func receiverConfig(ns string) *dedup.Config {
	return &dedup.Config{
		Namespace:       ns,
		MaxAttempts:     1,
		Lease:           5 * time.Second,
		Backoff:         dedup.BackoffFunc(func(int) time.Duration { return 50 * time.Millisecond }),
		StoreRetryDelay: 200 * time.Millisecond,
		Logger:          slog.New(slog.DiscardHandler),
	}
}

var orderKey = idstrategy.BodyField("id", func(o Order) string { return o.ID })

// errBug is the broken handler's failure.
var errBug = errors.New("a bug in the handler")

// brokenReceiver fails every order: the adapter dead-letters them.
func brokenReceiver(t testing.TB, st store.Store, ns string) *dedup.Receiver[*dedup.Message[Order], string] {
	t.Helper()
	rcv, err := dedup.NewReceiver(st, orderKey, func(ctx context.Context, m *dedup.Message[Order]) (string, error) {
		return "", errBug
	}, receiverConfig(ns))
	require.NoError(t, err)
	return rcv
}

// fixedReceiver counts each order's effect.
func fixedReceiver(t testing.TB, st store.Store, ns string, e *effects) *dedup.Receiver[*dedup.Message[Order], string] {
	t.Helper()
	rcv, err := dedup.NewReceiver(st, orderKey, func(ctx context.Context, m *dedup.Message[Order]) (string, error) {
		e.add(m.Body.ID)
		return "charged " + m.Body.ID, nil
	}, receiverConfig(ns))
	require.NoError(t, err)
	return rcv
}

// row is a line of the tool's --output json: a dead letter's, or the
// summary.
type row struct {
	ID        string    `json:"id"`
	MessageID string    `json:"message_id"`
	Key       string    `json:"key"`
	Reason    string    `json:"reason"`
	To        string    `json:"to"`
	Time      time.Time `json:"time"`
	Action    string    `json:"action"`
	Why       string    `json:"why"`
	Detail    string    `json:"detail"`
	Summary   *summary  `json:"summary"`
}

type summary struct {
	Read     int            `json:"read"`
	Filtered int            `json:"filtered"`
	Matched  int            `json:"matched"`
	Actions  map[string]int `json:"actions"`
	Skips    map[string]int `json:"skips"`
}

// result is what a run of the tool printed, and its exit code.
type result struct {
	rows    []row
	summary summary
	stdout  string
	stderr  string
	code    int
}

// byKey returns the rows by key (the last one of a key).
func (r result) byKey() map[string]row {
	out := map[string]row{}
	for _, rw := range r.rows {
		out[rw.Key] = rw
	}
	return out
}

// actions counts the rows by action.
func (r result) actions() map[string]int {
	out := map[string]int{}
	for _, rw := range r.rows {
		out[rw.Action]++
	}
	return out
}

// runTool runs dedupctl with args, --output json, and returns what it
// printed. It fails the test if the tool runs past a minute.
func runTool(t testing.TB, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, dedupctl, append([]string{"--output", "json"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "dedupctl %v did not end within a minute; stderr: %s", args, stderr.String())
	res := result{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		res.code = ee.ExitCode()
	default:
		require.NoError(t, err)
	}
	res.rows, res.summary = parseRows(t, stdout.Bytes())
	return res
}

func parseRows(t testing.TB, out []byte) ([]row, summary) {
	t.Helper()
	var rows []row
	var sum summary
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rw row
		require.NoError(t, json.Unmarshal(sc.Bytes(), &rw), "line %q", sc.Text())
		if rw.Summary != nil {
			sum = *rw.Summary
			continue
		}
		rows = append(rows, rw)
	}
	require.NoError(t, sc.Err())
	return rows, sum
}

// crashRun runs dedupctl with args, --output json, and SIGKILLs it once it
// reported killAt dead letters republished. It returns the rows it read
// before the kill.
func crashRun(t testing.TB, killAt int, args ...string) []row {
	t.Helper()
	cmd := exec.Command(dedupctl, append([]string{"--output", "json"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	waited := make(chan error, 1)
	var rows []row
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		republished := 0
		for sc.Scan() {
			var rw row
			if json.Unmarshal(sc.Bytes(), &rw) != nil || rw.Summary != nil {
				continue
			}
			rows = append(rows, rw)
			if rw.Action == "republished" {
				if republished++; republished == killAt {
					_ = cmd.Process.Signal(syscall.SIGKILL)
				}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() {
		<-read
		waited <- cmd.Wait()
	}()
	select {
	case err := <-waited:
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "dedupctl ended by itself before the kill; stderr: %s", stderr.String())
		require.Equal(t, "signal: killed", ee.Error(), "stderr: %s", stderr.String())
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		<-waited
		t.Fatalf("dedupctl did not reach %d republished dead letters within a minute; stderr: %s", killAt, stderr.String())
	}
	return rows
}

// eventually polls cond until it holds, failing t after within.
func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// errCrash stands for a crash of the tool.
var errCrash = errors.New("the tool crashed here")

// removeCrashes is a Source whose Remove fails: a run over it stops right
// after its first copy was confirmed, with the letter still there, as a
// crash at that point would leave it.
type removeCrashes struct{ redrive.Source }

func (removeCrashes) Remove(context.Context, *redrive.Letter) error { return errCrash }

// crashAfterConfirm runs the engine over src until the first copy was
// confirmed, then stops as a crash would, before the letter is removed.
func crashAfterConfirm(t testing.TB, src redrive.Source, st testStore) {
	t.Helper()
	var outs []redrive.Outcome
	_, err := redrive.Run(t.Context(), removeCrashes{src}, redrive.Options{Store: st}, func(o redrive.Outcome) error {
		outs = append(outs, o)
		return nil
	})
	require.ErrorIs(t, err, errCrash)
	require.Empty(t, outs, "nothing reported: the first letter's removal failed")
	require.NoError(t, src.Close(t.Context()))
}
