package cli

import (
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/pgstore"
)

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	return "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
}

// blackhole returns the address of a listener that accepts connections
// and never answers on them, as a server behind a dead network path or a
// frozen process would.
func blackhole(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// TestUnreachableStore: a store that refuses connections or never answers
// fails every command within --timeout, naming its address. Each run is
// bounded (at 5s, for a --timeout of 300ms): a command that waited on the
// clients' own defaults instead would not return in time.
func TestUnreachableStore(t *testing.T) {
	t.Parallel()
	for _, dead := range []struct {
		name string
		addr func(*testing.T) string
	}{{"closed", closedPort}, {"blackhole", blackhole}} {
		t.Run(dead.name, func(t *testing.T) {
			t.Parallel()
			addr := dead.addr(t)
			for _, store := range [][]string{
				{"--redis", "redis://" + addr},
				{"--redis", "redis://" + addr, "--redis-mode", "single"},
				{"--redis", "redis://" + addr, "--redis-mode", "cluster"},
				{"--redis", "redis://" + addr + "?master_name=m"},
				{"--postgres", "postgres://postgres@" + addr + "/test?sslmode=disable"},
			} {
				for _, cmd := range [][]string{{"get", "a:1"}, {"scan"}, {"stats"}, {"forget", "a:1"}} {
					args := with(store, append([]string{"--timeout", "300ms"}, cmd...)...)
					// Bounded far above --timeout, and far below what the
					// clients' own defaults (a 3s read, retried) would take.
					r := runWithin(t, 5*time.Second, "", false, args...)
					assert.Equal(t, ExitError, r.code, "%q: %s", args, r.err)
					assert.Contains(t, r.err, addr, "%q names the address", args)
				}
			}
		})
	}
}

// TestBadInput: empty and malformed keys and flags are usage errors (exit
// 2) before any store is asked; huge keys are read on Redis (not found)
// and refused clearly on PostgreSQL, whose keys are bounded, with a
// message that does not repeat the key whole.
func TestBadInput(t *testing.T) {
	t.Parallel()
	url := redisURL(t)
	c := redistest.Client(t)
	prefix := redistest.Prefix(t, c)
	s := newRedisStore(t, c, prefix)
	flags := []string{"--redis", url, "--prefix", prefix}

	for _, args := range [][]string{
		{"get"},
		{"get", ""},
		{"get", "a:1", ""},
		{"get", "ns:"},
		{"get", ":id"},
		{"get", "id"}, // no namespace
		{"--namespace", "a:b", "get", "id"},
		{"-o", "yaml", "get", "a:1"},
		{"--timeout", "0s", "get", "a:1"},
		{"--redis-mode", "fancy", "get", "a:1"},
		{"--bogus", "get", "a:1"},
		{"get", "--bogus", "a:1"},
		{"get", "--timeout", "soon", "a:1"},
		{"get", "--raw=maybe", "a:1"},
		{"scan", "--limit", "x"},
		{"scan", "--limit", "-1"},
		{"scan", "--state", "lost"},
		{"scan", "extra"},
		{"stats", "--top", "-1"},
		{"stats", "extra"},
		{"forget"},
		{"forget", "--state", "processing", "--namespace", "a", "--yes"},
		{"forget", "--state", "failed", "--yes"}, // no --namespace
		{"forget", "--state", "failed", "--namespace", "a", "a:1"},
		{"nosuchcommand"},
		{"help", "nosuchcommand"},
		{"completion"},
		{"completion", "tcsh"},
		{"redrive"},
		{"redrive", "smtp"},
		{"redrive", "nats", "--nats", "nats://127.0.0.1:1"}, // no --stream
		{"redrive", "nats", "--stream", "DLQ"},              // no --nats
		{"redrive", "rabbitmq", "--amqp", "amqp://127.0.0.1:1/"},
		{"redrive", "kafka", "--topic", "dlq"},
		{"redrive", "kafka", "--brokers", "127.0.0.1:1", "--topic", "dlq", "--group", ""},
		{"redrive", "nats", "--nats", "nats://127.0.0.1:1", "--stream", "DLQ", "--since", "yesterday"},
		{"redrive", "nats", "--nats", "nats://127.0.0.1:1", "--stream", "DLQ", "--limit", "-1"},
		{"redrive", "rabbitmq", "--amqp", "amqp://127.0.0.1:1/", "--queue", "q", "--key-from", "json:id"}, // no --namespace
		{"redrive", "rabbitmq", "--amqp", "amqp://127.0.0.1:1/", "--queue", "q", "--key-from", "md5", "--namespace", "a"},
	} {
		r := run(t, with(flags, args...)...)
		assert.Equal(t, ExitUsage, r.code, "%q: %s", args, r.err)
		assert.Contains(t, r.err, "dedupctl --help", "%q", args)
	}
	pgDead := "postgres://postgres@" + closedPort(t) + "/test?sslmode=disable"
	for _, args := range [][]string{
		{"get", "a:1"}, // no store
		{"--redis", url, "--postgres", "postgres://x@127.0.0.1/x", "get", "a:1"},
		{"--redis", "http://x", "get", "a:1"},
		{"--postgres", "postgres://x@127.0.0.1:notaport/x", "get", "a:1"},
		{"--redis", "redis://" + closedPort(t) + "?master_name=", "--redis-mode", "sentinel", "get", "a:1"},
		// A table name that is not a plain identifier is refused by its
		// spelling, before the database is asked (this one does not
		// answer).
		{"--postgres", pgDead, "--table", "bad name; DROP TABLE x", "get", "a:1"},
		{"--postgres", pgDead, "--table", "a.b.c", "scan"},
		{"--postgres", pgDead, "--table", "x-y", "forget", "a:1"},
	} {
		r := run(t, args...)
		assert.Equal(t, ExitUsage, r.code, "%q: %s", args, r.err)
		assert.Contains(t, r.err, "dedupctl --help", "%q", args)
	}
	r := run(t, "--postgres", testenv.Postgres.Addr(t), "--table", "bad name; DROP TABLE x", "get", "a:1")
	assert.Equal(t, ExitUsage, r.code, r.err)
	assert.Contains(t, r.err, `--table "bad name; DROP TABLE x"`)
	assert.Contains(t, r.err, "not a plain identifier")

	// What is asked for properly is not a usage error, help included.
	for _, args := range [][]string{{"help"}, {"help", "get"}, {"help", "redrive", "nats"}, {"completion", "bash"}, {"get", "--help"}} {
		r := run(t, args...)
		assert.Equal(t, ExitOK, r.code, "%q: %s", args, r.err)
		assert.NotEmpty(t, r.out, "%q", args)
	}

	t.Run("huge keys", func(t *testing.T) {
		huge := "big:" + strings.Repeat("x", 100_000)
		completed(t, s, huge, []byte(`"ok"`))
		r := run(t, with(flags, "-o", "json", "get", huge)...)
		require.Equal(t, 0, r.code, shown(r.err))
		assert.Equal(t, huge, lines[recordJSON](t, r.out)[0].Key)

		r = run(t, with(flags, "get", huge+"y")...)
		assert.Equal(t, ExitNotFound, r.code)
		assert.Less(t, len(r.err), 500, "the message cuts the key: %s", shown(r.err))
		assert.Contains(t, r.err, "(100005 bytes)")

		r = run(t, with(flags, "forget", huge)...)
		assert.Equal(t, 0, r.code, shown(r.err))
		assert.False(t, exists(t, s, huge))

		pg := postgresBackend(t)
		_, pgFlags := pg.fresh(t)
		long := "big:" + strings.Repeat("x", pgstore.MaxKeyLength)
		for _, cmd := range []string{"get", "forget"} {
			r = run(t, with(pgFlags, cmd, long)...)
			assert.Equal(t, ExitUsage, r.code, "%s: %s", cmd, shown(r.err))
			assert.Contains(t, r.err, "over MaxKeyLength")
			assert.Less(t, len(r.err), 500, "the message cuts the key: %s", shown(r.err))
		}
	})

	t.Run("missing table", func(t *testing.T) {
		r := run(t, "--postgres", testenv.Postgres.Addr(t), "--table", "dedupctl_no_such_table", "get", "a:1")
		assert.Equal(t, ExitError, r.code)
		assert.Contains(t, r.err, "dedupctl_no_such_table")
	})
}
