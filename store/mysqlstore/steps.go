package mysqlstore

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/dedup-go/dedup/store"
)

var _ store.StepStore = (*Store)(nil)

// LoadSteps returns the step records of req.Key when req.Token holds it,
// processing: one plain read of the row (no lock), within
// Options.Timeout. Any other token, a settled record and an absent or
// gone key get store.ErrLeaseLost.
//
// Inside a handler made by TxHandler (or under WithTx), for the claim it
// runs under, the read runs in the handler's transaction (a plain read: no
// lock), and the steps that the transaction recorded so far are returned
// too (see SaveStep).
func (s *Store) LoadSteps(ctx context.Context, req store.StepsRequest) ([]store.StepRecord, error) {
	const op = "load steps"
	if err := checkKey(op, req.Key); err != nil {
		return nil, err
	}
	if req.Token.IsZero() {
		return nil, errLeaseLost(op, req.Key)
	}
	if err := ctx.Err(); err != nil {
		return nil, errContext(op, req.Key, err)
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	defer cancel()
	ts := s.txSteps(ctx, req.Key, req.Token)
	var raw []byte
	st, err := s.stmt(cctx, s.sql.loadSteps)
	if err == nil {
		if ts != nil {
			st = ts.tx.StmtContext(cctx, st)
		}
		err = st.QueryRowContext(cctx, []byte(req.Key), req.Token[:]).Scan(&raw)
	}
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, errLeaseLost(op, req.Key)
	case err != nil:
		return nil, s.fail(ctx, op, req.Key, err)
	}
	if ts != nil {
		raw = ts.append(raw)
	}
	recs, err := decodeSteps(raw)
	if err != nil {
		return nil, fmt.Errorf("mysqlstore: %s %q: %w", op, req.Key, err)
	}
	return recs, nil
}

// SaveStep records req.Name with req.Value for req.Key when req.Token
// holds it, processing: one UPDATE fenced by the token, as Complete is,
// which appends the step's entry to the row's steps (a later entry of a
// name replaces an earlier one), within Options.Timeout; a deadlock or a
// lock wait timeout runs it again. A token that does not hold the key
// gets store.ErrLeaseLost, and nothing is written. req.Retention is not
// needed: the steps live and die with their row.
//
// Inside a handler made by TxHandler (or under WithTx), for the claim it
// runs under, the step is recorded in the handler's transaction instead,
// so that it commits with the handler's writes or not at all: SaveStep
// checks, with a plain read in the transaction (no lock), that the token
// holds the key, and keeps the entry until the completion in that
// transaction (CompleteTx) writes the transaction's entries in one fenced
// UPDATE, just before its own.
// The row is then locked only from that UPDATE to the commit, as without
// steps: the receiver's heartbeat, which updates the row to extend the
// lease, does not wait for the transaction while the function runs. Under
// REPEATABLE READ the check reads the transaction's snapshot, which may
// predate the loss of the claim: that UPDATE then fails with
// store.ErrLeaseLost, and the transaction rolls back.
func (s *Store) SaveStep(ctx context.Context, req store.SaveStepRequest) error {
	const op = "save step"
	if !store.StepNameValid(req.Name) {
		return fmt.Errorf("mysqlstore: %s %q: %w: the step name %q is not 1 to %d bytes of valid UTF-8", op, req.Key, store.ErrInvalidConfig, req.Name, store.MaxStepNameLen)
	}
	if err := checkKey(op, req.Key); err != nil {
		return err
	}
	if req.Token.IsZero() {
		return errLeaseLost(op, req.Key)
	}
	if err := ctx.Err(); err != nil {
		return errContext(op, req.Key, err)
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	defer cancel()
	if ts := s.txSteps(ctx, req.Key, req.Token); ts != nil {
		var state string
		st, err := s.stmt(cctx, s.sql.holds)
		if err == nil {
			err = ts.tx.StmtContext(cctx, st).QueryRowContext(cctx, []byte(req.Key), req.Token[:]).Scan(&state)
		}
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return errLeaseLost(op, req.Key)
		case err != nil:
			return s.fail(ctx, op, req.Key, err)
		case stateOf(state) != store.StateProcessing:
			return errLeaseLost(op, req.Key)
		}
		ts.add(req.Name, req.Value)
		return nil
	}
	entry := encodeStep(nil, req.Name, req.Value)
	args := []any{entry, []byte(req.Key), req.Token[:]}
	res, err := s.exec(cctx, s.sql.saveStep, args...)
	for s.again(cctx, err) {
		res, err = s.exec(cctx, s.sql.saveStep, args...)
	}
	if err != nil {
		return s.fail(ctx, op, req.Key, err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return errLeaseLost(op, req.Key)
	}
	return nil
}

// txStepsKey is the context key of a transaction's *txSteps.
type txStepsKey struct{}

// txSteps are the steps that the handler running in tx recorded: written
// in tx, by writeSteps, just before its completion (completeIn). A
// transaction that rolls back drops them with it. The reads of SaveStep
// and LoadSteps run in tx too: a step never needs a second connection of
// the pool while the transaction holds one.
type txSteps struct {
	s     *Store
	tx    *sql.Tx
	key   string
	token store.Token

	mu      sync.Mutex
	entries []byte // encoded, in the order they were saved, not yet written
}

// txContext is a handler's context carrying its transaction's steps: one
// allocation for both.
type txContext struct {
	context.Context
	steps txSteps
}

func (c *txContext) Value(key any) any {
	if key == (txStepsKey{}) {
		return &c.steps
	}
	return c.Context.Value(key)
}

// withTx returns ctx carrying tx, the transaction of the claim held.
func (s *Store) withTx(ctx context.Context, tx *sql.Tx, held *store.HeldClaim) *txContext {
	return &txContext{Context: ctx, steps: txSteps{s: s, tx: tx, key: held.Key, token: held.Token}}
}

// WithTx returns ctx carrying tx, for a handler that manages its own
// transaction and completes the record in it with CompleteTx: the steps
// that the handler runs under the returned context, for the claim that
// ctx holds (store.ClaimFromContext), are recorded in tx, and written by
// CompleteTx, which must be given that context too. They commit with tx
// or not at all: a transaction committed without CompleteTx keeps none of
// them. TxHandler does this itself. Outside a handler (ctx holds no
// claim), or with a nil tx, it returns ctx as it is, and the steps are
// recorded at once, outside any transaction.
func (s *Store) WithTx(ctx context.Context, tx *sql.Tx) context.Context {
	held, ok := store.ClaimFromContext(ctx)
	if !ok || tx == nil {
		return ctx
	}
	return s.withTx(ctx, tx, held)
}

// txSteps returns the steps of the transaction that ctx carries for the
// claim of key held by token on s, else nil.
func (s *Store) txSteps(ctx context.Context, key string, token store.Token) *txSteps {
	ts, ok := ctx.Value(txStepsKey{}).(*txSteps)
	if !ok || ts.s != s || ts.key != key || ts.token != token {
		return nil
	}
	return ts
}

func (ts *txSteps) add(name string, value []byte) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.entries = encodeStep(ts.entries, name, value)
}

// append returns raw, the row's steps, followed by the run's own, which
// replace those of the same names.
func (ts *txSteps) append(raw []byte) []byte {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return append(raw, ts.entries...)
}

// writeSteps writes the steps not yet written, if any, in ts.tx: one
// UPDATE fenced by the claim's token, within Options.Timeout. A token
// that no longer holds the key is store.ErrLeaseLost. No steps, no
// statement.
func (s *Store) writeSteps(ctx context.Context, ts *txSteps) error {
	const op = "save step"
	ts.mu.Lock()
	defer ts.mu.Unlock()
	entries := ts.entries
	if len(entries) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return errContext(op, ts.key, err)
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	defer cancel()
	st, err := s.stmt(cctx, s.sql.saveStep)
	var res sql.Result
	if err == nil {
		res, err = ts.tx.StmtContext(cctx, st).ExecContext(cctx, entries, []byte(ts.key), ts.token[:])
	}
	if err != nil {
		return s.fail(ctx, op, ts.key, err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return errLeaseLost(op, ts.key)
	}
	ts.entries = nil // written: a completion again writes them not again
	return nil
}

// A step's entry in the steps column is stepEntry, then the name's length
// and the name, then the value's length and the value (lengths as
// unsigned varints): entries are appended one after the other, so that a
// step is recorded by one UPDATE that needs no read of the column, and a
// later entry of a name replaces an earlier one when they are read.
const stepEntry = 1

// encodeStep appends the entry of name and value to b.
func encodeStep(b []byte, name string, value []byte) []byte {
	b = append(b, stepEntry)
	b = binary.AppendUvarint(b, uint64(len(name)))
	b = append(b, name...)
	b = binary.AppendUvarint(b, uint64(len(value)))
	return append(b, value...)
}

// errBadSteps: the steps column holds what encodeStep did not write.
var errBadSteps = errors.New("the steps column is malformed")

// decodeSteps reads the entries of a steps column (nil: none), a later
// entry of a name replacing an earlier one, in the order of each name's
// first entry. The values are raw's own bytes: raw must not be used
// again.
func decodeSteps(raw []byte) ([]store.StepRecord, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var (
		out   []store.StepRecord
		index map[string]int
	)
	field := func(at int) ([]byte, int, error) {
		n, size := binary.Uvarint(raw[at:])
		if size <= 0 || n > uint64(len(raw)-at-size) {
			return nil, 0, fmt.Errorf("%w at byte %d", errBadSteps, at)
		}
		start := at + size
		end := start + int(n)
		return raw[start:end:end], end, nil
	}
	for at := 0; at < len(raw); {
		if raw[at] != stepEntry {
			return nil, fmt.Errorf("%w at byte %d", errBadSteps, at)
		}
		name, next, err := field(at + 1)
		if err != nil {
			return nil, err
		}
		value, next, err := field(next)
		if err != nil {
			return nil, err
		}
		at = next
		rec := store.StepRecord{Name: string(name), Value: value}
		if i, ok := index[rec.Name]; ok {
			out[i] = rec
			continue
		}
		if index == nil {
			index = make(map[string]int)
		}
		index[rec.Name] = len(out)
		out = append(out, rec)
	}
	return out, nil
}
