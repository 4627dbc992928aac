package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dedup-go/dedup/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestOutboxExample runs the scenario against the test PostgreSQL, in a
// schema of its own, and checks what it reports: each payment written
// once (p-2's copy a duplicate), four events written and sent, the stream
// holding p-1's event twice (its acknowledgement was lost, and the copy
// came after the duplicate window) with acct-1's events in order, and the
// notification service having each event's effect once, the copy dropped.
func TestOutboxExample(t *testing.T) {
	dsn := testenv.Postgres.Addr(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "example_outbox_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		require.NoError(t, err)
	})

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, run(ctx, &out, dsn, schema))
	report := out.String()
	t.Log("\n" + report)

	for _, line := range []string{
		"Payments written: p-1 1 row(s), p-2 1 row(s), p-3 1 row(s), p-4 1 row(s)\n",
		"Events written to the outbox: 4; marked sent by the relay: 4\n",
		"Events in the stream: 5\n",
		"    acct-1: p-1, p-1, p-3\n",
		"    acct-2: p-2\n",
		"    acct-3: p-4\n",
		"Notifications sent: p-1 x1, p-2 x1, p-3 x1, p-4 x1\n",
		"Copies dropped by the notification service: 1\n",
		"Every event's effect exactly once: true\n",
	} {
		require.Contains(t, report, line)
	}
}
