package pgstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/dedup-go/dedup/store"
)

// stepsFormat is the first byte of the steps column, which holds the
// record's step records in a log of this store's own: that byte, then
// every saved step as the uvarint length of its name, the name, the
// uvarint length of its value and the value. A save appends its step to
// the log in one UPDATE, without reading it first; a name saved again is
// appended again, and its last entry is the one read. Names and values
// are bytes as given: a name may hold any valid UTF-8, NUL included, which
// neither text nor jsonb could hold, and a value takes no base64.
const stepsFormat = 1

// appendStep appends the log entry of one step to dst.
func appendStep(dst []byte, name string, value []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(name)))
	dst = append(dst, name...)
	dst = binary.AppendUvarint(dst, uint64(len(value)))
	return append(dst, value...)
}

// encodeSteps returns the log entries of steps, without the format byte.
func encodeSteps(steps []store.StepRecord) []byte {
	n := 0
	for _, st := range steps {
		n += 2*binary.MaxVarintLen64 + len(st.Name) + len(st.Value)
	}
	out := make([]byte, 0, n)
	for _, st := range steps {
		out = appendStep(out, st.Name, st.Value)
	}
	return out
}

// decodeSteps reads the steps column: nil (NULL) is no step records. The
// values share log's memory, each capped at its own end.
func decodeSteps(log []byte) ([]store.StepRecord, error) {
	if log == nil {
		return nil, nil
	}
	if len(log) == 0 || log[0] != stepsFormat {
		return nil, errors.New("pgstore: the steps column holds bytes of another format than the store's")
	}
	var out []store.StepRecord
	var index map[string]int // name to its place in out, once out is long
	for rest := log[1:]; len(rest) > 0; {
		name, r, ok := field(rest)
		if !ok {
			return nil, errors.New("pgstore: the steps column is cut short")
		}
		value, r, ok := field(r)
		if !ok {
			return nil, errors.New("pgstore: the steps column is cut short")
		}
		rest = r
		st := store.StepRecord{Name: string(name), Value: value}
		i := -1
		if index != nil {
			if j, seen := index[st.Name]; seen {
				i = j
			}
		} else {
			for j := range out {
				if out[j].Name == st.Name {
					i = j
					break
				}
			}
		}
		if i >= 0 {
			out[i] = st // the last entry of a name is its record
			continue
		}
		out = append(out, st)
		if index == nil && len(out) > 16 {
			index = make(map[string]int, 2*len(out))
			for j, o := range out {
				index[o.Name] = j
			}
		} else if index != nil {
			index[st.Name] = len(out) - 1
		}
	}
	return out, nil
}

// field cuts one length-prefixed field off b: the field, capped at its
// end so that an append to it never writes over the next, and the rest.
func field(b []byte) (f, rest []byte, ok bool) {
	n, w := binary.Uvarint(b)
	if w <= 0 || n > uint64(len(b)-w) {
		return nil, nil, false
	}
	end := w + int(n)
	return b[w:end:end], b[end:], true
}

// checkSteps checks the key and token of a step call. A zero token never
// holds a key: ErrLeaseLost without a round trip.
func checkSteps(op, key string, token store.Token) error {
	if err := checkKey(op, key); err != nil {
		return err
	}
	if token.IsZero() {
		return errLeaseLost(op, key)
	}
	return nil
}

// LoadSteps returns the step records of req.Key when req.Token holds it
// (processing under that token, its lease live or ended but not taken
// over, as Complete requires), in one SELECT fenced by the token: no row
// is store.ErrLeaseLost. Within the transaction of a handler that
// TxHandler runs (or that WithTx names), it reads in that transaction and
// adds the steps saved in it so far.
func (s *Store) LoadSteps(ctx context.Context, req store.StepsRequest) ([]store.StepRecord, error) {
	const op = "load steps"
	if err := checkSteps(op, req.Key, req.Token); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, errContext(op, req.Key, err)
	}
	var db querier = s.pool
	t := s.txOf(ctx, req.Key, req.Token)
	if t != nil {
		db = t.tx
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	defer cancel()
	var log []byte
	err := db.QueryRow(cctx, s.sql.loadSteps, s.cfg.mode, req.Key, req.Token).Scan(&log)
	for t == nil && again(cctx, err) {
		err = db.QueryRow(cctx, s.sql.loadSteps, s.cfg.mode, req.Key, req.Token).Scan(&log)
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, errLeaseLost(op, req.Key)
	case err != nil:
		return nil, s.fail(ctx, op, req.Key, err)
	}
	steps, err := decodeSteps(log)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %s %q: %w", op, req.Key, err)
	}
	if t != nil {
		steps = t.overlay(steps)
	}
	return steps, nil
}

// SaveStep records req.Name with req.Value for req.Key held by req.Token,
// in one UPDATE fenced by the token, as Complete is, that appends the step
// to the row's log (a name saved again replaces the earlier record; see
// the package documentation): a token that does not hold the key is
// store.ErrLeaseLost, and nothing is recorded. A bad name is
// store.ErrInvalidConfig.
//
// Within the transaction of a handler that TxHandler runs (or that WithTx
// names), for the claim of that handler, the step is recorded in that
// transaction instead: a fenced read in it answers ErrLeaseLost at once,
// and the step is written by the completion of the record in the
// transaction (TxHandler's, or CompleteTx), so that it commits with the
// transaction or not at all, and the row is not locked before the
// completion (the receiver's heartbeat goes on extending the lease).
func (s *Store) SaveStep(ctx context.Context, req store.SaveStepRequest) error {
	const op = "save step"
	if err := checkKey(op, req.Key); err != nil {
		return err
	}
	if !store.StepNameValid(req.Name) {
		return fmt.Errorf("pgstore: %s %q: %w: the step name is %d bytes (%q); it must be 1 to %d bytes of valid UTF-8",
			op, req.Key, store.ErrInvalidConfig, len(req.Name), req.Name, store.MaxStepNameLen)
	}
	if req.Token.IsZero() {
		return errLeaseLost(op, req.Key)
	}
	if t := s.txOf(ctx, req.Key, req.Token); t != nil {
		return s.saveInTx(ctx, t, req)
	}
	return s.settle(ctx, op, req.Key, req.Token, s.pool, s.sql.saveStep, appendStep(nil, req.Name, req.Value))
}

// saveInTx records a step of the claim of t's handler in its transaction:
// checked at once by a fenced read, written by the completion.
func (s *Store) saveInTx(ctx context.Context, t *txSteps, req store.SaveStepRequest) error {
	const op = "save step"
	if err := ctx.Err(); err != nil {
		return errContext(op, req.Key, err)
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	defer cancel()
	var held bool
	err := t.tx.QueryRow(cctx, s.sql.holds, s.cfg.mode, req.Key, req.Token).Scan(&held)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return errLeaseLost(op, req.Key)
	case err != nil:
		return s.fail(ctx, op, req.Key, err)
	}
	t.save(req.Name, req.Value)
	return nil
}

// txKey is the context key of a handler's *txSteps.
type txKey struct{}

// txSteps is the transaction of a handler, as the store's step calls see
// it from the handler's context: the store, the transaction and the claim
// (key and token) whose steps it records, and the steps saved in it, which
// the completion in the transaction writes.
type txSteps struct {
	s     *Store
	tx    pgx.Tx
	key   string
	token store.Token

	mu      sync.Mutex
	pending []store.StepRecord
	done    bool // completed: later steps go to the pool
}

// txContext is a handler's context carrying its transaction: one
// allocation for both.
type txContext struct {
	context.Context
	steps txSteps
}

func (c *txContext) Value(key any) any {
	if key == (txKey{}) {
		return &c.steps
	}
	return c.Context.Value(key)
}

// withTx returns ctx carrying tx, the transaction of the claim held.
func (s *Store) withTx(ctx context.Context, tx pgx.Tx, held *store.HeldClaim) *txContext {
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
func (s *Store) WithTx(ctx context.Context, tx pgx.Tx) context.Context {
	held, ok := store.ClaimFromContext(ctx)
	if !ok || tx == nil {
		return ctx
	}
	return s.withTx(ctx, tx, held)
}

// txOf returns the transaction that ctx carries for the claim of key and
// token on this store, or nil: the steps of another store or claim, and
// those saved once the transaction completed the record, are recorded
// outside it.
func (s *Store) txOf(ctx context.Context, key string, token store.Token) *txSteps {
	t, _ := ctx.Value(txKey{}).(*txSteps)
	if t == nil || t.s != s || t.key != key || t.token != token {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return nil
	}
	return t
}

// save keeps a step for the completion, replacing one of the same name.
func (t *txSteps) save(name string, value []byte) {
	st := store.StepRecord{Name: name, Value: append([]byte{}, value...)}
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range t.pending {
		if t.pending[i].Name == name {
			t.pending[i] = st
			return
		}
	}
	t.pending = append(t.pending, st)
}

// overlay returns steps, read in the transaction, with the steps saved in
// it since.
func (t *txSteps) overlay(steps []store.StepRecord) []store.StepRecord {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.pending {
		p.Value = append([]byte{}, p.Value...)
		i := 0
		for i < len(steps) && steps[i].Name != p.Name {
			i++
		}
		if i < len(steps) {
			steps[i] = p
		} else {
			steps = append(steps, p)
		}
	}
	return steps
}

// take returns the encoded steps saved in the transaction (nil for none,
// or no transaction), for its completion: from then on, steps are
// recorded outside it.
func (t *txSteps) take() []byte {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.done = true
	if len(t.pending) == 0 {
		return nil
	}
	return encodeSteps(t.pending)
}
