package mysqlstore

import (
	"cmp"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/dedup-go/dedup/store"
)

// Defaults of Options.
const (
	DefaultTable            = "dedup_records"
	DefaultTimeout          = 2 * time.Second
	DefaultAbandonedTTL     = 24 * time.Hour
	DefaultCleanupBatchSize = 1000
)

// MaxKeyLength is the longest key the store holds, in bytes. The key is the
// table's primary key, a VARBINARY(3072): 3,072 bytes is the most an index
// of InnoDB holds (16 KiB pages, the DYNAMIC row format), whatever the
// characters (a utf8mb4 VARCHAR could hold 768 characters only). A longer
// key is refused with store.ErrInvalidKey before any round trip. The
// receiver's default id limit (512 bytes) stays well under it.
const MaxKeyLength = 3072

// MaxFingerprintLength is the longest fingerprint the store keeps, in
// bytes (the column is a VARBINARY(1024)); a longer one is refused with
// store.ErrInvalidConfig. The receiver's own fingerprints are 71 bytes.
const MaxFingerprintLength = 1024

// maxLastError bounds the error text a failed record keeps, in bytes.
const maxLastError = 4096

// Options configures a Store. A nil *Options means all defaults; a zero
// field takes its default.
type Options struct {
	// Table is the records' table, optionally qualified by its database
	// ("billing.dedup_records"). Each part must be a plain identifier
	// (letters, digits and underscores, not starting with a digit), at
	// most 48 bytes, so that the index named after it fits the 64-byte
	// limit of MySQL's identifiers; it is quoted with backticks. Defaults
	// to "dedup_records", in the connection's database (the DSN's).
	Table string

	// Migrate makes New create the table and its index if they do not
	// exist (what Store.Migrate does, within New's context and not bounded
	// by Timeout) before it checks them. Without it, New fails with
	// ErrMisconfigured on a missing table: apply SchemaSQL (the README has
	// it) with your own migrations first.
	Migrate bool

	// Timeout bounds every statement of the store, and a lock wait in
	// it: a server that does not answer fails the call with an error
	// matching store.ErrUnavailable after at most this long. It bounds the
	// completion inside a user's transaction and that transaction's BEGIN
	// and COMMIT too, never the user's own statements. Connecting is
	// bounded by it as well; set the DSN's timeout parameter to bound the
	// dial alone. Must not be negative. Defaults to 2s.
	Timeout time.Duration

	// AbandonedTTL is how long a processing record is kept after its lease
	// ends. A worker that crashed leaves its claim behind; keeping it lets
	// the redelivery that takes the key over count the attempt, so a
	// message that crashes its worker every time reaches MaxAttempts and is
	// dead-lettered instead of looping. Cleanup deletes the claim after
	// it. Must not be negative. Defaults to 24h.
	AbandonedTTL time.Duration

	// CleanupBatchSize is how many expired records one statement of
	// Cleanup deletes at most, so that a large backlog never holds many
	// row locks, or a long transaction, at once. Must not be negative.
	// Defaults to 1000.
	CleanupBatchSize int

	// Logger receives what RunCleanup reports: the rows each run deleted,
	// and runs that failed. Defaults to slog.Default().
	Logger *slog.Logger
}

// identifier is one part of a table name the store accepts: no quoting
// needed, nothing to escape.
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,47}$`)

// tableName is a validated table name: its parts, quoted for SQL, and the
// name of its expiry index.
type tableName struct {
	sql      string // the table, quoted (`billing`.`dedup_records`)
	index    string // the expiry index, quoted
	plain    string // as given, for messages
	database string // the database as given, "" for the connection's
	name     string // the table's own name
}

func parseTable(name string) (tableName, error) {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return tableName{}, fmt.Errorf("mysqlstore: %w: Table %q has more than two parts (database.table)", store.ErrInvalidConfig, name)
	}
	for _, p := range parts {
		if !identifier.MatchString(p) {
			return tableName{}, fmt.Errorf("mysqlstore: %w: Table %q: %q is not a plain identifier of up to 48 letters, digits and underscores", store.ErrInvalidConfig, name, p)
		}
	}
	quoted := make([]string, len(parts))
	for i, p := range parts {
		quoted[i] = "`" + p + "`"
	}
	last := parts[len(parts)-1]
	t := tableName{
		sql:   strings.Join(quoted, "."),
		index: "`" + last + "_expires_at_idx`",
		plain: name,
		name:  last,
	}
	if len(parts) == 2 {
		t.database = parts[0]
	}
	return t, nil
}

// config is Options validated, with defaults filled in.
type config struct {
	table        tableName
	timeout      time.Duration
	abandonedTTL time.Duration
	batchSize    int
	logger       *slog.Logger
	migrate      bool
}

func (o *Options) config() (config, error) {
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
			return config{}, fmt.Errorf("mysqlstore: %w: %s is %v, it must not be negative", store.ErrInvalidConfig, d.name, d.v)
		}
	}
	if opts.CleanupBatchSize < 0 {
		return config{}, fmt.Errorf("mysqlstore: %w: CleanupBatchSize is %d, it must not be negative", store.ErrInvalidConfig, opts.CleanupBatchSize)
	}
	return config{
		table:        table,
		timeout:      cmp.Or(opts.Timeout, DefaultTimeout),
		abandonedTTL: cmp.Or(opts.AbandonedTTL, DefaultAbandonedTTL),
		batchSize:    cmp.Or(opts.CleanupBatchSize, DefaultCleanupBatchSize),
		logger:       cmp.Or(opts.Logger, slog.Default()),
		migrate:      opts.Migrate,
	}, nil
}
