package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/pgstore"
	"github.com/dedup-go/dedup/store/redisstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// retention is how long the seeded records are kept.
const retention = time.Hour

// seedStore is a store the tests write records into, with the store's own
// Acquire, Complete and Release, so that the records are genuine.
type seedStore interface {
	store.Store
	store.Inspector
}

// backend is a store the commands are tested against: fresh gives a test
// a store of its own (a Redis prefix, a PostgreSQL table) and the flags
// that name it.
type backend struct {
	name  string
	fresh func(t *testing.T) (seedStore, []string)
	// nodes are a Cluster's node addresses; sentinel a Sentinel's.
	nodes    []string
	sentinel string
}

// redisURL is the shared Redis as a URL.
func redisURL(t testing.TB) string {
	addr := testenv.Redis.Addr(t)
	if strings.Contains(addr, "://") {
		return addr
	}
	return "redis://" + addr
}

// singleBackend is the shared Redis, a key prefix per test.
func singleBackend(t *testing.T) backend {
	url := redisURL(t)
	c := redistest.Client(t)
	return backend{name: "redis", fresh: func(t *testing.T) (seedStore, []string) {
		prefix := redistest.Prefix(t, c)
		return newRedisStore(t, c, prefix), []string{"--redis", url, "--prefix", prefix}
	}}
}

// clusterBackend is a 3-master Cluster of the test's own, named by the
// address of one node: the tool finds the others.
func clusterBackend(t *testing.T) backend {
	cc, servers := redistest.StartCluster(t)
	var nodes []string
	for _, s := range servers {
		nodes = append(nodes, s.Addr())
	}
	return backend{name: "cluster", nodes: nodes, fresh: func(t *testing.T) (seedStore, []string) {
		prefix := redistest.Prefix(t, cc)
		return newRedisStore(t, cc, prefix), []string{"--redis", "redis://" + nodes[0], "--prefix", prefix}
	}}
}

// sentinelBackend is a master and a Sentinel monitoring it, of the
// test's own, named by the Sentinel's address and the master's name.
func sentinelBackend(t *testing.T) backend {
	master := redistest.StartServer(t)
	sentinel := startSentinel(t, master.Addr())
	c := redis.NewClient(&redis.Options{Addr: master.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return backend{name: "sentinel", sentinel: sentinel, fresh: func(t *testing.T) (seedStore, []string) {
		prefix := redistest.Prefix(t, c)
		return newRedisStore(t, c, prefix), []string{"--redis", "redis://" + sentinel + "?master_name=" + sentinelMaster, "--prefix", prefix}
	}}
}

// postgresBackend is the shared PostgreSQL, a schema per test binary run
// and a table per test.
func postgresBackend(t *testing.T) backend {
	dsn := testenv.Postgres.Addr(t)
	pool := pgPool(t, dsn)
	schema := "dedupctl_test_" + randomHex()
	_, err := pool.Exec(t.Context(), "CREATE SCHEMA "+schema)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := pool.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
		require.NoError(t, err, "drop the test's schema")
	})
	return backend{name: "postgres", fresh: func(t *testing.T) (seedStore, []string) {
		table := schema + ".t" + randomHex()
		s, err := pgstore.New(t.Context(), pool, &pgstore.Options{Table: table, Migrate: true})
		require.NoError(t, err)
		return s, []string{"--postgres", dsn, "--table", table}
	}}
}

func pgPool(t testing.TB, dsn string) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

func newRedisStore(t testing.TB, c redis.UniversalClient, prefix string) *redisstore.Store {
	s, err := redisstore.New(t.Context(), c, &redisstore.Options{Prefix: prefix})
	require.NoError(t, err)
	return s
}

func randomHex() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// sentinelMaster is the name the test's Sentinel monitors its master by.
const sentinelMaster = "dedupmaster"

// startSentinel starts a redis-server in Sentinel mode on a free port,
// monitoring the master at addr, and returns its address once it names
// the master; it is killed when t ends.
func startSentinel(t *testing.T, master string) string {
	t.Helper()
	bin := testenv.Binary(t, "redis-server", "apt-get install redis-server")
	host, port, _ := strings.Cut(master, ":")
	sport := testenv.FreePort(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	require.NoError(t, os.WriteFile(conf, fmt.Appendf(nil,
		"port %d\nbind 127.0.0.1\ndir %s\nlogfile %s\nsentinel monitor %s %s %s 1\nsentinel down-after-milliseconds %s 5000\n",
		sport, dir, filepath.Join(dir, "sentinel.log"), sentinelMaster, host, port, sentinelMaster), 0o600))
	cmd := exec.Command(bin, conf, "--sentinel")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := "127.0.0.1:" + strconv.Itoa(sport)
	sc := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer sc.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		got, err := sc.GetMasterAddrByName(ctx, sentinelMaster).Result()
		cancel()
		if err == nil && len(got) == 2 && got[0]+":"+got[1] == master {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Sentinel on %s does not name its master within 15s: %v %v (log: %s)", addr, got, err, dir)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ran is what a command wrote and its exit code.
type ran struct {
	code     int
	out, err string
}

// runIn runs dedupctl with args and in as its stdin (interactive: a
// terminal, for confirmations), failing t if it does not return within
// testenv.WaitTimeout.
func runIn(t *testing.T, in string, interactive bool, args ...string) ran {
	t.Helper()
	return runWithin(t, testenv.WaitTimeout, in, interactive, args...)
}

// runWithin is runIn, failing t if the command does not return within
// bound.
func runWithin(t *testing.T, bound time.Duration, in string, interactive bool, args ...string) ran {
	t.Helper()
	var out, errb bytes.Buffer
	s := Streams{In: strings.NewReader(in), Out: &out, Err: &errb, Interactive: interactive}
	done := make(chan int, 1)
	go func() { done <- Run(t.Context(), args, s) }()
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case code := <-done:
		return ran{code: code, out: out.String(), err: errb.String()}
	case <-timer.C:
		t.Fatalf("dedupctl %q did not return within %v", args, bound)
		return ran{}
	}
}

// run runs dedupctl with args, stdin empty and not a terminal.
func run(t *testing.T, args ...string) ran {
	t.Helper()
	return runIn(t, "", false, args...)
}

// with returns flags followed by args.
func with(flags []string, args ...string) []string {
	return append(append([]string(nil), flags...), args...)
}

// lines decodes the JSON objects of out, one a line.
func lines[T any](t *testing.T, out string) []T {
	t.Helper()
	var vs []T
	dec := json.NewDecoder(strings.NewReader(out))
	for {
		var v T
		err := dec.Decode(&v)
		if err == io.EOF {
			return vs
		}
		require.NoError(t, err, "output: %s", out)
		vs = append(vs, v)
	}
}

// completed makes a completed record of key with result, after one
// failed attempt per error in failures, and returns the token that
// completed it.
func completed(t testing.TB, s seedStore, key string, result []byte, failures ...string) store.Token {
	t.Helper()
	failed(t, s, key, failures...)
	c := claim(t, s, key, time.Minute, "")
	require.NoError(t, s.Complete(t.Context(), store.CompleteRequest{Key: key, Token: c.Token, Result: result, Retention: retention}))
	return c.Token
}

// failed makes a failed record of key, one attempt per error, and returns
// the token of the last attempt.
func failed(t testing.TB, s seedStore, key string, errs ...string) store.Token {
	t.Helper()
	var last store.Token
	for _, e := range errs {
		c := claim(t, s, key, time.Minute, "")
		require.NoError(t, s.Release(t.Context(), store.ReleaseRequest{Key: key, Token: c.Token, Error: e, Retention: retention}))
		last = c.Token
	}
	return last
}

// claim acquires key for lease; fp is its fingerprint.
func claim(t testing.TB, s seedStore, key string, lease time.Duration, fp string) store.Claim {
	t.Helper()
	c, err := s.Acquire(t.Context(), store.AcquireRequest{Key: key, Lease: lease, Fingerprint: fp})
	require.NoError(t, err)
	require.True(t, c.Acquired, "claim %s", key)
	return c
}

// stuck makes a processing record of key whose lease has ended: a worker
// that died holding it.
func stuck(t testing.TB, s seedStore, key string) store.Record {
	t.Helper()
	c := claim(t, s, key, 20*time.Millisecond, "")
	// The store measures the lease by this machine's clock (Redis) or the
	// database's (PostgreSQL, here on the same machine).
	time.Sleep(time.Until(c.Record.LeaseUntil) + 20*time.Millisecond)
	return c.Record
}

// exists reports whether key has a record.
func exists(t testing.TB, s seedStore, key string) bool {
	t.Helper()
	_, err := s.Get(t.Context(), key)
	if err == nil {
		return true
	}
	require.ErrorIs(t, err, store.ErrNotFound)
	return false
}

// TestStores runs every command against each store: the shared Redis, a
// Cluster and a Sentinel of the test's own, and PostgreSQL.
func TestStores(t *testing.T) {
	for _, mk := range []struct {
		name string
		new  func(*testing.T) backend
	}{{"redis", singleBackend}, {"cluster", clusterBackend}, {"sentinel", sentinelBackend}, {"postgres", postgresBackend}} {
		t.Run(mk.name, func(t *testing.T) {
			t.Parallel()
			b := mk.new(t)
			for _, c := range []struct {
				name string
				test func(*testing.T, backend)
			}{
				{"get", testGet},
				{"getSteps", testGetSteps},
				{"scan", testScan},
				{"stats", testStats},
				{"forget", testForget},
				{"forgetBulk", testForgetBulk},
				{"urls", testRedisURLs},
			} {
				t.Run(c.name, func(t *testing.T) { c.test(t, b) })
			}
		})
	}
}
