package pgoutbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedup-go/dedup/store"
)

// Outbox is an outbox table of a PostgreSQL database: handlers write
// messages into it inside their transactions (Writer), relays publish
// them (NewRelay). It is safe for concurrent use.
type Outbox struct {
	pool *pgxpool.Pool
	cfg  config
	sql  statements
}

// New returns the Outbox of the table opts names in pool's database. It
// creates the tables first with Options.Migrate, then checks that they
// fit (ErrMisconfigured otherwise) and reads the bucket count from them.
// A database that cannot be reached is an error matching
// store.ErrUnavailable.
func New(ctx context.Context, pool *pgxpool.Pool, opts *Options) (*Outbox, error) {
	if pool == nil {
		return nil, fmt.Errorf("pgoutbox: %w: the pool is nil", store.ErrInvalidConfig)
	}
	cfg, err := opts.config()
	if err != nil {
		return nil, err
	}
	o := &Outbox{pool: pool, cfg: cfg}
	o.sql = newStatements(cfg.names, cfg.buckets, cfg.notify)
	if cfg.migrate {
		if err := o.Migrate(ctx); err != nil {
			return nil, err
		}
	}
	var leases, x, y, z, ids, dead int
	if err := pool.QueryRow(ctx, o.sql.check).Scan(&leases, &x, &y, &z, &ids, &dead); err != nil {
		return nil, o.startErr("check the tables", err)
	}
	if leases == 0 {
		return nil, fmt.Errorf("%w: %s has no lease rows (apply SchemaSQL, or New with Options.Migrate)", ErrMisconfigured, cfg.names.leases)
	}
	// The table's bucket count wins over the option: it is the one the
	// generated column computes with.
	o.cfg.buckets = leases
	o.sql = newStatements(cfg.names, leases, cfg.notify)
	return o, nil
}

// SchemaSQL returns the SQL that creates the outbox's tables and indexes
// (if they do not exist), or upgrades those of an earlier version in
// place, for teams that apply their own migrations.
func (o *Outbox) SchemaSQL() string { return o.sql.schema }

// Migrate creates the tables and indexes if they do not exist, or
// upgrades those of an earlier version in place, under an advisory lock,
// so that processes starting at once do not race.
func (o *Outbox) Migrate(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, "dedup-outbox-migrate:"+o.cfg.names.plain); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, o.sql.schema)
		return err
	})
	if err != nil {
		return o.startErr("migrate", err)
	}
	return nil
}

// Buckets returns the number of buckets the ordering keys hash into.
func (o *Outbox) Buckets() int { return o.cfg.buckets }

// startErr wraps an error of New or Migrate: a database that answered
// that something is missing is misconfigured, anything else unavailable.
func (o *Outbox) startErr(op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (len(pgErr.Code) == 5 && pgErr.Code[:2] == "42" || pgErr.Code == "3F000") {
		return fmt.Errorf("%w: %s %s: %w", ErrMisconfigured, op, o.cfg.names.plain, err)
	}
	return fmt.Errorf("pgoutbox: %s %s: %w: %w", op, o.cfg.names.plain, store.ErrUnavailable, err)
}
