package pgstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dedup-go/dedup/store"
)

// Defaults of TxOptions.
const (
	DefaultMaxResultSize = 64 << 10
	DefaultTxRetries     = 3
)

// CompleteTx completes, inside tx, the record of the claim that the
// handler running under ctx holds (store.ClaimFromContext): one UPDATE
// fenced by the claim's token, which joins tx, so that the record and the
// handler's own writes commit together or not at all. It then marks the
// claim completed, so the receiver does not complete it again.
//
// A claim that was lost (its lease ended and another delivery took the key
// over, or the record was deleted) makes it fail with store.ErrLeaseLost
// and change nothing: roll tx back and return the error from the handler
// (the receiver then retries the message as in flight elsewhere, without
// releasing a claim it no longer holds). Once CompleteTx succeeded, the
// handler must commit tx and return the commit's error: a handler that
// returns nil without committing would have the message acknowledged and
// its effect lost. TxHandler does all of this.
//
// The steps that the handler saved under a context that WithTx made for
// tx (and this claim) are written by the same UPDATE, so they commit with
// tx; ctx must be that context, or they are lost with it.
//
// result is what duplicates get: the handler's value encoded with the
// receiver's Codec (JSON unless configured otherwise); nil for none.
// Completing again with the token that completed the record succeeds and
// changes nothing. The statement is bounded by Options.Timeout; an error
// of the database matches store.ErrUnavailable, and tx must then be rolled
// back too.
func (s *Store) CompleteTx(ctx context.Context, tx pgx.Tx, result []byte) error {
	held, ok := store.ClaimFromContext(ctx)
	if !ok {
		return ErrNoClaim
	}
	if err := s.completeIn(ctx, tx, held, result, s.txOf(ctx, held.Key, held.Token)); err != nil {
		return err
	}
	held.MarkCompleted()
	return nil
}

// completeIn runs the fenced completion of held in tx, writing the steps
// that the handler saved in its transaction t (nil: none) with it. A
// completion without them is the statement of Complete.
func (s *Store) completeIn(ctx context.Context, tx pgx.Tx, held *store.HeldClaim, result []byte, t *txSteps) error {
	if tx == nil {
		return fmt.Errorf("pgstore: complete %q: %w: the transaction is nil", held.Key, store.ErrInvalidConfig)
	}
	if err := checkSettle("complete", held.Key, held.Token, held.Retention); err != nil {
		return err
	}
	if steps := t.take(); steps != nil {
		return s.settle(ctx, "complete", held.Key, held.Token, tx, s.sql.completeSteps, result, micros(held.Retention), steps)
	}
	return s.settle(ctx, "complete", held.Key, held.Token, tx, s.sql.complete, result, micros(held.Retention))
}

// TxFunc is a handler that does its work in tx: the business writes that
// must happen once per message. It must not commit or roll back tx.
type TxFunc[M, R any] func(ctx context.Context, tx pgx.Tx, msg M) (R, error)

// Codec encodes the handler's value for the record, as the receiver's
// Config.Codec does; dedup.JSONCodec is one.
type Codec interface {
	Marshal(v any) ([]byte, error)
}

// TxOptions configures TxHandler. A nil *TxOptions means all defaults; a
// zero field takes its default.
type TxOptions struct {
	// Tx is how each transaction begins: its isolation level, access and
	// deferrable modes. READ COMMITTED (PostgreSQL's default) suits most
	// handlers: a delivery that tries to take the key over while the
	// transaction holds the completed row waits for its commit, then finds
	// the record completed. Under REPEATABLE READ or SERIALIZABLE, a
	// concurrent change of the record (the heartbeat extending the lease
	// while fn runs) fails the transaction with a serialization failure
	// (SQLSTATE 40001), which Retries handles. Defaults to the zero
	// pgx.TxOptions: the server's default_transaction_isolation.
	Tx pgx.TxOptions

	// Codec encodes fn's value into the record's result, which duplicates
	// decode with the receiver's Config.Codec: the two must agree. Defaults
	// to encoding/json, as dedup.JSONCodec (the receiver's default).
	Codec Codec

	// MaxResultSize is the largest encoded result stored, in bytes; a
	// larger one completes the record without it, as the receiver does
	// with its Config.MaxResultSize, which this should equal. Must not be
	// negative. Defaults to 64 KiB, the receiver's default.
	MaxResultSize int

	// Retries is how many times fn runs again, in a new transaction,
	// after a serialization failure (SQLSTATE 40001) or a deadlock
	// (40P01), while the claim holds. fn must be safe to rerun: its
	// transaction was rolled back. Must not be negative. Defaults to 3.
	Retries int
}

// TxHandler returns a handler for dedup.NewReceiver that runs fn in a
// transaction of the store's pool and completes the message's record in
// that same transaction:
//
//	handler, err := pgstore.TxHandler(s, func(ctx context.Context, tx pgx.Tx, o Order) (Receipt, error) {
//		_, err := tx.Exec(ctx, `INSERT INTO orders (id, amount) VALUES ($1, $2)`, o.ID, o.Amount)
//		return Receipt{OrderID: o.ID}, err
//	}, nil)
//	rcv, err := dedup.NewReceiver(s, key, handler, &dedup.Config{Namespace: "orders"})
//
// For each message it begins a transaction (TxOptions.Tx), runs fn, and
// unless fn failed encodes its value, completes the record fenced by the
// claim's token (CompleteTx) and commits. The context fn gets carries the
// transaction (as WithTx's does): the steps fn runs under it are recorded
// in the transaction and written by the completion (see "Step records" in
// the package documentation). Before it runs fn again after a
// serialization failure or a deadlock, it calls the claim's
// StepsRolledBack. The business writes and the
// record commit together or not at all, so a crash anywhere leaves either
// both (a redelivery is a duplicate) or neither (a redelivery runs fn
// again): each effect happens once, without a unique index of its own.
//
// An error of fn, of the completion or of the commit rolls the
// transaction back and is returned: the receiver releases the claim for a
// retry, except after a lost lease (store.ErrLeaseLost: a stale worker,
// whose writes are rolled back, while the delivery that took the key over
// decides). A commit that fails on a broken connection may still have
// committed: the release then fails (the record is completed) and the
// redelivery is a duplicate, so no effect repeats. Serialization failures
// and deadlocks rerun fn (TxOptions.Retries).
//
// The database failing the transaction is the store being unavailable,
// not fn failing: the connection breaking under fn's own statements (a
// reset, an unexpected EOF, SQLSTATE class 08, the session terminated,
// 57P01-57P03), or BEGIN, the completion or COMMIT failing or timing out.
// The error then matches store.ErrUnavailable (fn's error is wrapped in a
// *store.OpError), so the receiver's Decide retries the message after
// Config.StoreRetryDelay, and the claim's attempt is given back (one
// fenced UPDATE on a new connection, after the rollback): the next
// delivery runs under the same attempt number, so an outage never brings
// a message closer to MaxAttempts. A context's error is fn's own (its
// deadline, or the receiver's cancellation), like any handler's.
//
// Outside a receiver's handler there is no claim to complete, and the
// handler fails with ErrNoClaim. That includes a delivery that a receiver
// with Config.FailOpen runs unprotected while the store is unavailable:
// with pgstore the records and the business tables share one database,
// so fail-open buys nothing, and the delivery is retried instead.
//
// BEGIN, the completion and COMMIT are each bounded by Options.Timeout;
// the commit runs even when ctx was cancelled meanwhile (the completed row
// is locked by the transaction, so no other delivery can have taken the
// key over). fn's own statements run under ctx.
func TxHandler[M, R any](s *Store, fn TxFunc[M, R], opts *TxOptions) (func(ctx context.Context, msg M) (R, error), error) {
	if s == nil {
		return nil, fmt.Errorf("pgstore: %w: TxHandler of a nil store", store.ErrInvalidConfig)
	}
	if fn == nil {
		return nil, fmt.Errorf("pgstore: %w: TxHandler of a nil function", store.ErrInvalidConfig)
	}
	var o TxOptions
	if opts != nil {
		o = *opts
	}
	if o.MaxResultSize < 0 {
		return nil, fmt.Errorf("pgstore: %w: TxOptions.MaxResultSize is %d, it must not be negative", store.ErrInvalidConfig, o.MaxResultSize)
	}
	if o.Retries < 0 {
		return nil, fmt.Errorf("pgstore: %w: TxOptions.Retries is %d, it must not be negative", store.ErrInvalidConfig, o.Retries)
	}
	h := &txHandler[M, R]{
		s:        s,
		fn:       fn,
		tx:       o.Tx,
		codec:    o.Codec,
		maxSize:  cmp.Or(o.MaxResultSize, DefaultMaxResultSize),
		retries:  cmp.Or(o.Retries, DefaultTxRetries),
		zeroSize: reflect.TypeFor[R]().Size() == 0,
	}
	if h.codec == nil {
		h.codec = jsonCodec{}
	}
	return h.handle, nil
}

type txHandler[M, R any] struct {
	s        *Store
	fn       TxFunc[M, R]
	tx       pgx.TxOptions
	codec    Codec
	maxSize  int
	retries  int
	zeroSize bool // R carries no data: the receiver stores nothing either
}

func (h *txHandler[M, R]) handle(ctx context.Context, msg M) (R, error) {
	held, ok := store.ClaimFromContext(ctx)
	if !ok {
		var zero R
		return zero, ErrNoClaim
	}
	for retry := 0; ; retry++ {
		v, err := h.run(ctx, held, msg)
		if err != nil {
			// The rollback undid the steps fn saved in the transaction:
			// the receiver must not answer a rerun's steps from what it
			// remembers of them, nor compensate them when it gives the
			// message up.
			held.StepsRolledBack()
		}
		if err == nil || retry >= h.retries || !retryable(err) || ctx.Err() != nil {
			return v, err
		}
	}
}

// run is one attempt: begin, fn, complete, commit. When the database
// fails it (the connection breaks, in fn's statements too, or does not
// answer in time), the error matches store.ErrUnavailable and, unless fn
// runs again (a serialization failure or deadlock), the claim's
// attempt is given back, once the transaction is rolled back.
func (h *txHandler[M, R]) run(ctx context.Context, held *store.HeldClaim, msg M) (v R, err error) {
	s := h.s
	defer func() {
		if errors.Is(err, store.ErrUnavailable) && !errors.Is(err, store.ErrLeaseLost) && !retryable(err) {
			s.giveBack(ctx, held)
		}
	}()
	bctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	tx, err := s.pool.BeginTx(bctx, h.tx)
	cancel()
	if err != nil {
		return v, s.fail(ctx, "begin", held.Key, err)
	}
	committed := false
	defer func() {
		if !committed {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.timeout)
			_ = tx.Rollback(rctx) // a rollback that fails leaves nothing: the server aborts the transaction
			cancel()
		}
	}()
	fctx := s.withTx(ctx, tx, held)
	if v, err = h.fn(fctx, tx, msg); err != nil {
		if ctx.Err() == nil && connBroken(err, tx) {
			// Not the handler's failure: the store's database went away
			// under it, and the transaction with it.
			err = &store.OpError{Op: "tx", Key: held.Key, Err: fmt.Errorf("pgstore: the connection of the handler's transaction failed: %w", err)}
		}
		return v, err
	}
	if err = s.completeIn(ctx, tx, held, h.encode(v), &fctx.steps); err != nil {
		return v, err
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.timeout)
	defer cancel()
	committed = true // from here on, Rollback has nothing to undo
	if err = tx.Commit(cctx); err != nil {
		return v, s.fail(cctx, "commit", held.Key, err)
	}
	held.MarkCompleted()
	return v, nil
}

// encode returns the result to store for v, or nil when it cannot be
// stored (the receiver then reports why: it encodes v itself).
func (h *txHandler[M, R]) encode(v R) (data []byte) {
	if h.zeroSize {
		return nil
	}
	defer func() {
		if recover() != nil {
			data = nil
		}
	}()
	data, err := h.codec.Marshal(v)
	if err != nil || len(data) > h.maxSize {
		return nil
	}
	return data
}

// connBroken reports whether err, which fn returned, is the failure of
// the connection under tx rather than of fn: a server error of class 08
// (connection exception) or 57P01-57P03 (the server shutting down or
// terminating the session), or any error other than a context's once the
// connection is closed (a reset, an unexpected EOF, a write that failed:
// pgx closes the connection on each). A context's error is fn's own, as
// for any handler: its deadline, or the receiver's cancellation.
func connBroken(err error, tx pgx.Tx) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", "57P02", "57P03":
			return true
		}
		return strings.HasPrefix(pgErr.Code, "08")
	}
	return tx.Conn().IsClosed()
}

// giveBack uncounts the attempt of held's claim after the database failed
// it (the next claim takes the same attempt number again), so that an
// outage does not bring a message closer to MaxAttempts. It is fenced by
// the claim's token and state, runs on a new connection of the pool
// within Options.Timeout, and changes nothing when the claim was taken
// over, completed (a commit whose answer was lost) or gone. A failure
// leaves the attempt counted, as a crash would: it is logged at debug
// level only, the caller reports the outage.
func (s *Store) giveBack(ctx context.Context, held *store.HeldClaim) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.timeout)
	defer cancel()
	var err error
	for range 2 { // the first may get an idle connection that broke too
		if _, err = s.pool.Exec(cctx, s.sql.giveBack, s.cfg.mode, held.Key, held.Token); err == nil || cctx.Err() != nil {
			break
		}
	}
	if err != nil {
		s.cfg.logger.DebugContext(ctx, "pgstore: the attempt of a claim the database failed stays counted",
			slog.String("key", held.Key), slog.Any("error", err))
	}
}

// retryable reports whether err is a serialization failure or a deadlock,
// after which the transaction can be run again.
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}

type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error) { return json.Marshal(v) }
