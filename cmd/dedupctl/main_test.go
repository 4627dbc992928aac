package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/pgstore"
	"github.com/dedup-go/dedup/store/redisstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// build compiles dedupctl into a folder of t's.
func build(t *testing.T) string {
	t.Helper()
	gobin := testenv.Binary(t, "go", "the Go toolchain")
	bin := filepath.Join(t.TempDir(), "dedupctl")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, gobin, "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// exe runs the binary with env added to the test's, stdin not a
// terminal, and returns its exit code, stdout and stderr.
func exe(t *testing.T, bin string, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(cleanEnv(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "dedupctl %q did not end within %v", args, testenv.WaitTimeout)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), out.String(), errb.String()
	}
	require.NoError(t, err)
	return 0, out.String(), errb.String()
}

// cleanEnv is the test's environment without dedupctl's variables.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DEDUP_") || strings.HasPrefix(kv, "DEDUP_TEST_") {
			env = append(env, kv)
		}
	}
	return env
}

// TestBinary: the built command reads its store and defaults from the
// environment, and exits 0, 1, 2 or 3 as documented.
func TestBinary(t *testing.T) {
	t.Parallel()
	bin := build(t)

	c := redistest.Client(t)
	prefix := redistest.Prefix(t, c)
	rs, err := redisstore.New(t.Context(), c, &redisstore.Options{Prefix: prefix})
	require.NoError(t, err)
	complete(t, rs, "env:42", `{"ok":true}`)
	addr := testenv.Redis.Addr(t)
	if !strings.Contains(addr, "://") {
		addr = "redis://" + addr
	}
	redisEnv := []string{"DEDUP_REDIS_URL=" + addr, "DEDUP_PREFIX=" + prefix, "DEDUP_NAMESPACE=env", "DEDUP_OUTPUT=json"}

	code, out, stderr := exe(t, bin, redisEnv, "get", "42")
	require.Equal(t, 0, code, stderr)
	var rec map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &rec), out)
	assert.Equal(t, "env:42", rec["key"])
	assert.Equal(t, "completed", rec["state"])
	assert.Equal(t, map[string]any{"ok": true}, rec["result"])

	code, _, stderr = exe(t, bin, redisEnv, "get", "43")
	assert.Equal(t, 3, code, stderr)
	assert.Contains(t, stderr, "not found: env:43")

	for _, bad := range []struct {
		env  []string
		args []string
	}{
		{redisEnv, []string{"get", ""}},
		{append(redisEnv, "DEDUP_OUTPUT=yaml"), []string{"get", "42"}},
		{append(redisEnv, "DEDUP_REDIS_MODE=bogus"), []string{"get", "42"}},
		{append(redisEnv, "DEDUP_NAMESPACE=a:b"), []string{"get", "42"}},
		{append(redisEnv, "DEDUP_TIMEOUT=-1s"), []string{"get", "42"}},
		{append(redisEnv, "DEDUP_TIMEOUT=soon"), []string{"get", "42"}},
		{append(redisEnv, "DEDUP_TABLE=bad name; DROP TABLE x", "DEDUP_REDIS_URL=", "DEDUP_POSTGRES_DSN="+testenv.Postgres.Addr(t)), []string{"get", "42"}},
		{redisEnv, []string{"get", "--principal", "acme", "42"}},
		{redisEnv, []string{"help", "nosuchcommand"}},
		{redisEnv, []string{"completion", "tcsh"}},
		// A bulk forget with stdin not a terminal refuses at once.
		{redisEnv, []string{"forget", "--state", "failed"}},
	} {
		code, _, stderr = exe(t, bin, bad.env, bad.args...)
		assert.Equal(t, 2, code, "%q %q: %s", bad.env[len(bad.env)-1], bad.args, stderr)
		assert.Contains(t, stderr, "Run 'dedupctl --help' for usage.", "%q", bad.args)
	}
	// A flag overrides an unreadable variable.
	code, _, stderr = exe(t, bin, append(redisEnv, "DEDUP_TIMEOUT=soon"), "--timeout", "5s", "get", "42")
	assert.Equal(t, 0, code, stderr)

	dead := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	code, _, stderr = exe(t, bin, append(redisEnv, "DEDUP_REDIS_URL=redis://"+dead, "DEDUP_TIMEOUT=500ms"), "get", "42")
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stderr, dead)
	assert.NotContains(t, stderr, "connection pool", "go-redis's own log lines are not shown")

	// PostgreSQL, named by the environment too.
	dsn := testenv.Postgres.Addr(t)
	pool, err := pgxpool.New(t.Context(), dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var b [6]byte
	_, _ = rand.Read(b[:])
	table := "dedupctl_bin_" + hex.EncodeToString(b[:])
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+table) })
	ps, err := pgstore.New(t.Context(), pool, &pgstore.Options{Table: table, Migrate: true})
	require.NoError(t, err)
	complete(t, ps, "env:7", `"seven"`)
	pgEnv := []string{"DEDUP_POSTGRES_DSN=" + dsn, "DEDUP_TABLE=" + table, "DEDUP_NAMESPACE=env"}
	code, out, stderr = exe(t, bin, pgEnv, "get", "7")
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `(?m)^result +"seven"$`, out)
	code, _, stderr = exe(t, bin, append(pgEnv, "DEDUP_REDIS_URL="+addr), "get", "7")
	assert.Equal(t, 2, code, "two stores: %s", stderr)
}

func complete(t *testing.T, s store.Store, key, result string) {
	t.Helper()
	c, err := s.Acquire(t.Context(), store.AcquireRequest{Key: key, Lease: time.Minute})
	require.NoError(t, err)
	require.NoError(t, s.Complete(t.Context(), store.CompleteRequest{Key: key, Token: c.Token, Result: []byte(result), Retention: time.Hour}))
}

// TestDependencies: the tool builds the HTTP middleware's record ids with
// deduphttp itself, but not gRPC's: importing dedupgrpc would build gRPC
// and protobuf into it, which its tests alone require (to hold its copy
// of dedupgrpc.RecordID to the original).
func TestDependencies(t *testing.T) {
	t.Parallel()
	gobin := testenv.Binary(t, "go", "the Go toolchain")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, gobin, "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, "go list: %s", out)
	deps := strings.Fields(string(out))
	assert.Contains(t, deps, "github.com/dedup-go/dedup/middleware/http")
	for _, d := range deps {
		assert.False(t, strings.HasPrefix(d, "google.golang.org/") || strings.HasPrefix(d, "github.com/dedup-go/dedup/middleware/grpc"),
			"the tool builds %s", d)
	}
}
