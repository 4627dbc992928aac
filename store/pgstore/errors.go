package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dedup-go/dedup/store"
)

// ErrNoClaim: CompleteTx, or a handler made by TxHandler, ran outside a
// dedup handler, so there is no claim in its context to complete. It is a
// programming error, not a store failure.
var ErrNoClaim = errors.New("pgstore: no claim in the context: it runs inside a dedup handler only")

// ErrMisconfigured: the database does not fit the store, and no retry
// will change that until an operator does: the table or its schema is
// missing, lacks a column or the unique key on key, or the role lacks a
// privilege the store needs (USAGE on the schema; SELECT, INSERT, UPDATE
// and DELETE on the table). New and Migrate check all of it at start-up
// and name what is missing; at run time (a table dropped, a privilege
// revoked) PostgreSQL's errors of class 42 (undefined table or column,
// insufficient privilege, ...) and 3F000 (invalid schema) are reported
// with it.
//
// It matches store.ErrInvalidConfig, and never store.ErrUnavailable: the
// database answered, so a receiver neither counts it as an outage nor
// runs handlers unprotected for it (Config.FailOpen).
var ErrMisconfigured = fmt.Errorf("pgstore: the database does not fit the store (%w)", store.ErrInvalidConfig)

// fail wraps an error of a statement. When the caller's ctx ended, the
// error is the context's; an error that a retry cannot fix (a missing
// table, column or schema, a privilege the role lacks) matches
// ErrMisconfigured; anything else (a refused connection, a timeout, a
// server error) is a *store.OpError, which matches store.ErrUnavailable.
func (s *Store) fail(ctx context.Context, op, key string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return errContext(op, key, cerr)
	}
	if what := s.misconfigured(err); what != "" {
		if key == "" {
			return fmt.Errorf("%w: %s: %s: %w", ErrMisconfigured, op, what, err)
		}
		return fmt.Errorf("%w: %s %q: %s: %w", ErrMisconfigured, op, key, what, err)
	}
	return &store.OpError{Op: op, Key: key, Err: fmt.Errorf("pgstore: %w", s.timedOut(err))}
}

// misconfigured says what err means for the store when it is an error of
// the database's configuration, SQLSTATE class 42 (syntax error or access
// rule violation: an undefined table or column, a missing privilege, no
// unique index for ON CONFLICT) or 3F000 (invalid schema name); "" for
// any other error.
func (s *Store) misconfigured(err error) string {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || (!strings.HasPrefix(pgErr.Code, "42") && pgErr.Code != "3F000") {
		return ""
	}
	t := s.cfg.table.plain
	var what string
	switch pgErr.Code {
	case "42P01":
		what = fmt.Sprintf("table %s does not exist: create it with Options.Migrate, Store.Migrate or the SQL of Store.SchemaSQL", t)
	case "3F000":
		what = fmt.Sprintf("the schema of table %s does not exist", t)
	case "42501":
		what = fmt.Sprintf("role %q lacks a privilege on table %s or its schema (the store needs USAGE on the schema; SELECT, INSERT, UPDATE, DELETE on the table)", s.pool.Config().ConnConfig.User, t)
	case "42703":
		what = fmt.Sprintf("table %s lacks a column of the store (see Store.SchemaSQL)", t)
	case "42P10":
		what = fmt.Sprintf("table %s has no primary key or unique index on key alone (see Store.SchemaSQL)", t)
	default:
		what = fmt.Sprintf("table %s does not fit the store's statements (see Store.SchemaSQL)", t)
	}
	return what
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
	return fmt.Errorf("pgstore: %s %q: %w", op, key, err)
}

func errLeaseLost(op, key string) error {
	return fmt.Errorf("pgstore: %s %q: %w", op, key, store.ErrLeaseLost)
}
