package pgstore

import (
	"cmp"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dedup-go/dedup/store"
)

// Defaults of Options.
const (
	DefaultTable            = "dedup_records"
	DefaultTimeout          = 2 * time.Second
	DefaultAbandonedTTL     = 24 * time.Hour
	DefaultCleanupBatchSize = 1000
)

// MaxKeyLength is the longest key the store holds, in bytes. A B-tree
// index entry of PostgreSQL holds at most about 2.7 KB, so a longer key
// could not be its primary key; it is refused with store.ErrInvalidKey.
// The receiver's default id limit (512 bytes) stays well under it.
const MaxKeyLength = 2048

// maxLastError bounds the error text a failed record keeps, in bytes.
const maxLastError = 4096

// Options configures a Store. A nil *Options means all defaults; a zero
// field takes its default.
type Options struct {
	// Table is the records' table, optionally schema-qualified
	// ("billing.dedup_records"). Each part must be a plain SQL identifier
	// (letters, digits and underscores, not starting with a digit), at
	// most 48 bytes, so that the index named after it fits PostgreSQL's
	// 63-byte limit; it is quoted, so its case is kept. Defaults to
	// "dedup_records", in the connection's search_path.
	Table string

	// Migrate makes New create the table and its index if they do not
	// exist (what Store.Migrate does, within New's context and not bounded
	// by Timeout) before it checks them. Without it, New fails with
	// ErrMisconfigured on a missing table: apply SchemaSQL (the README
	// has it) with your own migrations first.
	Migrate bool

	// Timeout bounds every statement of the store, connecting included: a
	// PostgreSQL that does not answer fails the call with an error
	// matching store.ErrUnavailable after at most this long. It bounds
	// the completion inside a user's transaction and that transaction's
	// BEGIN and COMMIT too, never the user's own statements. Must not be
	// negative. Defaults to 2s.
	Timeout time.Duration

	// AbandonedTTL is how long a processing record is kept after its lease
	// ends. A worker that crashed leaves its claim behind; keeping it lets
	// the redelivery that takes the key over count the attempt, so a
	// message that crashes its worker every time reaches MaxAttempts and is
	// dead-lettered instead of looping. Cleanup deletes the claim after
	// it. Must not be negative. Defaults to 24h.
	AbandonedTTL time.Duration

	// QueryExecMode is how the store's statements are sent. Behind
	// PgBouncer in transaction pooling mode (before 1.21, or without
	// max_prepared_statements), set pgx.QueryExecModeExec (or
	// pgx.QueryExecModeSimpleProtocol): the default caches prepared
	// statements on the server connection, which such a PgBouncer does
	// not keep. Defaults to the pool's ConnConfig.DefaultQueryExecMode.
	QueryExecMode pgx.QueryExecMode

	// CleanupBatchSize is how many expired records one statement of
	// Cleanup deletes at most, so that a large backlog never holds many
	// row locks, or a long transaction, at once. Must not be negative.
	// Defaults to 1000.
	CleanupBatchSize int

	// Logger receives what RunCleanup reports (the rows each run deleted,
	// and runs that failed), and New's warning about a pool that lists
	// several servers without a connect timeout (see "Failover" in the
	// package documentation). Defaults to slog.Default().
	Logger *slog.Logger
}

// identifier is one part of a table name the store accepts: no quoting
// needed, nothing to escape.
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,47}$`)

// tableName is a validated table name: its parts, quoted for SQL, and the
// name of its expiry index.
type tableName struct {
	sql    string // the table, quoted ("billing"."dedup_records")
	index  string // the expiry index, unqualified and quoted
	plain  string // as given, for messages
	schema string // the schema as given, "" for the search_path
	name   string // the table's own name
}

func parseTable(name string) (tableName, error) {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return tableName{}, fmt.Errorf("pgstore: %w: Table %q has more than two parts (schema.table)", store.ErrInvalidConfig, name)
	}
	for _, p := range parts {
		if !identifier.MatchString(p) {
			return tableName{}, fmt.Errorf("pgstore: %w: Table %q: %q is not a plain identifier of up to 48 letters, digits and underscores", store.ErrInvalidConfig, name, p)
		}
	}
	last := parts[len(parts)-1]
	t := tableName{
		sql:   pgx.Identifier(parts).Sanitize(),
		index: pgx.Identifier{last + "_expires_at_idx"}.Sanitize(),
		plain: name,
		name:  last,
	}
	if len(parts) == 2 {
		t.schema = parts[0]
	}
	return t, nil
}

// config is Options validated, with defaults filled in.
type config struct {
	table        tableName
	timeout      time.Duration
	abandonedTTL time.Duration
	mode         pgx.QueryExecMode
	batchSize    int
	logger       *slog.Logger
	migrate      bool
}

func (o *Options) config(poolMode pgx.QueryExecMode) (config, error) {
	var opts Options
	if o != nil {
		opts = *o
	}
	table, err := parseTable(cmp.Or(opts.Table, DefaultTable))
	if err != nil {
		return config{}, err
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"Timeout", opts.Timeout}, {"AbandonedTTL", opts.AbandonedTTL}} {
		if d.v < 0 {
			return config{}, fmt.Errorf("pgstore: %w: %s is %v, it must not be negative", store.ErrInvalidConfig, d.name, d.v)
		}
	}
	if opts.CleanupBatchSize < 0 {
		return config{}, fmt.Errorf("pgstore: %w: CleanupBatchSize is %d, it must not be negative", store.ErrInvalidConfig, opts.CleanupBatchSize)
	}
	if opts.QueryExecMode < 0 || opts.QueryExecMode > pgx.QueryExecModeSimpleProtocol {
		return config{}, fmt.Errorf("pgstore: %w: QueryExecMode %d is not a pgx.QueryExecMode", store.ErrInvalidConfig, opts.QueryExecMode)
	}
	return config{
		table:        table,
		timeout:      cmp.Or(opts.Timeout, DefaultTimeout),
		abandonedTTL: cmp.Or(opts.AbandonedTTL, DefaultAbandonedTTL),
		mode:         cmp.Or(opts.QueryExecMode, poolMode, pgx.QueryExecModeCacheStatement),
		batchSize:    cmp.Or(opts.CleanupBatchSize, DefaultCleanupBatchSize),
		logger:       cmp.Or(opts.Logger, slog.Default()),
		migrate:      opts.Migrate,
	}, nil
}
