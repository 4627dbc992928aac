package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"

	"github.com/dedup-go/dedup/store"
)

// AcquireBatch runs Acquire for every request with one read of all the
// keys, one claim statement (INSERT ... ON DUPLICATE KEY UPDATE of many
// rows, in key order, so that two batches never wait on each other's rows
// crosswise) over those the read did not answer, and one read of those. A
// key repeated in reqs is claimed by its first request, which the later
// ones find holding it; a later request that could claim what the first
// one could not (another fingerprint, refused as reused) goes to a second
// round. A request with bad input gets the error Acquire would give it,
// and a cancelled context fails every other request with its error.
func (s *Store) AcquireBatch(ctx context.Context, reqs []store.AcquireRequest) []store.AcquireOutcome {
	out := make([]store.AcquireOutcome, len(reqs))
	var pending []int
	for i, req := range reqs {
		if out[i].Err = checkAcquire(req); out[i].Err == nil {
			pending = append(pending, i)
		}
	}
	if err := ctx.Err(); err != nil {
		for _, i := range pending {
			out[i].Err = errContext("acquire", reqs[i].Key, err)
		}
		return out
	}
	for len(pending) > 0 {
		pending = s.acquireRound(ctx, reqs, pending, out)
	}
	return out
}

// acquireRound claims the first pending request of every key, answers the
// later requests of a key from the outcome of its first, and returns those
// it could not answer.
func (s *Store) acquireRound(ctx context.Context, reqs []store.AcquireRequest, pending []int, out []store.AcquireOutcome) []int {
	first := make(map[string]int, len(pending))
	var round []int
	for _, i := range pending {
		if _, ok := first[reqs[i].Key]; !ok {
			first[reqs[i].Key] = i
			round = append(round, i)
		}
	}
	sub := make([]store.AcquireRequest, len(round))
	for n, i := range round {
		sub[n] = reqs[i]
	}
	for n, o := range s.acquireKeys(ctx, sub) {
		out[round[n]] = o
	}
	var next []int
	deferred := make(map[string]bool)
	for _, j := range pending {
		key := reqs[j].Key
		i := first[key]
		if i == j {
			continue
		}
		if deferred[key] {
			next = append(next, j)
			continue
		}
		out[j] = later(out[i], reqs[j])
		if out[j].Err == nil && !out[j].Claim.Acquired && out[j].Claim.Record.State == 0 {
			// The first request was refused for its fingerprint and left
			// the record as it was, which this one may claim.
			deferred[key] = true
			next = append(next, j)
		}
	}
	return next
}

// later answers a request whose key an earlier request of the batch just
// claimed or found held, as the store would have answered it right after:
// the record is the same, so only the fingerprint may differ. A zero
// outcome means it cannot be answered without the store.
func later(first store.AcquireOutcome, req store.AcquireRequest) store.AcquireOutcome {
	switch {
	case first.Err != nil && !errors.Is(first.Err, store.ErrKeyReused):
		return store.AcquireOutcome{Err: first.Err}
	case first.Err != nil:
		return store.AcquireOutcome{}
	}
	rec := first.Claim.Record
	if reused(rec.Fingerprint, req.Fingerprint) {
		return store.AcquireOutcome{Err: errReused(req.Key, rec.State)}
	}
	return store.AcquireOutcome{Claim: store.Claim{Record: rec}}
}

// CompleteBatch runs Complete for every request in one transaction (see
// CompleteBatchReport).
func (s *Store) CompleteBatch(ctx context.Context, reqs []store.CompleteRequest) []error {
	out := s.CompleteBatchReport(ctx, reqs)
	errs := make([]error, len(out))
	for i, o := range out {
		errs[i] = o.Err
	}
	return errs
}

// CompleteBatchReport runs Complete for every request in one short
// transaction: a locking read of the keys (in key order), then one UPDATE
// of the rows their tokens hold, then COMMIT. A key and token repeated in
// reqs are written by the first request, whose result is the one stored;
// the later ones report store.CompletionUnchanged, as do requests whose
// token completed the record before.
func (s *Store) CompleteBatchReport(ctx context.Context, reqs []store.CompleteRequest) []store.CompleteOutcome {
	done := make([]store.Completion, len(reqs))
	errs := make([]error, len(reqs))
	var valid []int
	for i, req := range reqs {
		if errs[i] = checkSettle("complete", req.Key, req.Token, req.Retention); errs[i] == nil {
			valid = append(valid, i)
		}
	}
	s.settleMany(ctx, "complete", valid, func(i int) pair { return pair{reqs[i].Key, reqs[i].Token} }, errs, done, false,
		func(write []int) (string, []any) {
			args := make([]any, 0, 5*len(write))
			for _, i := range write {
				args = append(args, []byte(reqs[i].Key), result(reqs[i].Result))
			}
			for _, i := range write {
				args = append(args, []byte(reqs[i].Key), micros(reqs[i].Retention))
			}
			for _, i := range write {
				args = append(args, []byte(reqs[i].Key))
			}
			return s.sql.completeMany(len(write)), args
		})
	return store.CompleteOutcomes(done, errs)
}

// ExtendBatch runs Extend for every request in one short transaction, as
// CompleteBatchReport does: a batch's heartbeat extends all of its claims
// at once. A key and token repeated in reqs are extended once, with the
// last request's lease, as single calls in order would leave it.
func (s *Store) ExtendBatch(ctx context.Context, reqs []store.ExtendRequest) []error {
	errs := make([]error, len(reqs))
	var valid []int
	for i, req := range reqs {
		if errs[i] = checkExtend(req); errs[i] == nil {
			valid = append(valid, i)
		}
	}
	s.settleMany(ctx, "extend", valid, func(i int) pair { return pair{reqs[i].Key, reqs[i].Token} }, errs, nil, true,
		func(write []int) (string, []any) {
			args := make([]any, 0, 5*len(write))
			for _, i := range write {
				args = append(args, []byte(reqs[i].Key), micros(reqs[i].Lease))
			}
			for _, i := range write {
				args = append(args, []byte(reqs[i].Key), micros(reqs[i].Lease)+micros(s.cfg.abandonedTTL))
			}
			for _, i := range write {
				args = append(args, []byte(reqs[i].Key))
			}
			return s.sql.extendMany(len(write)), args
		})
	return errs
}

// pair is a key and the token of a claim on it.
type pair struct {
	key   string
	token store.Token
}

// lockedRow is what the locking read of a batch finds of a key.
type lockedRow struct {
	token store.Token
	state store.State
	live  bool // not gone
}

// settleMany settles the requests at valid in one transaction: each (key,
// token) is sent once (its last request when last, else its first); the
// rows of their keys are locked and read in key order; update (built for
// the requests whose token holds a processing row, one per key) updates
// them; the transaction commits. errs and done (when not nil) are set:
// CompletionWrote for a request sent and updated; for a Complete, a
// request whose pair was written by an earlier request of the batch, or
// whose token completed the record before, is CompletionUnchanged; the
// others get ErrLeaseLost. A deadlock or lock wait timeout runs the
// transaction again, within Options.Timeout.
func (s *Store) settleMany(ctx context.Context, op string, valid []int, pairOf func(int) pair, errs []error, done []store.Completion, last bool,
	update func(write []int) (string, []any)) {
	if len(valid) == 0 {
		return
	}
	if err := ctx.Err(); err != nil {
		for _, i := range valid {
			errs[i] = errContext(op, pairOf(i).key, err)
		}
		return
	}
	chosen := make(map[pair]int, len(valid))
	for _, i := range valid {
		if _, seen := chosen[pairOf(i)]; !seen || last {
			chosen[pairOf(i)] = i
		}
	}
	var keys []string
	seenKey := make(map[string]bool)
	for p := range chosen {
		if !seenKey[p.key] {
			seenKey[p.key] = true
			keys = append(keys, p.key)
		}
	}
	slices.Sort(keys)

	cctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	defer cancel()
	var (
		found map[string]lockedRow
		write []int
		err   error
	)
	run := func() error {
		found, write = nil, nil
		tx, err := s.db.BeginTx(cctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		if found, err = s.lockKeys(cctx, tx, keys); err != nil {
			return err
		}
		for p, i := range chosen {
			if r, ok := found[p.key]; ok && r.live && r.token == p.token && r.state == store.StateProcessing {
				write = append(write, i)
			}
		}
		slices.SortFunc(write, func(a, b int) int { return strings.Compare(pairOf(a).key, pairOf(b).key) })
		if len(write) > 0 {
			q, args := update(write)
			if _, err := tx.ExecContext(cctx, q, args...); err != nil {
				return err
			}
		}
		return tx.Commit()
	}
	err = run()
	for s.again(cctx, err) {
		err = run()
	}
	written := make(map[pair]bool, len(write))
	for _, i := range write {
		written[pairOf(i)] = true
	}
	for _, i := range valid {
		p := pairOf(i)
		r := found[p.key]
		switch {
		case err != nil:
			errs[i] = s.fail(ctx, op, p.key, err)
		case written[p] && chosen[p] == i:
			setDone(done, i, store.CompletionWrote)
		case written[p] && op == "complete":
			setDone(done, i, store.CompletionUnchanged)
		case written[p]:
			// An Extend repeated in the batch: the last one was sent.
		case op == "complete" && r.live && r.token == p.token && r.state == store.StateCompleted:
			setDone(done, i, store.CompletionUnchanged)
		default:
			errs[i] = errLeaseLost(op, p.key)
		}
	}
}

func setDone(done []store.Completion, i int, c store.Completion) {
	if done != nil {
		done[i] = c
	}
}

// lockKeys locks the rows of keys (sorted) in tx and reads them.
func (s *Store) lockKeys(ctx context.Context, tx *sql.Tx, keys []string) (map[string]lockedRow, error) {
	args := make([]any, len(keys))
	for i, k := range keys {
		args[i] = []byte(k)
	}
	rows, err := tx.QueryContext(ctx, s.sql.lockMany(len(keys)), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]lockedRow, len(keys))
	for rows.Next() {
		var (
			key, tok []byte
			state    string
			live     bool
			r        lockedRow
		)
		if err := rows.Scan(&key, &tok, &state, &live); err != nil {
			return nil, err
		}
		copy(r.token[:], tok)
		r.state, r.live = stateOf(state), live
		out[string(key)] = r
	}
	return out, rows.Err()
}
