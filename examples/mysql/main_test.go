package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"regexp"
	"strings"
	"testing"
	"time"

	"database/sql"
	"net/url"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dedup-go/dedup/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestMySQLExample runs the scenario against the test MariaDB, in a
// database of its own, and checks what it reports: every order written once
// (no unique constraint), the producer retries and the replay answered as
// duplicates, the failed warehouse call rolled back and retried, and the
// order whose ack was lost with worker A's process answered from its
// committed record.
func TestMySQLExample(t *testing.T) {
	dsn := dsnOf(t, mariaDB.Addr(t))
	var b [6]byte
	_, _ = rand.Read(b[:])
	database := "dedup_test_example_mysql_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		db, err := sql.Open("mysql", dsn)
		require.NoError(t, err)
		defer db.Close()
		_, err = db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+database)
		require.NoError(t, err)
	})

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, run(ctx, &out, dsn, database))
	report := out.String()
	t.Log("\n" + report)

	require.Contains(t, report, "Every order written exactly once: true")
	// Deliveries handled at the same moment by two workers are reported in
	// either order: each order's lines are compared as a set.
	for id, want := range map[string][]string{
		"order-1": {"worker-b  delivery 1: processed -> ack", "worker-c  delivery 1: duplicate -> ack"},
		"order-2": {
			"worker-b  delivery 1: processed -> ack", "worker-b  delivery 1: duplicate -> ack",
			"worker-c  delivery 1: duplicate -> ack", "worker-c  delivery 1: duplicate -> ack",
		},
		"order-4": {
			"worker-b  delivery 1: processed -> ack", "worker-b  delivery 1: duplicate -> ack",
			"worker-c  delivery 1: duplicate -> ack", "worker-c  delivery 1: duplicate -> ack",
		},
		"order-3": {
			"worker-b  delivery 1: handler failed -> retry (warehouse timeout)", "worker-b  delivery 2: processed -> ack",
			"worker-c  delivery 1: duplicate -> ack",
		},
		"order-5": {
			"worker-a  delivery 1: processed -> ack lost with the process (nats: connection closed)",
			"worker-b  delivery 2: duplicate -> ack", "worker-c  delivery 1: duplicate -> ack",
		},
	} {
		writer := "worker-b"
		if id == "order-5" {
			writer = "worker-a"
		}
		got := deliveries(t, report, id+"  1 row(s), written by "+writer)
		if id != "order-5" {
			// A pull request of worker A's dead connection may have taken
			// a message published after it died: the message is then
			// redelivered after AckWait, one delivery later.
			for i := range got {
				got[i] = deliveryCount.ReplaceAllString(got[i], "delivery #")
			}
			for i := range want {
				want[i] = deliveryCount.ReplaceAllString(want[i], "delivery #")
			}
		}
		require.ElementsMatch(t, want, got, id)
	}
}

// mariaDB is the test server, as store/mysqlstore's tests find it: a
// mysql:// URL that DEDUP_TEST_MYSQL overrides.
var mariaDB = testenv.Service{
	Name:    "MariaDB",
	Env:     "DEDUP_TEST_MYSQL",
	Default: "mysql://dedup:dedup@127.0.0.1:3306/dedup_test",
	Start:   "scripts/services.sh mariadb",
}

// dsnOf turns a mysql:// URL into the driver's DSN.
func dsnOf(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	cfg := mysql.NewConfig()
	cfg.Net, cfg.Addr, cfg.User = "tcp", u.Host, u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	cfg.DBName = strings.TrimPrefix(u.Path, "/")
	return cfg.FormatDSN()
}

var deliveryCount = regexp.MustCompile(`delivery \d+`)

// deliveries returns the indented lines under the line head.
func deliveries(t *testing.T, report, head string) []string {
	t.Helper()
	_, rest, ok := strings.Cut(report, head+"\n")
	require.True(t, ok, "the report has no line %q", head)
	var lines []string
	for _, line := range strings.Split(rest, "\n") {
		d, ok := strings.CutPrefix(line, "    ")
		if !ok {
			break
		}
		lines = append(lines, d)
	}
	return lines
}
