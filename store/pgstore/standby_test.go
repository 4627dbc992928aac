package pgstore_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/pgtest"
)

// replication is how a primary of the test's own commits with respect to
// its standby.
type replication int

const (
	// synchronous: a commit is acknowledged once the standby has flushed
	// it (synchronous_standby_names = '*', synchronous_commit = on, the
	// default).
	synchronous replication = iota
	// asynchronous: a commit is acknowledged once the primary has flushed
	// it; the standby follows as fast as it can (synchronous_standby_names
	// empty, PostgreSQL's default).
	asynchronous
)

func (r replication) String() string {
	if r == synchronous {
		return "sync"
	}
	return "async"
}

// pgPair is a primary of the test's own and a streaming standby cloned
// from it, each on a free loopback port.
type pgPair struct {
	primary, standby *pgtest.Server
	// With a round trip to the standby, the primary is on a host of its
	// own, which the test may kill (HostDies): the standby streams from it
	// through replication, and clients reach it through front. Both are
	// nil when the standby and the clients connect directly.
	replication, front *link
}

// startPair starts a primary, clones it with pg_basebackup -R (which
// writes standby.signal and primary_conninfo), starts the clone, makes
// mode the primary's rule and waits until the standby streams in that
// mode. With rtt above 0, the standby streams through a link of that
// round trip (a standby in another zone), and clients reach the primary
// through a link of their own; with 0, both connect directly. Both
// servers are stopped and removed when t ends.
//
// synchronous_standby_names is set on the primary only, after the clone:
// a promoted standby that inherited it would wait for a standby of its own
// that does not exist, and every commit would hang.
func startPair(t testing.TB, mode replication, rtt time.Duration) *pgPair {
	t.Helper()
	p := &pgPair{primary: pgtest.Start(t)}
	p.standby = pgtest.New(t)
	upstream := p.primary.Port()
	if rtt > 0 {
		primary := "127.0.0.1:" + strconv.Itoa(p.primary.Port())
		p.replication = startLink(t, primary, rtt)
		p.front = startLink(t, primary, 0)
		upstream = p.replication.Port()
	}
	p.standby.Run("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(upstream), "-U", "postgres",
		"-D", p.standby.Data(), "-R", "-X", "stream", "-c", "fast", "--no-sync")
	p.standby.Start()
	p.SetMode(t, mode)
	return p
}

// SetMode makes mode the primary's rule and waits until the standby
// streams in that mode.
func (p *pgPair) SetMode(t testing.TB, mode replication) {
	t.Helper()
	names := ""
	if mode == synchronous {
		names = "*"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.primary.DSN())
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = "+quote(names))
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "SELECT pg_reload_conf()")
	require.NoError(t, err)
	for {
		var state string
		err := conn.QueryRow(ctx, "SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'").Scan(&state)
		if err == nil && state == mode.String() {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the standby does not stream in %s mode within 30s (sync_state %q, %v)", mode, state, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// quote is s as an SQL string literal.
func quote(s string) string { return "'" + s + "'" }

// DSN is the connection string that real clients of a primary with a
// standby use (libpq's and pgx's multi-host form): both hosts, tried in
// order, and target_session_attrs=read-write, so that a new connection
// skips a server that is down or read-only (a standby not yet promoted)
// and lands on whichever is the primary.
func (p *pgPair) DSN() string {
	primary := p.primary.Port()
	if p.front != nil {
		primary = p.front.Port()
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write",
		primary, p.standby.Port())
}

// Isolate cuts the primary off from its standby, losing what was in
// flight between them: a partition. Clients still reach the primary.
func (p *pgPair) Isolate() { p.replication.Cut() }

// HostDies kills the primary as the death of its host does: the
// replication link breaks with what was in flight on it, clients hear
// nothing more from the primary (their statements and connection
// attempts wait for their own timeouts), and the server is gone (pg_ctl
// stop -m immediate). It needs a pair with a round trip.
func (p *pgPair) HostDies() {
	p.Isolate()
	p.front.Silence()
	p.primary.Kill()
}
