package pgstore

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/dedup-go/dedup/store"
)

// AcquireBatch runs Acquire for every request in one statement: one
// INSERT ... ON CONFLICT over the batch, its rows claimed in key order.
// A key repeated in reqs is claimed by its first request, which the later
// ones find holding it; a later request that could claim what the first
// one could not (another fingerprint, refused as reused), or that may hold
// the claim by its own token (AcquireRequest.Token), goes to a second
// statement. A request with bad input gets the error Acquire would give
// it, and a cancelled context fails every other request with its error.
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

// acquireRound claims the first pending request of every key in one
// statement, answers the later requests of a key from the outcome of its
// first, and returns those it could not answer.
func (s *Store) acquireRound(ctx context.Context, reqs []store.AcquireRequest, pending []int, out []store.AcquireOutcome) []int {
	first := make(map[string]int, len(pending))
	var round []int
	for _, i := range pending {
		if _, ok := first[reqs[i].Key]; !ok {
			first[reqs[i].Key] = i
			round = append(round, i)
		}
	}
	tokens := make(map[int]store.Token, len(round))
	for _, i := range round {
		tokens[i] = tokenOf(reqs[i])
	}
	rows, err := s.acquireMany(ctx, reqs, round, tokens)
	for _, i := range round {
		switch {
		case err != nil:
			out[i].Err = s.fail(ctx, "acquire", reqs[i].Key, err)
		default:
			r, found := rows[reqs[i].Key]
			claim, cerr := r.claim(reqs[i], tokens[i], found)
			out[i] = store.AcquireOutcome{Claim: claim, Err: cerr}
		}
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
			// the record as it was, which this one may claim; or this one
			// may hold the claim by its own token.
			deferred[key] = true
			next = append(next, j)
		}
	}
	return next
}

// later answers a request whose key an earlier request of the batch just
// claimed or found held, as the store would have answered it right after:
// the record is the same, so only the fingerprint may differ, or the
// token. A zero outcome means it cannot be answered without the store: a
// request with a token of its own that may be the one holding the claim
// (the token the first request just claimed with, or that of the holder
// that refused it, which the refusal does not name) is granted the claim
// again by the store, its lease from then.
func later(first store.AcquireOutcome, req store.AcquireRequest) store.AcquireOutcome {
	switch {
	case first.Err != nil && !isReused(first.Err):
		return store.AcquireOutcome{Err: first.Err}
	case first.Err != nil:
		return store.AcquireOutcome{}
	}
	rec := first.Claim.Record
	if reused(rec.Fingerprint, req.Fingerprint) {
		return store.AcquireOutcome{Err: errReused(req.Key, rec.State)}
	}
	if !req.Token.IsZero() && rec.State == store.StateProcessing && (!first.Claim.Acquired || first.Claim.Token == req.Token) {
		return store.AcquireOutcome{}
	}
	// The token of a claim is its holder's alone, as in Acquire's
	// refusals.
	rec.Token = store.Token{}
	return store.AcquireOutcome{Claim: store.Claim{Record: rec}}
}

// acquireMany runs the acquireBatch statement for the requests at round,
// which have distinct keys, and returns its rows by key. The statement
// claims them in key order, whatever the order of round. A serialization
// failure or a deadlock runs it again, within Options.Timeout, as Acquire
// does.
func (s *Store) acquireMany(ctx context.Context, reqs []store.AcquireRequest, round []int, tokens map[int]store.Token) (map[string]row, error) {
	keys := make([]string, len(round))
	toks := make([]pgtype.UUID, len(round))
	fps := make([][]byte, len(round))
	leases := make([]int64, len(round))
	for n, i := range round {
		keys[n], toks[n], fps[n], leases[n] = reqs[i].Key, uuid(tokens[i]), fingerprint(reqs[i].Fingerprint), micros(reqs[i].Lease)
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	defer cancel()
	for {
		out, err := s.claimMany(cctx, keys, toks, fps, leases)
		if again(cctx, err) {
			continue
		}
		return out, err
	}
}

// claimMany runs the acquireBatch statement once.
func (s *Store) claimMany(ctx context.Context, keys []string, toks []pgtype.UUID, fps [][]byte, leases []int64) (map[string]row, error) {
	rows, err := s.pool.Query(ctx, s.sql.acquireBatch, s.cfg.mode, keys, toks, fps, leases, micros(s.cfg.abandonedTTL))
	if err != nil {
		return nil, err
	}
	out := make(map[string]row, len(keys))
	for rows.Next() {
		var key string
		r, _, err := s.scanRow(keyed{rows, &key}, true)
		if err != nil {
			rows.Close()
			return nil, err
		}
		out[key] = r
	}
	return out, rows.Err()
}

// keyed scans a row whose first column is the key, then what scanRow
// reads.
type keyed struct {
	rows pgx.Rows
	key  *string
}

func (k keyed) Scan(dest ...any) error { return k.rows.Scan(append([]any{k.key}, dest...)...) }

// CompleteBatch runs Complete for every request in one statement. A key
// and token repeated in reqs are sent once: the first request's result is
// the one stored, and the later ones succeed or fail with it.
func (s *Store) CompleteBatch(ctx context.Context, reqs []store.CompleteRequest) []error {
	errs := make([]error, len(reqs))
	var valid []int
	for i, req := range reqs {
		if errs[i] = checkSettle("complete", req.Key, req.Token, req.Retention); errs[i] == nil {
			valid = append(valid, i)
		}
	}
	s.settleMany(ctx, "complete", valid, func(i int) pair { return pair{reqs[i].Key, reqs[i].Token} }, errs, false,
		func(cctx context.Context, sent []int) (map[pair]bool, error) {
			keys, tokens := make([]string, len(sent)), make([]pgtype.UUID, len(sent))
			results, retentions := make([][]byte, len(sent)), make([]int64, len(sent))
			for n, i := range sent {
				keys[n], tokens[n], results[n], retentions[n] = reqs[i].Key, uuid(reqs[i].Token), reqs[i].Result, micros(reqs[i].Retention)
			}
			rows, err := s.pool.Query(cctx, s.sql.completeMany, s.cfg.mode, keys, tokens, results, retentions)
			if err != nil {
				return nil, err
			}
			return collectPairs(rows)
		})
	return errs
}

// ExtendBatch runs Extend for every request in one statement: a batch's
// heartbeat extends all of its claims at once. A key and token repeated
// in reqs are sent once, with the last request's lease, as single calls in
// order would leave it.
func (s *Store) ExtendBatch(ctx context.Context, reqs []store.ExtendRequest) []error {
	errs := make([]error, len(reqs))
	var valid []int
	for i, req := range reqs {
		if errs[i] = checkExtend(req); errs[i] == nil {
			valid = append(valid, i)
		}
	}
	s.settleMany(ctx, "extend", valid, func(i int) pair { return pair{reqs[i].Key, reqs[i].Token} }, errs, true,
		func(cctx context.Context, sent []int) (map[pair]bool, error) {
			keys, tokens, leases := make([]string, len(sent)), make([]pgtype.UUID, len(sent)), make([]int64, len(sent))
			for n, i := range sent {
				keys[n], tokens[n], leases[n] = reqs[i].Key, uuid(reqs[i].Token), micros(reqs[i].Lease)
			}
			rows, err := s.pool.Query(cctx, s.sql.extendMany, s.cfg.mode, keys, tokens, leases, micros(s.cfg.abandonedTTL))
			if err != nil {
				return nil, err
			}
			return collectPairs(rows)
		})
	return errs
}

// settleMany runs one fenced statement (run) for the requests at valid,
// each (key, token) sent once (its last request when last, else its
// first), and sets errs: nil for a pair the statement settled, or, for a
// Complete, a pair whose token completed the record already; ErrLeaseLost
// for the others.
func (s *Store) settleMany(ctx context.Context, op string, valid []int, pairOf func(int) pair, errs []error, last bool,
	run func(ctx context.Context, sent []int) (map[pair]bool, error)) {
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
	sent := make([]int, 0, len(chosen))
	for _, i := range chosen {
		sent = append(sent, i)
	}
	// Rows are updated in the arrays' order with the plans PostgreSQL
	// picks for them (a nested loop over the arrays): key order, as for
	// claims, so two batches seldom wait on each other crosswise. A
	// deadlock PostgreSQL breaks, or a serialization failure, runs the
	// statement again.
	slices.SortFunc(sent, func(a, b int) int { return strings.Compare(pairOf(a).key, pairOf(b).key) })

	cctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	defer cancel()
	done, err := run(cctx, sent)
	for again(cctx, err) {
		done, err = run(cctx, sent)
	}
	if err == nil && op == "complete" && len(done) < len(sent) {
		var missed []pair
		for _, i := range sent {
			if !done[pairOf(i)] {
				missed = append(missed, pairOf(i))
			}
		}
		var again map[pair]bool
		if again, err = s.completedBy(cctx, s.pool, missed); err == nil {
			for p := range again {
				done[p] = true
			}
		}
	}
	for _, i := range valid {
		p := pairOf(i)
		switch {
		case err != nil:
			errs[i] = s.fail(ctx, op, p.key, err)
		case !done[p]:
			errs[i] = errLeaseLost(op, p.key)
		}
	}
}

func isReused(err error) bool { return errors.Is(err, store.ErrKeyReused) }
