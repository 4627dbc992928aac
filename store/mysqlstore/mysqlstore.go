package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/go-sql-driver/mysql"

	"github.com/dedup-go/dedup/store"
)

// Store is a store.Store in a MySQL or MariaDB table, on database/sql with
// github.com/go-sql-driver/mysql. It is safe for concurrent use; the
// *sql.DB stays the caller's, who closes it (after Close). It starts no
// goroutine.
type Store struct {
	db  *sql.DB
	cfg config
	sql statements

	mu    sync.Mutex
	stmts map[string]*sql.Stmt // prepared statements, by their SQL

	// retried counts the statements and transactions of the store run
	// again after a deadlock or a lock wait timeout (for the tests that
	// measure them).
	retried atomic.Int64

	// claimed, when set (by a test), runs between a claim statement and
	// the read of the rows it left: a claimer that stalls there.
	claimed func()
}

var (
	_ store.Store            = (*Store)(nil)
	_ store.BatchStore       = (*Store)(nil)
	_ store.Inspector        = (*Store)(nil)
	_ store.CompleteReporter = (*Store)(nil)
	_ store.Bounded          = (*Store)(nil)
)

// New returns a Store on db after checking, within ctx and
// Options.Timeout, that the server answers (one that is down gives an
// error matching store.ErrUnavailable, not a hang) and that the table
// fits the store: it exists, on InnoDB, with the store's columns and
// their types, and its unique key on key, and the user may SELECT,
// INSERT, UPDATE and DELETE its rows. What does not fit is an error
// matching ErrMisconfigured (and store.ErrInvalidConfig) that names it.
// With Options.Migrate, New first creates the table and its index if they
// do not exist (Migrate); otherwise apply SchemaSQL with your own
// migrations before New.
//
// db must come from the github.com/go-sql-driver/mysql driver; its DSN may
// set parseTime, loc, interpolateParams and clientFoundRows as the
// application likes (the store reads and writes its times as UTC in
// statements of its own, and counts rows whichever way they are counted).
func New(ctx context.Context, db *sql.DB, opts *Options) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("mysqlstore: %w: the *sql.DB is nil", store.ErrInvalidConfig)
	}
	cfg, err := opts.config()
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, cfg: cfg, sql: newStatements(cfg.table), stmts: make(map[string]*sql.Stmt)}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	defer cancel()
	if err := db.PingContext(cctx); err != nil {
		var myErr *mysql.MySQLError
		switch {
		case ctx.Err() != nil:
			return nil, fmt.Errorf("mysqlstore: connect to the server: %w", ctx.Err())
		case errors.As(err, &myErr) && misconfigurations[myErr.Number] != "":
			return nil, s.fail(ctx, "connect", "", err)
		}
		return nil, fmt.Errorf("mysqlstore: %w: the server does not answer: %w", store.ErrUnavailable, s.timedOut(err))
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

// Close releases the statements the store prepared on db's connections.
// It does not close db, which stays the caller's. A closed store must not
// be used.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for q, st := range s.stmts {
		errs = append(errs, st.Close())
		delete(s.stmts, q)
	}
	return errors.Join(errs...)
}

// stmt returns the statement q prepared on the store's db, preparing it on
// first use. A statement whose preparation fails (a missing table) is not
// kept: the next call prepares it again.
func (s *Store) stmt(ctx context.Context, q string) (*sql.Stmt, error) {
	s.mu.Lock()
	st, ok := s.stmts[q]
	s.mu.Unlock()
	if ok {
		return st, nil
	}
	st, err := s.db.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if prev, ok := s.stmts[q]; ok {
		_ = st.Close()
		return prev, nil
	}
	s.stmts[q] = st
	return st, nil
}

// exec runs q, prepared, with args.
func (s *Store) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	st, err := s.stmt(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

// query runs q, prepared, with args.
func (s *Store) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	st, err := s.stmt(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

// Table returns the records' table, as Options.Table named it.
func (s *Store) Table() string { return s.cfg.table.plain }

// SchemaSQL returns the SQL that Migrate runs on a table that does not
// exist: one CREATE TABLE IF NOT EXISTS statement, the expiry index
// included. Teams that run their own migrations apply it (or the same
// statement, from the README) instead. A table made by an earlier version
// lacks some of its columns (0.1.0: created_at, completed_at and steps;
// later ones, steps), which CREATE TABLE IF NOT EXISTS does not add:
// Migrate adds them, and the README has the ALTER TABLE that does.
func (s *Store) SchemaSQL() string { return s.sql.schema }

// Migrate creates the table and its index if they do not exist, and adds
// the columns that a table of an earlier version lacks (created_at,
// completed_at and steps for a table of 0.1.0, steps for a later one),
// within ctx (not bounded by Options.Timeout: a DDL statement may wait for
// a metadata lock), then checks the table as New does. The rows already in
// the table keep working, their creation and completion times unknown
// (zero), without step records. Running it
// again changes nothing. A database that does not exist, or a user that
// may not create or alter the table, is an error matching
// ErrMisconfigured.
func (s *Store) Migrate(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, s.sql.schema); err != nil {
		return s.fail(ctx, "migrate", "", err)
	}
	missing, err := s.missingUpgradeColumns(ctx)
	if err != nil {
		return s.fail(ctx, "migrate", "", err)
	}
	if len(missing) > 0 {
		if _, err := s.db.ExecContext(ctx, upgradeSQL(s.sql.table, missing)); err != nil {
			var myErr *mysql.MySQLError
			if !errors.As(err, &myErr) || myErr.Number != errDuplicateColumn {
				return s.fail(ctx, "migrate", "", err)
			}
			// Another process added them meanwhile.
		}
	}
	return s.check(ctx)
}

// errDuplicateColumn is the server's error for a column added twice
// (ER_DUP_FIELDNAME).
const errDuplicateColumn = 1060

// missingUpgradeColumns returns the upgradeColumns that the table lacks.
func (s *Store) missingUpgradeColumns(ctx context.Context) ([]string, error) {
	var database any
	if s.cfg.table.database != "" {
		database = s.cfg.table.database
	}
	rows, err := s.db.QueryContext(ctx, `SELECT COLUMN_NAME FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?`, database, s.cfg.table.name)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	have := make(map[string]bool)
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, err
		}
		have[name] = true
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var missing []string
	for _, c := range upgradeColumns {
		if !have[c.name] {
			missing = append(missing, c.name)
		}
	}
	return missing, nil
}

// CallTimeout is Options.Timeout, which bounds every call of the store
// (its statements and a waited-for lock included), whatever its context:
// the receiver then spends no timer of its own on completions.
func (s *Store) CallTimeout() time.Duration { return s.cfg.timeout }

// Acquire claims req.Key if it is absent, failed, or processing under a
// lease that has ended, and reports the record holding it otherwise. A
// fingerprint that differs from the record's is store.ErrKeyReused in
// every state.
//
// A plain read answers a key that is completed or held under a live
// lease (a duplicate costs one read, no lock, no write). A key without a
// record is claimed by one INSERT, on the read's clock (a duplicate key:
// another claim was first, and the key is read again). Otherwise the
// claim is one INSERT ... ON DUPLICATE KEY UPDATE statement, which takes
// the record over under its row lock when it is gone, failed or processing
// under an ended lease (and the fingerprints agree), and leaves it as it
// is otherwise; a locking read of the row, in the same transaction, then
// tells whether the claim's token is in it: the claim and its answer are
// one atomic step, however long the claimer stalls between them. A claim
// that lost the race to a concurrent one reports that claim (in flight);
// one that found a live lease ended by the time of its read claims again,
// within Options.Timeout. A deadlock or a lock wait timeout runs the
// transaction again.
//
// With req.Token set, a record that this token holds (processing, its
// lease live or ended, not taken over) is granted again by the claim
// statement: the same attempt, its lease from now.
func (s *Store) Acquire(ctx context.Context, req store.AcquireRequest) (store.Claim, error) {
	if err := checkAcquire(req); err != nil {
		return store.Claim{}, err
	}
	if err := ctx.Err(); err != nil {
		return store.Claim{}, errContext("acquire", req.Key, err)
	}
	out := s.acquireKeys(ctx, []store.AcquireRequest{req})
	return out[0].Claim, out[0].Err
}

// acquireKeys claims reqs, whose keys are distinct and valid: a read of
// every key, one claim statement over those it did not answer (in key
// order), and a read of those; a request whose key changed in between
// goes round again, until every one is answered or the call's
// Options.Timeout ends.
func (s *Store) acquireKeys(ctx context.Context, reqs []store.AcquireRequest) []store.AcquireOutcome {
	out := make([]store.AcquireOutcome, len(reqs))
	cctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	defer cancel()
	tokens := make([]store.Token, len(reqs))
	for i, req := range reqs {
		tokens[i] = req.Token
		if tokens[i].IsZero() {
			tokens[i] = store.NewToken()
		}
	}
	pending := make([]int, len(reqs))
	for i := range pending {
		pending[i] = i
	}
	failAll := func(idx []int, err error) {
		for _, i := range idx {
			out[i].Err = s.fail(ctx, "acquire", reqs[i].Key, err)
		}
	}
	for len(pending) > 0 {
		rows, clock, err := s.readKeys(cctx, reqs, pending)
		if err != nil {
			failAll(pending, err)
			return out
		}
		var claim []int
		for _, i := range pending {
			r, found := rows[reqs[i].Key]
			if !s.answer(reqs[i], r, found, store.Token{}, &out[i]) {
				// Also the caller's own claim, read before it was granted
				// again: the claim statement renews its lease.
				claim = append(claim, i)
			}
		}
		if len(claim) == 0 {
			return out
		}
		if _, found := rows[reqs[0].Key]; len(reqs) == 1 && !found {
			// No record: a plain INSERT claims the key, on the clock of the
			// read, and needs no read after it.
			rec, err := s.insert(cctx, reqs[0], tokens[0], clock)
			switch {
			case errors.Is(err, errInsertedFirst):
				continue
			case err != nil:
				failAll(claim, err)
			default:
				out[0] = store.AcquireOutcome{Claim: store.Claim{Acquired: true, Token: tokens[0], Record: rec}}
			}
			return out
		}
		slices.SortFunc(claim, func(a, b int) int { return strings.Compare(reqs[a].Key, reqs[b].Key) })
		if rows, err = s.claim(cctx, reqs, tokens, claim); err != nil {
			failAll(claim, err)
			return out
		}
		pending = pending[:0]
		for _, i := range claim {
			r, found := rows[reqs[i].Key]
			if !s.answer(reqs[i], r, found, tokens[i], &out[i]) {
				pending = append(pending, i)
			}
		}
	}
	return out
}

// answer sets o from r, the row of req's key as a read found it (found
// false: none), and reports whether that answers req: the row holds
// token (acquired: the record carries it), or refuses the claim (in
// flight, completed, another fingerprint: no token). A row the claim
// could take (none, gone, failed, an ended lease) answers nothing, nor
// does one that req's own token holds, unless it is token (the claim
// granted it again).
func (s *Store) answer(req store.AcquireRequest, r row, found bool, token store.Token, o *store.AcquireOutcome) bool {
	processing := found && r.rec.State == store.StateProcessing && r.now.Before(r.expires)
	if processing && !token.IsZero() && r.token == token && !reused(r.rec.Fingerprint, req.Fingerprint) {
		r.rec.Key = req.Key
		*o = store.AcquireOutcome{Claim: store.Claim{Acquired: true, Token: token, Record: r.rec}}
		return true
	}
	verdict := judge(r, found, req.Fingerprint)
	if verdict == refused && processing && !req.Token.IsZero() && r.token == req.Token {
		return false
	}
	switch verdict {
	case reusedKey:
		*o = store.AcquireOutcome{Err: errReused(req.Key, r.rec.State)}
		return true
	case refused:
		// The token of a claim is its holder's alone: a refusal does not
		// hand it to another caller.
		r.rec.Key, r.rec.Token = req.Key, store.Token{}
		*o = store.AcquireOutcome{Claim: store.Claim{Record: r.rec}}
		return true
	}
	return false
}

// errInsertedFirst: the INSERT of a claim found the key inserted by
// another claim.
var errInsertedFirst = errors.New("mysqlstore: another claim inserted the key first")

// insert claims req's key, which a read at clock found without a record,
// with one INSERT whose lease starts at clock (the database's, moments
// ago), and returns the record it wrote. A duplicate key is
// errInsertedFirst; a deadlock or lock wait timeout runs it again.
func (s *Store) insert(ctx context.Context, req store.AcquireRequest, token store.Token, clock time.Time) (store.Record, error) {
	at := clock.Format(dbTimeLayoutFixed)
	lease, keep := micros(req.Lease), micros(req.Lease)+micros(s.cfg.abandonedTTL)
	args := []any{[]byte(req.Key), token[:], fingerprint(req.Fingerprint), at, lease, at, keep, at}
	_, err := s.exec(ctx, s.sql.insert, args...)
	for s.again(ctx, err) {
		_, err = s.exec(ctx, s.sql.insert, args...)
	}
	var myErr *mysql.MySQLError
	if errors.As(err, &myErr) && myErr.Number == errDuplicateKey {
		return store.Record{}, errInsertedFirst
	}
	if err != nil {
		return store.Record{}, err
	}
	return store.Record{
		Key:         req.Key,
		State:       store.StateProcessing,
		Attempt:     1,
		Fingerprint: req.Fingerprint,
		LeaseUntil:  clock.Add(time.Duration(lease) * time.Microsecond),
		Token:       token,
		CreatedAt:   clock,
	}, nil
}

// readKeys reads the rows of the requests at idx, by key, with the
// database's clock (zero when many keys found no row); a deadlock or lock
// wait timeout cannot happen to a plain read, so none is retried.
func (s *Store) readKeys(ctx context.Context, reqs []store.AcquireRequest, idx []int) (map[string]row, time.Time, error) {
	args := make([]any, len(idx))
	for n, i := range idx {
		args[n] = []byte(reqs[i].Key)
	}
	var (
		rows *sql.Rows
		err  error
	)
	if len(idx) == 1 {
		rows, err = s.query(ctx, s.sql.read, args...)
	} else {
		rows, err = s.db.QueryContext(ctx, s.sql.readMany(len(idx)), args...)
	}
	if err != nil {
		return nil, time.Time{}, err
	}
	defer rows.Close()
	out := make(map[string]row, len(idx))
	var clock time.Time
	for rows.Next() {
		r, err := scanRow(rows, true)
		if err != nil {
			return nil, time.Time{}, err
		}
		clock = r.now
		if r.rec.Key != "" {
			out[r.rec.Key] = r
		}
	}
	return out, clock, rows.Err()
}

// claim runs the claim statement for the requests at idx, in key order,
// each with its token, and reads the rows it left, by key, in one
// transaction: the statement's row locks hold until the read, so the read
// finds each row as the claim left it, whether it took the row or not,
// however long the claimer stalls in between (without them, a claimer
// whose lease ended before its read could find a later claim in its place
// and answer "held" about its own claim, its attempt counted). A deadlock
// or a lock wait timeout runs the transaction again.
func (s *Store) claim(ctx context.Context, reqs []store.AcquireRequest, tokens []store.Token, idx []int) (map[string]row, error) {
	args := make([]any, 0, 5*len(idx))
	keys := make([]any, len(idx))
	for n, i := range idx {
		args = append(args, []byte(reqs[i].Key), tokens[i][:], fingerprint(reqs[i].Fingerprint),
			micros(reqs[i].Lease), micros(reqs[i].Lease)+micros(s.cfg.abandonedTTL))
		keys[n] = []byte(reqs[i].Key)
	}
	c := claimSQL{claim: s.sql.claim(len(idx)), read: s.sql.readLocked(len(idx))}
	if len(idx) == 1 {
		// A single key's statements run often: prepared, before the
		// transaction takes its connection (preparing takes one of the
		// pool's, which a transaction waiting for a row lock must not
		// hold meanwhile: all of them doing so would wait for each other).
		var err error
		if c.claimStmt, err = s.stmt(ctx, c.claim); err != nil {
			return nil, err
		}
		if c.readStmt, err = s.stmt(ctx, c.read); err != nil {
			return nil, err
		}
	}
	rows, err := s.claimTx(ctx, c, args, keys)
	for s.again(ctx, err) {
		rows, err = s.claimTx(ctx, c, args, keys)
	}
	return rows, err
}

// claimSQL is a claim statement and its locking read, each prepared
// (single keys) or not (a batch's, which differ with its size).
type claimSQL struct {
	claim, read         string
	claimStmt, readStmt *sql.Stmt
}

// claimTx runs c's claim statement with args and its locking read of keys
// in one transaction.
func (s *Store) claimTx(ctx context.Context, c claimSQL, args, keys []any) (_ map[string]row, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if c.claimStmt != nil {
		_, err = tx.StmtContext(ctx, c.claimStmt).ExecContext(ctx, args...)
	} else {
		_, err = tx.ExecContext(ctx, c.claim, args...)
	}
	if err != nil {
		return nil, err
	}
	if s.claimed != nil {
		s.claimed()
	}
	var rows *sql.Rows
	if c.readStmt != nil {
		rows, err = tx.StmtContext(ctx, c.readStmt).QueryContext(ctx, keys...)
	} else {
		rows, err = tx.QueryContext(ctx, c.read, keys...)
	}
	if err != nil {
		return nil, err
	}
	out := make(map[string]row, len(keys))
	for rows.Next() {
		var rw row
		if rw, err = scanRow(rows, true); err != nil {
			_ = rows.Close()
			return nil, err
		}
		out[rw.rec.Key] = rw
	}
	if err = errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, err
	}
	return out, tx.Commit()
}

// again reports whether a statement of the store's own that failed with
// err runs again: a deadlock or a lock wait timeout, while ctx lasts.
func (s *Store) again(ctx context.Context, err error) bool {
	if err == nil || !retryable(err) || ctx.Err() != nil {
		return false
	}
	s.retried.Add(1)
	return true
}

func checkAcquire(req store.AcquireRequest) error {
	if err := checkKey("acquire", req.Key); err != nil {
		return err
	}
	if req.Lease <= 0 {
		return fmt.Errorf("mysqlstore: acquire %q: %w: the lease is %v, it must be positive", req.Key, store.ErrInvalidConfig, req.Lease)
	}
	if len(req.Fingerprint) > MaxFingerprintLength {
		return fmt.Errorf("mysqlstore: acquire %q: %w: the fingerprint is %d bytes, over MaxFingerprintLength (%d)", req.Key, store.ErrInvalidConfig, len(req.Fingerprint), MaxFingerprintLength)
	}
	return nil
}

// checkKey refuses a key the table cannot hold: empty, or longer than
// MaxKeyLength. Any bytes are a key: the column compares them as they are.
func checkKey(op, key string) error {
	switch {
	case key == "":
		return fmt.Errorf("mysqlstore: %s: %w: the key is empty", op, store.ErrInvalidKey)
	case len(key) > MaxKeyLength:
		return fmt.Errorf("mysqlstore: %s: %w: the key is %d bytes, over MaxKeyLength (%d, what an InnoDB index holds)", op, store.ErrInvalidKey, len(key), MaxKeyLength)
	}
	return nil
}

// Complete stores req.Result for the key held by req.Token and keeps it,
// immutable, for req.Retention. Completing again with the token that
// completed the record succeeds and changes nothing: the first result and
// expiry stay.
func (s *Store) Complete(ctx context.Context, req store.CompleteRequest) error {
	_, err := s.CompleteReport(ctx, req)
	return err
}

// CompleteReport is Complete, reporting whether this call wrote the record
// (store.CompletionWrote) or found it completed by req.Token already
// (store.CompletionUnchanged): the fenced UPDATE changed the row, or it
// did not and a read found the token's completed record.
func (s *Store) CompleteReport(ctx context.Context, req store.CompleteRequest) (store.Completion, error) {
	if err := checkSettle("complete", req.Key, req.Token, req.Retention); err != nil {
		return store.CompletionUnknown, err
	}
	return s.settle(ctx, "complete", req.Key, req.Token, nil, s.sql.complete, result(req.Result), micros(req.Retention))
}

// Release records the failure of the key held by req.Token and frees the
// key for the next Acquire, keeping the failed record (its attempt count
// and req.Error) for req.Retention. The error text is kept as valid UTF-8,
// up to 4 KiB.
func (s *Store) Release(ctx context.Context, req store.ReleaseRequest) error {
	if err := checkSettle("release", req.Key, req.Token, req.Retention); err != nil {
		return err
	}
	_, err := s.settle(ctx, "release", req.Key, req.Token, nil, s.sql.release, errorText(req.Error), micros(req.Retention))
	return err
}

// Extend sets the lease of the key held by req.Token to req.Lease from
// now, even when that is earlier than the deadline it had. A claim whose
// lease ended is extended too while no other Acquire has taken the key
// over.
func (s *Store) Extend(ctx context.Context, req store.ExtendRequest) error {
	if err := checkExtend(req); err != nil {
		return err
	}
	_, err := s.settle(ctx, "extend", req.Key, req.Token, nil, s.sql.extend, micros(req.Lease), micros(req.Lease)+micros(s.cfg.abandonedTTL))
	return err
}

func checkExtend(req store.ExtendRequest) error {
	if err := checkKey("extend", req.Key); err != nil {
		return err
	}
	if req.Lease <= 0 {
		return fmt.Errorf("mysqlstore: extend %q: %w: the lease is %v, it must be positive", req.Key, store.ErrInvalidConfig, req.Lease)
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
		return fmt.Errorf("mysqlstore: %s %q: %w: the retention is %v, it must be positive", op, key, store.ErrInvalidConfig, retention)
	}
	if token.IsZero() {
		return errLeaseLost(op, key)
	}
	return nil
}

// settle runs one fenced update of key (q, whose last two parameters are
// key and token, after args) on the pool, or in tx when it is not nil,
// within Options.Timeout. One row changed is the update done
// (CompletionWrote). None: a read of the row, locking inside tx, tells
// whether the token still holds it and it is as the update would leave it
// (an Extend to the deadline it had already), or, for a Complete, whether
// the token completed it already (CompletionUnchanged); else ErrLeaseLost.
// On the pool, a deadlock or a lock wait timeout runs the update again; in
// a user's transaction it is the transaction's to handle.
func (s *Store) settle(ctx context.Context, op, key string, token store.Token, tx *sql.Tx, q string, args ...any) (store.Completion, error) {
	if err := ctx.Err(); err != nil {
		return store.CompletionUnknown, errContext(op, key, err)
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	defer cancel()
	args = append(args, []byte(key), token[:])
	var (
		res sql.Result
		err error
	)
	if tx != nil {
		var st *sql.Stmt
		if st, err = s.stmt(cctx, q); err == nil {
			res, err = tx.StmtContext(cctx, st).ExecContext(cctx, args...)
		}
	} else {
		res, err = s.exec(cctx, q, args...)
		for s.again(cctx, err) {
			res, err = s.exec(cctx, q, args...)
		}
	}
	if err != nil {
		return store.CompletionUnknown, s.fail(ctx, op, key, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 1 {
		return store.CompletionWrote, nil
	}
	state, err := s.held(cctx, tx, key, token)
	if err != nil {
		return store.CompletionUnknown, s.fail(ctx, op, key, err)
	}
	switch {
	case op == "complete" && state == store.StateCompleted:
		return store.CompletionUnchanged, nil
	case op == "extend" && state == store.StateProcessing:
		// The row already held what the update set (same microsecond);
		// a DSN without clientFoundRows counts it as not changed.
		return store.CompletionUnknown, nil
	}
	return store.CompletionUnknown, errLeaseLost(op, key)
}

// held returns the state of key's record while token is its token and it
// is not gone, else 0; inside tx as a locking read, which sees the latest
// version whatever the isolation level.
func (s *Store) held(ctx context.Context, tx *sql.Tx, key string, token store.Token) (store.State, error) {
	var (
		state string
		err   error
	)
	q := s.sql.holds
	if tx != nil {
		q = s.sql.holdsTx
	}
	var st *sql.Stmt
	if st, err = s.stmt(ctx, q); err == nil {
		if tx != nil {
			st = tx.StmtContext(ctx, st)
		}
		err = st.QueryRowContext(ctx, []byte(key), token[:]).Scan(&state)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return stateOf(state), err
}

// errorText is what a failed record keeps of an error: valid UTF-8 (the
// column is utf8mb4, which a strict sql_mode keeps from taking anything
// else), cut to maxLastError bytes on a character boundary.
func errorText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= maxLastError {
		return s
	}
	cut := maxLastError
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// micros converts d to whole microseconds (the resolution of DATETIME(6)),
// rounding up so that a positive duration never becomes zero.
func micros(d time.Duration) int64 {
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

// fingerprint converts a fingerprint for its column, which is NOT NULL:
// an empty one is empty bytes, never NULL.
func fingerprint(fp string) []byte {
	if fp == "" {
		return []byte{}
	}
	return []byte(fp)
}

// result converts a result for its column: nil (no result) is NULL.
func result(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}
