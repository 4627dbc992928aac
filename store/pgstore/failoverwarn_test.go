package pgstore_test

import (
	"bytes"
	"context"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/pgstore"
)

// TestNewWarnsOfNoConnectTimeout: New warns of a pool whose connection
// string lists several servers (a failover setup) without a connect
// timeout, and of no other: one server, or a connect timeout set.
func TestNewWarnsOfNoConnectTimeout(t *testing.T) {
	t.Parallel()
	dsn := testenv.Postgres.Addr(t)
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	primary := cfg.ConnConfig.Host + ":" + itoa(int(cfg.ConnConfig.Port))
	// A second server that is down: the first answers, so New succeeds.
	twoServers := "postgres://postgres@" + primary + ",127.0.0.1:" + itoa(testenv.FreePort(t)) + "/" + cfg.ConnConfig.Database + "?sslmode=prefer"
	for _, c := range []struct {
		name, dsn string
		warns     bool
	}{
		{"two servers", twoServers, true},
		{"two servers with connect_timeout", twoServers + "&connect_timeout=2", false},
		{"one server, sslmode=prefer", "postgres://postgres@" + primary + "/" + cfg.ConnConfig.Database + "?sslmode=prefer", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			pool, err := pgxpool.New(context.Background(), c.dsn)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			var logs bytes.Buffer
			_, err = pgstore.New(t.Context(), pool, &pgstore.Options{
				Table: newDB(t, 1).table("dedup_records"), Migrate: true,
				Logger: slog.New(slog.NewTextHandler(&logs, nil)),
			})
			require.NoError(t, err)
			if c.warns {
				require.Contains(t, logs.String(), "level=WARN")
				require.Contains(t, logs.String(), "connect_timeout")
			} else {
				require.NotContains(t, logs.String(), "connect_timeout")
			}
		})
	}
}
