package mysqlstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"

	"github.com/dedup-go/dedup/store"
)

// ErrNoClaim: CompleteTx, or a handler made by TxHandler, ran outside a
// dedup handler, so there is no claim in its context to complete. It is a
// programming error, not a store failure.
var ErrNoClaim = errors.New("mysqlstore: no claim in the context: it runs inside a dedup handler only")

// ErrMisconfigured: the database does not fit the store, and no retry
// will change that until an operator does: the database or the table is
// missing, lacks a column (or has one of another type: a key that is not
// VARBINARY(3072) would compare keys by a collation, or cut them), the
// unique key on key or InnoDB, or the user lacks a privilege the store
// needs (SELECT, INSERT, UPDATE and DELETE on the table). New and Migrate
// check all of it at start-up and name what is missing; at run time (a
// table dropped, a privilege revoked, a column changed) the server's
// errors that say so (1146 no such table, 1142 command denied, 1054
// unknown column, ...) are reported with it.
//
// It matches store.ErrInvalidConfig, and never store.ErrUnavailable: the
// database answered, so a receiver neither counts it as an outage nor
// runs handlers unprotected for it (Config.FailOpen).
var ErrMisconfigured = fmt.Errorf("mysqlstore: the database does not fit the store (%w)", store.ErrInvalidConfig)

// Server error numbers the store acts on.
const (
	errDeadlock        = 1213 // ER_LOCK_DEADLOCK: the transaction was rolled back
	errLockWaitTimeout = 1205 // ER_LOCK_WAIT_TIMEOUT: the statement was rolled back
	errDuplicateKey    = 1062 // ER_DUP_ENTRY
)

// misconfigurations are the server's errors that say the table or the
// user does not fit the store, with what each means.
var misconfigurations = map[uint16]string{
	1044: "the user has no access to the table's database",
	1046: "no database is selected: name one in the DSN, or qualify Options.Table (database.table)",
	1049: "the table's database does not exist",
	1054: "the table lacks a column of the store (see Store.SchemaSQL)",
	1142: "the user lacks a privilege on the table (the store needs SELECT, INSERT, UPDATE, DELETE)",
	1143: "the user lacks a privilege on a column of the table",
	1146: "the table does not exist: create it with Options.Migrate, Store.Migrate or the SQL of Store.SchemaSQL",
	1048: "a column of the table does not take the store's NULL (see Store.SchemaSQL)",
	1364: "the table has a NOT NULL column without a default that the store's INSERT does not set",
	1366: "a column of the table does not take the store's value (see Store.SchemaSQL)",
	1406: "a column of the table is too short for the store's value (see Store.SchemaSQL)",
	1062: "the table has a unique key besides the one on key",
	1451: "a foreign key refers to the table",
	1452: "the table has a foreign key",
	3819: "a CHECK constraint of the table refuses the store's row",
	4025: "a CHECK constraint of the table refuses the store's row",
}

// fail wraps an error of a statement. When the caller's ctx ended, the
// error is the context's; an error that a retry cannot fix (a missing
// table, column or database, a privilege the user lacks) matches
// ErrMisconfigured; anything else (a refused connection, a timeout, a
// server error) is a *store.OpError, which matches store.ErrUnavailable.
func (s *Store) fail(ctx context.Context, op, key string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return errContext(op, key, cerr)
	}
	var myErr *mysql.MySQLError
	if errors.As(err, &myErr) {
		if what, ok := misconfigurations[myErr.Number]; ok {
			if key == "" {
				return fmt.Errorf("%w: %s: table %s: %s: %w", ErrMisconfigured, op, s.cfg.table.plain, what, err)
			}
			return fmt.Errorf("%w: %s %q: table %s: %s: %w", ErrMisconfigured, op, key, s.cfg.table.plain, what, err)
		}
	}
	return &store.OpError{Op: op, Key: key, Err: fmt.Errorf("mysqlstore: %w", s.timedOut(err))}
}

// timedOut says which limit a deadline was.
func (s *Store) timedOut(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("no answer within %v (Options.Timeout): %w", s.cfg.timeout, err)
	}
	return err
}

// errContext is the error of a call whose context ended: the context's
// error, not a store failure.
func errContext(op, key string, err error) error {
	return fmt.Errorf("mysqlstore: %s %q: %w", op, key, err)
}

func errLeaseLost(op, key string) error {
	return fmt.Errorf("mysqlstore: %s %q: %w", op, key, store.ErrLeaseLost)
}

// retryable reports whether err is a deadlock (InnoDB rolled the
// transaction back) or a lock wait timeout (InnoDB rolled the statement
// back; the transaction goes on unless innodb_rollback_on_timeout is
// set), after which the statement, or the transaction, can run again.
func retryable(err error) bool {
	var myErr *mysql.MySQLError
	return errors.As(err, &myErr) && (myErr.Number == errDeadlock || myErr.Number == errLockWaitTimeout)
}
