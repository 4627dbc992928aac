package mysqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"reflect"
	"time"

	"github.com/go-sql-driver/mysql"

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
// result is what duplicates get: the handler's value encoded with the
// receiver's Codec (JSON unless configured otherwise); nil for none.
// Completing again with the token that completed the record succeeds and
// changes nothing. The statement is bounded by Options.Timeout; an error
// of the database matches store.ErrUnavailable, and tx must then be rolled
// back too.
//
// Steps that the handler ran under a context of WithTx(ctx, tx), given
// here too, are written in tx first, by one more UPDATE fenced the same
// way (none without steps).
func (s *Store) CompleteTx(ctx context.Context, tx *sql.Tx, result []byte) error {
	held, ok := store.ClaimFromContext(ctx)
	if !ok {
		return ErrNoClaim
	}
	if err := s.completeIn(ctx, tx, held, result); err != nil {
		return err
	}
	held.MarkCompleted()
	return nil
}

// completeIn runs the fenced completion of held in tx, after writing the
// steps that ctx carries for tx (WithTx).
func (s *Store) completeIn(ctx context.Context, tx *sql.Tx, held *store.HeldClaim, res []byte) error {
	if tx == nil {
		return fmt.Errorf("mysqlstore: complete %q: %w: the transaction is nil", held.Key, store.ErrInvalidConfig)
	}
	if err := checkSettle("complete", held.Key, held.Token, held.Retention); err != nil {
		return err
	}
	if ts := s.txSteps(ctx, held.Key, held.Token); ts != nil && ts.tx == tx {
		if err := s.writeSteps(ctx, ts); err != nil {
			return err
		}
	}
	_, err := s.settle(ctx, "complete", held.Key, held.Token, tx, s.sql.complete, result(res), micros(held.Retention))
	return err
}

// TxFunc is a handler that does its work in tx: the business writes that
// must happen once per message. It must not commit or roll back tx.
type TxFunc[M, R any] func(ctx context.Context, tx *sql.Tx, msg M) (R, error)

// Codec encodes the handler's value for the record, as the receiver's
// Config.Codec does; dedup.JSONCodec is one.
type Codec interface {
	Marshal(v any) ([]byte, error)
}

// TxOptions configures TxHandler. A nil *TxOptions means all defaults; a
// zero field takes its default.
type TxOptions struct {
	// Tx is how each transaction begins: its isolation level and access
	// mode. REPEATABLE READ (InnoDB's default) and READ COMMITTED both
	// work: the completion is an UPDATE, which InnoDB runs on the latest
	// version of the row whatever the level, so a heartbeat that extended
	// the lease while fn ran does not fail it (as it would under
	// PostgreSQL's REPEATABLE READ), and a delivery that tries to take the
	// key over once the completion holds the row waits for the commit.
	// Defaults to the zero sql.TxOptions: the session's isolation level.
	Tx sql.TxOptions

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
	// after InnoDB broke a deadlock by rolling the transaction back (error
	// 1213), or a lock wait timed out (1205, innodb_lock_wait_timeout),
	// while the claim holds. fn must be safe to rerun: its transaction was
	// rolled back. Must not be negative. Defaults to 3.
	Retries int
}

// TxHandler returns a handler for dedup.NewReceiver that runs fn in a
// transaction of the store's *sql.DB and completes the message's record in
// that same transaction:
//
//	handler, err := mysqlstore.TxHandler(s, func(ctx context.Context, tx *sql.Tx, o Order) (Receipt, error) {
//		_, err := tx.ExecContext(ctx, `INSERT INTO orders (id, amount) VALUES (?, ?)`, o.ID, o.Amount)
//		return Receipt{OrderID: o.ID}, err
//	}, nil)
//	rcv, err := dedup.NewReceiver(s, key, handler, &dedup.Config{Namespace: "orders"})
//
// For each message it begins a transaction (TxOptions.Tx), runs fn, and
// unless fn failed encodes its value, completes the record fenced by the
// claim's token (CompleteTx) and commits. The business writes and the
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
// redelivery is a duplicate, so no effect repeats.
//
// Deadlocks (1213) and lock wait timeouts (1205), in fn's statements or
// the completion, are the database's contention, not fn failing: fn runs
// again in a new transaction (TxOptions.Retries). When they persist, the
// error matches store.ErrUnavailable, like the database failing the
// transaction: the connection breaking under fn's own statements (a
// reset, an EOF, the session killed: errors 1053, 1927, 2006, 2013,
// 4031), or BEGIN, the completion or COMMIT failing or timing out. The
// receiver's Decide then retries the message after
// Config.StoreRetryDelay, and the claim's attempt is given back (one
// fenced UPDATE on another connection, after the rollback): the next
// delivery runs under the same attempt number, so an outage never brings
// a message closer to MaxAttempts. A context's error is fn's own (its
// deadline, or the receiver's cancellation), like any handler's.
//
// Outside a receiver's handler there is no claim to complete, and the
// handler fails with ErrNoClaim. That includes a delivery that a receiver
// with Config.FailOpen runs unprotected while the store is unavailable:
// the records and the business tables share one database, so fail-open
// buys nothing, and the delivery is retried instead.
//
// BEGIN and the completion are each bounded by Options.Timeout, and
// COMMIT by the DSN's readTimeout and writeTimeout (database/sql's Commit
// takes no context: set them for a network that may drop packets). The
// commit runs even when ctx was cancelled meanwhile (the completed row is
// locked by the transaction, so no other delivery can have taken the key
// over). fn's own statements run under ctx.
//
// The steps fn runs (dedup.Step) under its context are recorded in its
// transaction, written just before the completion, and commit with it;
// before fn runs again after a deadlock or a lock wait timeout, the
// claim's StepsRolledBack is called (see the package documentation).
func TxHandler[M, R any](s *Store, fn TxFunc[M, R], opts *TxOptions) (func(ctx context.Context, msg M) (R, error), error) {
	if s == nil {
		return nil, fmt.Errorf("mysqlstore: %w: TxHandler of a nil store", store.ErrInvalidConfig)
	}
	if fn == nil {
		return nil, fmt.Errorf("mysqlstore: %w: TxHandler of a nil function", store.ErrInvalidConfig)
	}
	var o TxOptions
	if opts != nil {
		o = *opts
	}
	if o.MaxResultSize < 0 {
		return nil, fmt.Errorf("mysqlstore: %w: TxOptions.MaxResultSize is %d, it must not be negative", store.ErrInvalidConfig, o.MaxResultSize)
	}
	if o.Retries < 0 {
		return nil, fmt.Errorf("mysqlstore: %w: TxOptions.Retries is %d, it must not be negative", store.ErrInvalidConfig, o.Retries)
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
	tx       sql.TxOptions
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
			// The steps the rolled back transaction recorded are gone
			// with it: the receiver forgets what it remembers of them
			// (for a rerun, and for the compensations of a message it
			// gives up).
			held.StepsRolledBack()
		}
		if err == nil || !retryable(err) || ctx.Err() != nil {
			return v, err
		}
		if retry >= h.retries {
			// Contention that outlasted the retries is the database's,
			// not fn's: retried after StoreRetryDelay, its attempt given
			// back.
			err = &store.OpError{Op: "tx", Key: held.Key, Err: fmt.Errorf("mysqlstore: the transaction failed %d times on lock contention: %w", retry+1, err)}
			h.s.giveBack(ctx, held)
			return v, err
		}
		h.s.retried.Add(1)
	}
}

// run is one attempt: begin, fn, its steps and the completion, commit.
// When the database fails it (the connection breaks, in fn's statements
// too, or does not answer in time), the error matches
// store.ErrUnavailable and the claim's attempt is given back, once the
// transaction is rolled back. A deadlock
// or lock wait timeout is returned as it is, for handle to retry.
func (h *txHandler[M, R]) run(ctx context.Context, held *store.HeldClaim, msg M) (v R, err error) {
	s := h.s
	defer func() {
		if errors.Is(err, store.ErrUnavailable) && !errors.Is(err, store.ErrLeaseLost) && !retryable(err) {
			s.giveBack(ctx, held)
		}
	}()
	tx, stop, err := h.begin(ctx)
	if err != nil {
		return v, &store.OpError{Op: "begin", Key: held.Key, Err: fmt.Errorf("mysqlstore: %w", err)}
	}
	defer stop()
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback() // a rollback that fails leaves nothing: the server ends the transaction with the connection
		}
	}()
	fctx := s.withTx(ctx, tx, held)
	if v, err = h.fn(fctx, tx, msg); err != nil {
		if ctx.Err() == nil && connBroken(err) {
			// Not the handler's failure: the store's database went away
			// under it, and the transaction with it.
			err = &store.OpError{Op: "tx", Key: held.Key, Err: fmt.Errorf("mysqlstore: the connection of the handler's transaction failed: %w", err)}
		}
		return v, err
	}
	if err = s.completeIn(fctx, tx, held, h.encode(v)); err != nil {
		return v, err
	}
	committed = true // from here on, Rollback has nothing to undo
	if err = tx.Commit(); err != nil {
		return v, s.fail(context.WithoutCancel(ctx), "commit", held.Key, err)
	}
	held.MarkCompleted()
	return v, nil
}

// begin begins a transaction within Options.Timeout. The transaction
// lives under a context of its own, which ctx's end does not cancel (the
// commit then runs all the same, and fn's statements, which run under
// ctx, fail by themselves); stop ends it once the transaction is over.
func (h *txHandler[M, R]) begin(ctx context.Context) (*sql.Tx, context.CancelFunc, error) {
	txCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	late := time.AfterFunc(h.s.cfg.timeout, stop)
	tx, err := h.s.db.BeginTx(txCtx, &h.tx)
	if !late.Stop() {
		if err == nil {
			_ = tx.Rollback()
		}
		stop()
		return nil, nil, fmt.Errorf("no answer to BEGIN within %v (Options.Timeout): %w", h.s.cfg.timeout, context.DeadlineExceeded)
	}
	if err != nil {
		stop()
		return nil, nil, err
	}
	return tx, stop, nil
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

// connLost are the server's errors that end the session: the server
// shutting down (1053), the connection killed (1927, MariaDB), gone away
// or lost (2006, 2013), closed for inactivity (4031, MySQL 8).
var connLost = map[uint16]bool{1053: true, 1927: true, 2006: true, 2013: true, 4031: true}

// connBroken reports whether err, which fn returned, is the failure of the
// connection under its transaction rather than of fn: a server error that
// ends the session, or the driver's own (an invalid or bad connection, an
// EOF, a network error). A context's error is fn's own, as for any
// handler: its deadline, or the receiver's cancellation.
func connBroken(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var myErr *mysql.MySQLError
	if errors.As(err, &myErr) {
		return connLost[myErr.Number]
	}
	var netErr net.Error
	return errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &netErr)
}

// giveBack uncounts the attempt of held's claim after the database failed
// it (the next claim takes the same attempt number again), so that an
// outage does not bring a message closer to MaxAttempts. It is fenced by
// the claim's token and state, runs on a connection of the pool within
// Options.Timeout, and changes nothing when the claim was taken over,
// completed (a commit whose answer was lost) or gone. A failure leaves
// the attempt counted, as a crash would: it is logged at debug level
// only, the caller reports the outage.
func (s *Store) giveBack(ctx context.Context, held *store.HeldClaim) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.timeout)
	defer cancel()
	var err error
	for range 2 { // the first may get an idle connection that broke too
		if _, err = s.exec(cctx, s.sql.giveBack, []byte(held.Key), held.Token[:]); err == nil || cctx.Err() != nil {
			break
		}
	}
	if err != nil {
		s.cfg.logger.DebugContext(ctx, "mysqlstore: the attempt of a claim the database failed stays counted",
			slog.String("key", held.Key), slog.Any("error", err))
	}
}

type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error) { return json.Marshal(v) }
