package pgoutbox

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
	DefaultTable         = "dedup_outbox"
	DefaultBuckets       = 64
	DefaultMaxBodySize   = 1 << 20
	DefaultMaxHeaderSize = 8 << 10
	DefaultTimeout       = 5 * time.Second
)

// Limits of a message's text fields, in bytes.
const (
	MaxDestinationLength = 255
	MaxOrderingKeyLength = 1024
	MaxNameLength        = 1024
)

// Options configures an Outbox. A nil *Options means all defaults; a zero
// field takes its default.
type Options struct {
	// Table is the outbox table, optionally schema-qualified
	// ("billing.dedup_outbox"). Each part must be a plain SQL identifier
	// (letters, digits and underscores, not starting with a digit) of at
	// most 40 bytes, so that the names made from it (Table_ids,
	// Table_dead, Table_leases, Table_relays, its indexes) fit
	// PostgreSQL's 63-byte limit. The
	// LISTEN/NOTIFY channel has its name as given. Defaults to
	// "dedup_outbox", in the connection's search_path.
	Table string

	// Migrate makes New create the tables and indexes if they do not
	// exist (what Outbox.Migrate does). Without it, New fails with
	// ErrMisconfigured on a missing table: apply SchemaSQL with your own
	// migrations first.
	Migrate bool

	// Buckets is how many buckets the ordering keys hash into, each the
	// unit that one relay at a time holds a lease on: the most relays
	// that can publish at once. It is fixed when the tables are created
	// (a generated column and one lease row per bucket), and read from
	// the table afterwards; changing it means stopping every relay and
	// migrating the table. Between 1 and 4096. Defaults to 64.
	Buckets int

	// MaxBodySize is the largest body Writer.Add accepts, in bytes; a
	// larger one is refused inside the handler (ErrInvalidMessage) rather
	// than refused by the broker later, where it would hold up its
	// ordering key. Keep it at or under the broker's limit (NATS's
	// max_payload, Kafka's max.message.bytes, ...), which counts headers
	// too. Defaults to 1 MiB.
	MaxBodySize int

	// MaxHeaderSize is the largest total of a message's header names and
	// values that Writer.Add accepts, in bytes. Defaults to 8 KiB.
	MaxHeaderSize int

	// NoNotify turns off the NOTIFY that Writer.Add sends (delivered at
	// commit) to wake the relays at once; they then find new messages by
	// polling (RelayOptions.PollInterval). NOTIFY serialises the commits
	// that send one on a lock of the server's: at thousands of commits a
	// second, a team may prefer polling. Defaults to false: notify.
	NoNotify bool

	// Timeout bounds every statement of the outbox's own: each Add (the
	// user's transaction is rolled back when it fails), and each of a
	// relay's. Defaults to 5s.
	Timeout time.Duration

	// Logger receives what relays report at warn and error level, unless
	// a relay has its own. Defaults to slog.Default().
	Logger *slog.Logger
}

// identifier is one part of a table name: no quoting needed, nothing to
// escape.
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,39}$`)

// names are the quoted names of an outbox's tables and indexes.
type names struct {
	plain      string // the table as given: messages and the NOTIFY channel
	table      string
	leases     string
	relays     string
	ids        string // the ids written, kept past the messages' sending
	dead       string // the messages refused for good
	idKey      string // the unique constraint on id
	pending    string // version 1's index of unsent rows by bucket, dropped
	unsent     string // the index of unsent rows by seq
	sent       string // the index of version 1's sent rows by sent_at
	idsCreated string // the index of the ids by created_at
}

func parseTable(name string) (names, error) {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return names{}, fmt.Errorf("pgoutbox: %w: Table %q has more than two parts (schema.table)", store.ErrInvalidConfig, name)
	}
	for _, p := range parts {
		if !identifier.MatchString(p) {
			return names{}, fmt.Errorf("pgoutbox: %w: Table %q: %q is not a plain identifier of up to 40 letters, digits and underscores", store.ErrInvalidConfig, name, p)
		}
	}
	last := len(parts) - 1
	with := func(suffix string) string {
		q := append([]string(nil), parts...)
		q[last] += suffix
		return pgx.Identifier(q).Sanitize()
	}
	bare := func(suffix string) string { return pgx.Identifier{parts[last] + suffix}.Sanitize() }
	return names{
		plain:      name,
		table:      pgx.Identifier(parts).Sanitize(),
		leases:     with("_leases"),
		relays:     with("_relays"),
		ids:        with("_ids"),
		dead:       with("_dead"),
		idKey:      bare("_id_key"),
		pending:    with("_pending_idx"),
		unsent:     bare("_unsent_idx"),
		sent:       bare("_sent_idx"),
		idsCreated: bare("_ids_created_idx"),
	}, nil
}

// config is Options validated, with defaults filled in.
type config struct {
	names     names
	buckets   int
	maxBody   int
	maxHeader int
	notify    bool
	timeout   time.Duration
	logger    *slog.Logger
	migrate   bool
}

func (o *Options) config() (config, error) {
	var opts Options
	if o != nil {
		opts = *o
	}
	n, err := parseTable(cmp.Or(opts.Table, DefaultTable))
	if err != nil {
		return config{}, err
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"Buckets", int64(opts.Buckets)}, {"MaxBodySize", int64(opts.MaxBodySize)}, {"MaxHeaderSize", int64(opts.MaxHeaderSize)}, {"Timeout", int64(opts.Timeout)}} {
		if f.v < 0 {
			return config{}, fmt.Errorf("pgoutbox: %w: %s is %d, it must not be negative", store.ErrInvalidConfig, f.name, f.v)
		}
	}
	if opts.Buckets > 4096 {
		return config{}, fmt.Errorf("pgoutbox: %w: Buckets is %d, over 4096", store.ErrInvalidConfig, opts.Buckets)
	}
	return config{
		names:     n,
		buckets:   cmp.Or(opts.Buckets, DefaultBuckets),
		maxBody:   cmp.Or(opts.MaxBodySize, DefaultMaxBodySize),
		maxHeader: cmp.Or(opts.MaxHeaderSize, DefaultMaxHeaderSize),
		notify:    !opts.NoNotify,
		timeout:   cmp.Or(opts.Timeout, DefaultTimeout),
		logger:    cmp.Or(opts.Logger, slog.Default()),
		migrate:   opts.Migrate,
	}, nil
}
