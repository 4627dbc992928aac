package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dedup-go/dedup/store"
)

// Store is a store.Store in a PostgreSQL table. It is safe for concurrent
// use and holds no state of its own beyond the pool, which the caller owns
// and closes, and starts no goroutine.
type Store struct {
	pool *pgxpool.Pool
	cfg  config
	sql  statements
}

var (
	_ store.Store      = (*Store)(nil)
	_ store.BatchStore = (*Store)(nil)
	_ store.Inspector  = (*Store)(nil)
	_ store.Bounded    = (*Store)(nil)
	_ store.StepStore  = (*Store)(nil)
)

// New returns a Store on pool after checking, within ctx and
// Options.Timeout, that PostgreSQL answers (a database that is down gives
// an error matching store.ErrUnavailable, not a hang) and that the table
// fits the store: it exists, with the store's columns and its unique key,
// and the role may use its schema and SELECT, INSERT, UPDATE and DELETE
// its rows. What does not fit is an error matching ErrMisconfigured (and
// store.ErrInvalidConfig) that names it. With Options.Migrate, New first
// creates the table and its index if they do not exist (Migrate);
// otherwise apply SchemaSQL with your own migrations before New.
func New(ctx context.Context, pool *pgxpool.Pool, opts *Options) (*Store, error) {
	if pool == nil {
		return nil, fmt.Errorf("pgstore: %w: the pool is nil", store.ErrInvalidConfig)
	}
	cfg, err := opts.config(pool.Config().ConnConfig.DefaultQueryExecMode)
	if err != nil {
		return nil, err
	}
	s := &Store{pool: pool, cfg: cfg, sql: newStatements(cfg.table)}
	s.warnFailover(ctx)
	cctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	defer cancel()
	if err := pool.Ping(cctx); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("pgstore: connect to PostgreSQL at %s: %w", s.addr(), ctx.Err())
		}
		return nil, fmt.Errorf("pgstore: %w: PostgreSQL at %s: %w", store.ErrUnavailable, s.addr(), s.timedOut(err))
	}
	if s.cfg.migrate {
		if err := s.Migrate(ctx); err != nil {
			return nil, err
		}
		return s, nil
	}
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// addr names the server, for error messages.
func (s *Store) addr() string {
	c := s.pool.Config().ConnConfig
	return fmt.Sprintf("%s:%d", c.Host, c.Port)
}

// Table returns the records' table, as Options.Table named it.
func (s *Store) Table() string { return s.cfg.table.plain }

// SchemaSQL returns the SQL that Migrate runs: the table and its expiry
// index, each created if it does not exist, then the columns that a table
// of an earlier version lacks, each added if it does not exist (a table
// made by 0.1.0 gets created_at and completed_at, one made before step
// records steps). Teams that run their
// own migrations apply it (or the same statements, from the README)
// instead; applying it again changes nothing.
func (s *Store) SchemaSQL() string { return s.sql.create + s.sql.upgrade }

// Migrate creates the table and its index if they do not exist and adds
// the columns that a table of an earlier version lacks, within ctx (not
// bounded by Options.Timeout: a DDL statement may wait for a lock), then
// checks the table as New does. The columns are added only when the table
// lacks them, so that a start-up does not queue for the table's exclusive
// lock once they are there; the rows already in the table keep working,
// their creation and completion times unknown (zero), without step
// records. Running it again
// changes nothing. A schema that does not exist, or a role that may not
// create the table or alter it, is an error matching ErrMisconfigured.
func (s *Store) Migrate(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, s.sql.create, pgx.QueryExecModeSimpleProtocol); err != nil {
		return s.fail(ctx, "migrate", "", err)
	}
	var missing bool
	if err := s.pool.QueryRow(ctx, `SELECT count(*) < cardinality($2::text[]) FROM pg_attribute
WHERE attrelid = to_regclass($1::text) AND attname = ANY($2::text[]) AND NOT attisdropped`,
		s.cfg.mode, s.cfg.table.sql, upgradeColumns).Scan(&missing); err != nil {
		return s.fail(ctx, "migrate", "", err)
	}
	if missing {
		if _, err := s.pool.Exec(ctx, s.sql.upgrade, pgx.QueryExecModeSimpleProtocol); err != nil {
			return s.fail(ctx, "migrate", "", err)
		}
	}
	return s.check(ctx)
}

// Acquire claims req.Key if it is absent, failed, or processing under a
// lease that has ended, and reports the record holding it otherwise, in
// one INSERT ... ON CONFLICT DO UPDATE statement. A fingerprint that
// differs from the record's is store.ErrKeyReused in every state. The
// claim is made with req.Token when it is not zero, and a record
// processing under that very token (not gone) is granted again in the
// same statement: the same attempt, its lease running req.Lease from now.
//
// Contention always ends in an answer: the statement returns the record
// as the row lock found it, so a claim that lost the race to a concurrent
// one reports that claim (in flight) rather than trying again. A
// serialization failure or a deadlock (SQLSTATE 40001, 40P01: a server
// whose default isolation level is above READ COMMITTED) runs the
// statement again, within Options.Timeout.
func (s *Store) Acquire(ctx context.Context, req store.AcquireRequest) (store.Claim, error) {
	if err := checkAcquire(req); err != nil {
		return store.Claim{}, err
	}
	if err := ctx.Err(); err != nil {
		return store.Claim{}, errContext("acquire", req.Key, err)
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	defer cancel()
	token := tokenOf(req)
	for {
		row, found, err := s.scanRow(s.pool.QueryRow(cctx, s.sql.acquire, s.cfg.mode,
			req.Key, token, fingerprint(req.Fingerprint), micros(req.Lease), micros(s.cfg.abandonedTTL)), true)
		if again(cctx, err) {
			continue
		}
		if err != nil {
			return store.Claim{}, s.fail(ctx, "acquire", req.Key, err)
		}
		return row.claim(req, token, found)
	}
}

// tokenOf is the token a claim of req is made with: the caller's, or a
// fresh one.
func tokenOf(req store.AcquireRequest) store.Token {
	if req.Token.IsZero() {
		return store.NewToken()
	}
	return req.Token
}

// row is a record as a statement answers it, with the database's clock.
type row struct {
	acquired bool
	rec      store.Record
	expires  time.Time // expires_at, which a processing record has too
	now      time.Time
}

// scanRow reads one row of acquire (withAcquired) or read; found is false
// when there was none.
func (s *Store) scanRow(r pgx.Row, withAcquired bool) (row, bool, error) {
	var (
		out  row
		cols recordColumns
	)
	dest := make([]any, 0, 12)
	if withAcquired {
		dest = append(dest, &out.acquired)
	}
	dest = append(cols.dest(dest), &out.now)
	if err := r.Scan(dest...); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return row{}, false, nil
		}
		return row{}, false, err
	}
	out.rec, out.expires = cols.record(), cols.expires
	return out, true, nil
}

// recordColumns receives the recordCols of a row.
type recordColumns struct {
	state     string
	token     [16]byte
	attempt   int32
	fp        []byte
	result    []byte
	lastError string
	lease     *time.Time
	expires   time.Time
	created   pgtype.Timestamptz // not a *time.Time, which costs an allocation per row
	completed pgtype.Timestamptz
}

// dest appends to dst where Scan puts the recordCols.
func (c *recordColumns) dest(dst []any) []any {
	return append(dst, &c.state, &c.token, &c.attempt, &c.fp, &c.result, &c.lastError, &c.lease, &c.expires, &c.created, &c.completed)
}

// record returns the record the columns hold, as the contract shows it:
// a lease while processing, an expiry and a completion time once
// settled, a result once completed. A claim is kept until its lease plus
// AbandonedTTL, but what the contract calls its expiry is that of a
// settled record only; and a processing row that kept a completion time
// (a failed record taken over by a store of an earlier version, which
// did not clear it) has none.
func (c *recordColumns) record() store.Record {
	rec := store.Record{
		State:       stateOf(c.state),
		Token:       c.token,
		Attempt:     int(c.attempt),
		Fingerprint: string(c.fp),
		LastError:   c.lastError,
		CreatedAt:   c.created.Time,
	}
	switch rec.State {
	case store.StateProcessing:
		rec.LeaseUntil = timeOf(c.lease)
	case store.StateCompleted:
		rec.Result, rec.ExpiresAt, rec.CompletedAt = c.result, c.expires, c.completed.Time
	default:
		rec.ExpiresAt, rec.CompletedAt = c.expires, c.completed.Time
	}
	return rec
}

// timeOf is *t, or the zero time for NULL.
func timeOf(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// claim turns the answer of a claim statement into Acquire's: the record
// carries the claim's token when acquired, none when refused. A row that
// neither holds the claim nor refuses it (none; a gone record; failed or
// processing under an ended lease, which the statement would have
// claimed) is not an answer a sound table gives: an error.
func (r row) claim(req store.AcquireRequest, token store.Token, found bool) (store.Claim, error) {
	switch {
	case !found:
		return store.Claim{}, undecided(req.Key, "no record")
	case r.acquired:
		r.rec.Key = req.Key
		return store.Claim{Acquired: true, Token: token, Record: r.rec}, nil
	case !r.now.Before(r.expires):
		return store.Claim{}, undecided(req.Key, "a gone record")
	case reused(r.rec.Fingerprint, req.Fingerprint):
		return store.Claim{}, errReused(req.Key, r.rec.State)
	case r.rec.State == store.StateCompleted,
		r.rec.State == store.StateProcessing && r.now.Before(r.rec.LeaseUntil):
		// The token of a claim is its holder's alone: a refusal does not
		// hand it to another caller.
		r.rec.Key, r.rec.Token = req.Key, store.Token{}
		return store.Claim{Record: r.rec}, nil
	}
	return store.Claim{}, undecided(req.Key, fmt.Sprintf("a %s record it could have claimed", r.rec.State))
}

// undecided is the error of a claim statement whose answer decides
// nothing.
func undecided(key, what string) error {
	return &store.OpError{Op: "acquire", Key: key, Err: fmt.Errorf("pgstore: the claim was refused by %s", what)}
}

func errReused(key string, state store.State) error {
	return fmt.Errorf("pgstore: acquire %q: %w: the %s record has another fingerprint", key, store.ErrKeyReused, state)
}

// reused reports whether a request's fingerprint differs from the
// record's; an empty one on either side is not checked.
func reused(stored, requested string) bool {
	return stored != "" && requested != "" && stored != requested
}

func stateOf(s string) store.State {
	switch s {
	case "processing":
		return store.StateProcessing
	case "completed":
		return store.StateCompleted
	case "failed":
		return store.StateFailed
	}
	return 0
}

func checkAcquire(req store.AcquireRequest) error {
	if err := checkKey("acquire", req.Key); err != nil {
		return err
	}
	if req.Lease <= 0 {
		return fmt.Errorf("pgstore: acquire %q: %w: the lease is %v, it must be positive", req.Key, store.ErrInvalidConfig, req.Lease)
	}
	return nil
}

// checkKey refuses a key the table cannot hold: empty, longer than
// MaxKeyLength, not valid UTF-8 or holding a NUL byte (PostgreSQL text
// holds neither).
func checkKey(op, key string) error {
	switch {
	case key == "":
		return fmt.Errorf("pgstore: %s: %w: the key is empty", op, store.ErrInvalidKey)
	case len(key) > MaxKeyLength:
		return fmt.Errorf("pgstore: %s: %w: the key is %d bytes, over MaxKeyLength (%d)", op, store.ErrInvalidKey, len(key), MaxKeyLength)
	case !utf8.ValidString(key):
		return fmt.Errorf("pgstore: %s %q: %w: the key is not valid UTF-8", op, key, store.ErrInvalidKey)
	case strings.IndexByte(key, 0) >= 0:
		return fmt.Errorf("pgstore: %s %q: %w: the key holds a NUL byte", op, key, store.ErrInvalidKey)
	}
	return nil
}

// CallTimeout is Options.Timeout, which bounds every call of the store
// (its statements and a waited-for lock included), whatever its context:
// the receiver then spends no timer of its own on completions.
func (s *Store) CallTimeout() time.Duration { return s.cfg.timeout }

// Complete stores req.Result for the key held by req.Token and keeps it,
// immutable, for req.Retention. Completing again with the token that
// completed the record succeeds and changes nothing: the first result and
// expiry stay.
func (s *Store) Complete(ctx context.Context, req store.CompleteRequest) error {
	if err := checkSettle("complete", req.Key, req.Token, req.Retention); err != nil {
		return err
	}
	return s.settle(ctx, "complete", req.Key, req.Token, s.pool, s.sql.complete, []byte(req.Result), micros(req.Retention))
}

// Release records the failure of the key held by req.Token and frees the
// key for the next Acquire, keeping the failed record (its attempt count
// and req.Error) for req.Retention. The error text is kept as valid UTF-8
// without NUL bytes, up to 4 KiB.
func (s *Store) Release(ctx context.Context, req store.ReleaseRequest) error {
	if err := checkSettle("release", req.Key, req.Token, req.Retention); err != nil {
		return err
	}
	return s.settle(ctx, "release", req.Key, req.Token, s.pool, s.sql.release, errorText(req.Error), micros(req.Retention))
}

// Extend sets the lease of the key held by req.Token to req.Lease from
// now, even when that is earlier than the deadline it had. A claim whose
// lease ended is extended too while no other Acquire has taken the key
// over.
func (s *Store) Extend(ctx context.Context, req store.ExtendRequest) error {
	if err := checkExtend(req); err != nil {
		return err
	}
	return s.settle(ctx, "extend", req.Key, req.Token, s.pool, s.sql.extend, micros(req.Lease), micros(s.cfg.abandonedTTL))
}

func checkExtend(req store.ExtendRequest) error {
	if err := checkKey("extend", req.Key); err != nil {
		return err
	}
	if req.Lease <= 0 {
		return fmt.Errorf("pgstore: extend %q: %w: the lease is %v, it must be positive", req.Key, store.ErrInvalidConfig, req.Lease)
	}
	if req.Token.IsZero() {
		return errLeaseLost("extend", req.Key)
	}
	return nil
}

// checkSettle checks the arguments of Complete and Release. A zero token
// never holds a key, so it gets ErrLeaseLost without a round trip.
func checkSettle(op, key string, token store.Token, retention time.Duration) error {
	if err := checkKey(op, key); err != nil {
		return err
	}
	if retention <= 0 {
		return fmt.Errorf("pgstore: %s %q: %w: the retention is %v, it must be positive", op, key, store.ErrInvalidConfig, retention)
	}
	if token.IsZero() {
		return errLeaseLost(op, key)
	}
	return nil
}

// querier runs statements: the pool, or a user's transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// settle runs one fenced update of key (sql, with key and token first) on
// db, within Options.Timeout. No row updated is ErrLeaseLost, except for
// a Complete whose token completed the record already. On the pool, a
// serialization failure or a deadlock runs the update again; in a user's
// transaction it is the transaction's to handle.
func (s *Store) settle(ctx context.Context, op, key string, token store.Token, db querier, sql string, args ...any) error {
	if err := ctx.Err(); err != nil {
		return errContext(op, key, err)
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	defer cancel()
	args = append([]any{s.cfg.mode, key, token}, args...)
	tag, err := db.Exec(cctx, sql, args...)
	for db == querier(s.pool) && again(cctx, err) {
		tag, err = db.Exec(cctx, sql, args...)
	}
	if err != nil {
		return s.fail(ctx, op, key, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	if op == "complete" {
		done, err := s.completedBy(cctx, db, []pair{{key, token}})
		if err != nil {
			return s.fail(ctx, op, key, err)
		}
		if done[pair{key, token}] {
			return nil
		}
	}
	return errLeaseLost(op, key)
}

// again reports whether a statement of the store's own that failed with
// err runs again: a serialization failure or a deadlock (contention, on
// a server whose default isolation level is above READ COMMITTED), while
// ctx lasts.
func again(ctx context.Context, err error) bool {
	return err != nil && retryable(err) && ctx.Err() == nil
}

// pair is a key and the token of a claim on it.
type pair struct {
	key   string
	token store.Token
}

// completedBy reports which of pairs name a record their token completed
// (and that is not gone).
func (s *Store) completedBy(ctx context.Context, db querier, pairs []pair) (map[pair]bool, error) {
	keys := make([]string, len(pairs))
	tokens := make([]pgtype.UUID, len(pairs))
	for i, p := range pairs {
		keys[i], tokens[i] = p.key, uuid(p.token)
	}
	rows, err := db.Query(ctx, s.sql.completed, s.cfg.mode, keys, tokens)
	if err != nil {
		return nil, err
	}
	return collectPairs(rows)
}

// collectPairs reads rows of (key, token).
func collectPairs(rows pgx.Rows) (map[pair]bool, error) {
	out := make(map[pair]bool)
	var p pair
	_, err := pgx.ForEachRow(rows, []any{&p.key, (*[16]byte)(&p.token)}, func() error {
		out[p] = true
		return nil
	})
	return out, err
}

// errorText is what a failed record keeps of an error: valid UTF-8
// without NUL bytes (PostgreSQL text holds neither), cut to maxLastError
// bytes on a character boundary.
func errorText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	if len(s) <= maxLastError {
		return s
	}
	cut := maxLastError
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// micros converts d to whole microseconds (PostgreSQL's resolution),
// rounding up so that a positive duration never becomes zero.
func micros(d time.Duration) int64 {
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

// uuid converts a token for an array parameter, which pgx encodes in
// every query exec mode, the text formats included.
func uuid(t store.Token) pgtype.UUID { return pgtype.UUID{Bytes: t, Valid: true} }

// fingerprint converts a fingerprint for its column, which is NOT NULL:
// an empty one is empty bytes, never NULL.
func fingerprint(fp string) []byte {
	if fp == "" {
		return []byte{}
	}
	return []byte(fp)
}
