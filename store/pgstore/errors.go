package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dedup-go/dedup/store"
)

// ErrNoClaim: CompleteTx, or a handler made by TxHandler, ran outside a
// dedup handler, so there is no claim in its context to complete. It is a
// programming error, not a store failure.
var ErrNoClaim = errors.New("pgstore: no claim in the context: it runs inside a dedup handler only")

// fail wraps an error of a statement. When the caller's ctx ended, the
// error is the context's; anything else (a refused connection, a timeout,
// a server error) is a *store.OpError, which matches store.ErrUnavailable.
func (s *Store) fail(ctx context.Context, op, key string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return errContext(op, key, cerr)
	}
	return &store.OpError{Op: op, Key: key, Err: fmt.Errorf("pgstore: %w", s.timedOut(err))}
}

// timedOut says which limit a deadline was, and what a missing table
// needs.
func (s *Store) timedOut(err error) error {
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("no answer within %v (Options.Timeout): %w", s.cfg.timeout, err)
	case errors.As(err, &pgErr) && pgErr.Code == "42P01":
		return fmt.Errorf("table %s does not exist: call Store.Migrate or apply Store.SchemaSQL: %w", s.cfg.table.plain, err)
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
