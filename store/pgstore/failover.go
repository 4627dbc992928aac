package pgstore

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	"github.com/jackc/pgx/v5/pgconn"
)

// warnFailover logs, when New makes the store, a pool whose connection
// string lists several servers (a primary and its standbys, for a
// failover) without a connect timeout. pgx tries the servers in order, and
// a new connection to a server whose host died waits for as long as the
// operating system tries (about two minutes on Linux) before the next
// server is tried: so long after a failover, the store stays unavailable,
// past the lease, and completions in flight give up (a redelivery then
// runs the handler again).
func (s *Store) warnFailover(ctx context.Context) {
	cc := s.pool.Config().ConnConfig
	if cc.ConnectTimeout > 0 {
		return
	}
	if servers := serversOf(&cc.Config); len(servers) > 1 {
		s.cfg.logger.WarnContext(ctx, "pgstore: the connection string lists several servers but sets no connect_timeout: "+
			"after a failover, a new connection waits on a dead server for minutes before it tries the next; set connect_timeout (for example 2)",
			slog.Any("servers", servers))
	}
}

// serversOf lists the distinct servers (host:port) that cfg tries, in
// order. sslmode=prefer tries each server twice (with TLS, then without):
// it is listed once.
func serversOf(cfg *pgconn.Config) []string {
	servers := []string{fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)}
	for _, f := range cfg.Fallbacks {
		if s := fmt.Sprintf("%s:%d", f.Host, f.Port); !slices.Contains(servers, s) {
			servers = append(servers, s)
		}
	}
	return servers
}
