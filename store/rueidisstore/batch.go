package rueidisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/rediscore"
)

// AcquireBatch runs Acquire for every request: one round trip of SET NX
// GET for all of them (one pipeline per node), and, only for the keys that
// found a failed record, an ended lease or the caller's own claim
// (AcquireRequest.Token), a second round trip of the takeover script. A
// key repeated in reqs is claimed by its first request, which the later
// ones find holding it (or, with its token, granted again). A request with bad input gets the
// error Acquire would give it, and a cancelled context fails every other
// request with its error.
func (s *Store) AcquireBatch(ctx context.Context, reqs []store.AcquireRequest) []store.AcquireOutcome {
	out := make([]store.AcquireOutcome, len(reqs))
	all := make([]rediscore.Acquisition, len(reqs))
	now := time.Now()
	var valid []int
	for i, req := range reqs {
		if out[i].Err = s.core.CheckAcquire(req); out[i].Err == nil {
			s.core.InitAcquisition(&all[i], req, now)
			valid = append(valid, i)
		}
	}
	if err := ctx.Err(); err != nil {
		for _, i := range valid {
			out[i].Err = s.core.Context("acquire", reqs[i].Key, err)
		}
		return out
	}
	if len(valid) == 0 {
		return out
	}
	keys := s.core.RedisKeys(len(valid), func(k int) string { return reqs[valid[k]].Key })
	records := rediscore.PackAll(len(valid), func(k int) *rediscore.Acquisition { return &all[valid[k]] })
	cmds := make(rueidis.Commands, len(valid))
	for k, i := range valid {
		all[i].Record = records[k]
		cmds[k] = s.setNXGet(keys[k], &all[i])
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	results := s.client.DoMulti(cctx, cmds...)
	cancel()
	var again []scriptCall
	for k, i := range valid {
		c, retry, err := s.claimed(&all[i], results[k])
		switch {
		case err != nil:
			out[i].Err = s.acquireFailed(ctx, reqs[i].Key, err)
		case retry:
			again = append(again, scriptCall{index: i, key: reqs[i].Key, args: all[i].Args()})
		default:
			out[i].Claim = c
		}
	}
	s.run(ctx, "acquire", acquireScript, manyOf(acquireManyScript), again, func(i int, m *rueidis.RedisMessage, err error) {
		if err == nil {
			out[i].Claim, err = s.retaken(&all[i], m)
		}
		out[i].Err = err
	})
	return out
}

// CompleteBatch runs Complete for every request: on a single server, a
// transaction in two round trips from 8 keys on (completeWatched), else
// one script run for all of them (one reading of the server's clock, one
// MGET) in one; one run per key on a Cluster.
func (s *Store) CompleteBatch(ctx context.Context, reqs []store.CompleteRequest) []error {
	errs := make([]error, len(reqs))
	s.completeBatch(ctx, reqs, errs, nil)
	return errs
}

// CompleteBatchReport is CompleteBatch, reporting for each request whether
// it wrote the record or found it completed already by its token, from the
// same round trip.
func (s *Store) CompleteBatchReport(ctx context.Context, reqs []store.CompleteRequest) []store.CompleteOutcome {
	errs := make([]error, len(reqs))
	done := make([]store.Completion, len(reqs))
	s.completeBatch(ctx, reqs, errs, done)
	return store.CompleteOutcomes(done, errs)
}

// completeBatch is CompleteBatch into errs and, unless nil, done.
func (s *Store) completeBatch(ctx context.Context, reqs []store.CompleteRequest, errs []error, done []store.Completion) {
	var calls []scriptCall
	for i, req := range reqs {
		if errs[i] = s.core.CheckSettle("complete", req.Key, req.Token, req.Retention); errs[i] != nil {
			continue
		}
		calls = append(calls, scriptCall{index: i, key: req.Key, args: []string{
			string(req.Token[:]), string(req.Result), strconv.FormatInt(rediscore.MS(req.Retention), 10)}})
	}
	if s.completeWatched(ctx, reqs, calls, errs, done) {
		return
	}
	// MGET reads every key before the first is written: a run that repeats
	// a key takes the per-key form.
	many := func(keys []string) *rueidis.Lua {
		if rediscore.Repeats(keys) {
			return completeEachScript
		}
		return completeManyScript
	}
	s.run(ctx, "complete", completeScript, many, calls, func(i int, m *rueidis.RedisMessage, err error) {
		c := store.CompletionUnknown
		if err == nil {
			c, err = s.completed(reqs[i].Key, m)
		}
		errs[i] = err
		if done != nil {
			done[i] = c
		}
	})
}

// ExtendBatch runs Extend for every request in one round trip, as
// CompleteBatch does: a batch's heartbeat extends all of its claims at
// once.
func (s *Store) ExtendBatch(ctx context.Context, reqs []store.ExtendRequest) []error {
	errs := make([]error, len(reqs))
	var calls []scriptCall
	now := time.Now()
	for i, req := range reqs {
		if errs[i] = s.core.CheckExtend(req); errs[i] != nil {
			continue
		}
		deadline, ttl := s.core.ExtendArgs(req, now)
		calls = append(calls, scriptCall{index: i, key: req.Key, args: []string{string(req.Token[:]), deadline, strconv.FormatInt(ttl, 10)}, steps: true})
	}
	s.run(ctx, "extend", extendScript, manyOf(extendManyScript), calls, func(i int, m *rueidis.RedisMessage, err error) {
		if err == nil {
			err = s.settled("extend", reqs[i].Key, m)
		}
		errs[i] = err
	})
	return errs
}

// scriptCall is one script run of a batch, for the request at index.
type scriptCall struct {
	index int
	key   string
	args  []string
	// steps: the script takes the record's steps key after its key
	// (Extend); a batch's calls all do or all do not.
	steps bool
}

// manyOf is the choice of a script's multi-key form that needs no choice.
func manyOf(script *rueidis.Lua) func([]string) *rueidis.Lua {
	return func([]string) *rueidis.Lua { return script }
}

// run runs calls of one single-key script in one round trip: on a single
// server (or Sentinel's master), through the script's multi-key form that
// many picks for the keys, up to rediscore.MaxMany keys a run; on a
// Cluster, one run of one per key, which rueidis pipelines to each node
// (after loading the script on every node: ExecMulti). done gets each
// call's own answer. A context that ended fails every call with its error
// and sends nothing.
func (s *Store) run(ctx context.Context, op string, one *rueidis.Lua, many func(keys []string) *rueidis.Lua, calls []scriptCall,
	done func(index int, m *rueidis.RedisMessage, err error)) {
	if len(calls) == 0 {
		return
	}
	if err := ctx.Err(); err != nil {
		for _, c := range calls {
			done(c.index, nil, s.core.Context(op, c.key, err))
		}
		return
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if s.cluster {
		execs := make([]rueidis.LuaExec, len(calls))
		for i, c := range calls {
			keys := []string{s.core.RedisKey(c.key)}
			if c.steps {
				keys = s.stepsKeys(c.key)
			}
			execs[i] = rueidis.LuaExec{Keys: keys, Args: c.args}
		}
		for i, r := range one.ExecMulti(cctx, s.client, execs...) {
			m, err := r.ToMessage()
			if err != nil {
				done(calls[i].index, nil, s.fail(ctx, op, calls[i].key, err))
				continue
			}
			done(calls[i].index, &m, nil)
		}
		return
	}
	for len(calls) > 0 {
		chunk := calls[:min(len(calls), rediscore.MaxMany)]
		calls = calls[len(chunk):]
		keys := s.core.RedisKeys(len(chunk), func(k int) string { return chunk[k].key })
		args := make([]string, 0, len(chunk)*len(chunk[0].args))
		for _, c := range chunk {
			args = append(args, c.args...)
		}
		script := many(keys)
		if chunk[0].steps {
			keys = withSteps(keys)
		}
		replies, err := script.Exec(cctx, s.client, keys, args).ToArray()
		for i, c := range chunk {
			switch {
			case err != nil:
				done(c.index, nil, s.fail(ctx, op, c.key, err))
			case i >= len(replies):
				done(c.index, nil, s.core.Reply(op, c.key, len(replies)))
			default:
				done(c.index, &replies[i], nil)
			}
		}
	}
}

// withSteps returns record keys each followed by its steps key, for the
// multi-key forms of the scripts that take both.
func withSteps(keys []string) []string {
	out := make([]string, 0, 2*len(keys))
	for _, k := range keys {
		out = append(out, k, rediscore.StepsKeyOf(k))
	}
	return out
}

// refused is nil for an error that Redis answered (a command the user's
// ACL does not allow, EXECABORT), which wrote nothing and leaves the batch
// to the script, and err for any other (a connection lost, a timeout),
// which fails it.
func refused(err error) error {
	if _, ok := rueidis.IsRedisErr(err); ok {
		return nil
	}
	return err
}

// watchedMin is the smallest batch that completeWatched completes: it
// takes two round trips where the script takes one, which the Redis time
// it saves pays for from a few keys on.
const watchedMin = 8

// completeWatched completes calls, requests of reqs, in a transaction on
// one connection, and reports whether it did: WATCH the keys, MGET them,
// read TIME and open the transaction (MULTI); decide on each record as the
// completion script would (rediscore.Completion); then a SET ... PXAT of
// every record to write, and EXEC. A key changed or expired between the reads and EXEC aborts
// the transaction, which writes nothing, so a record is written only if
// its token held it when EXEC ran, as in the script. It leaves the batch
// to the script (reporting false, having written nothing) on a Cluster,
// for fewer than watchedMin keys or more than rediscore.MaxMany, for keys
// that repeat, for a key with no string of this package (absent, another
// type or another program's), when EXEC aborts, and when Redis refuses a
// command (a user whose ACL allows the scripts but not WATCH, MULTI or
// EXEC). A failed round trip fails every call, as a failed script run
// does.
func (s *Store) completeWatched(ctx context.Context, reqs []store.CompleteRequest, calls []scriptCall, errs []error, done []store.Completion) bool {
	if s.cluster || len(calls) < watchedMin || len(calls) > rediscore.MaxMany || ctx.Err() != nil {
		return false
	}
	keys := s.core.RedisKeys(len(calls), func(k int) string { return calls[k].key })
	if rediscore.Repeats(keys) {
		return false
	}
	answers := make([]int64, len(calls))
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	wrote := false
	failed := s.client.Dedicated(func(c rueidis.DedicatedClient) (err error) {
		// MULTI goes with the reads, so that no SET is sent before Redis
		// has opened the transaction (a SET that a refused MULTI left
		// outside one would run unguarded).
		rs := c.DoMulti(cctx, c.B().Watch().Key(keys...).Build(), c.B().Mget().Key(keys...).Build(),
			c.B().Time().Build(), c.B().Multi().Build())
		// Every way out but EXEC ends the transaction (DISCARD) or takes
		// the WATCH back (UNWATCH), so that the connection goes back to
		// the client's pool as it came.
		sent, open := false, rs[3].Error() == nil
		defer func() {
			if sent {
				return
			}
			end := c.B().Unwatch().Build()
			if open {
				end = c.B().Discard().Build()
			}
			if eerr := c.Do(cctx, end).Error(); err == nil {
				err = eerr
			}
		}()
		for _, r := range rs {
			if err := r.Error(); err != nil && !rueidis.IsRedisNil(err) {
				return refused(err)
			}
		}
		vals, err := rs[1].ToArray()
		if err != nil {
			return refused(err)
		}
		clock, err := rs[2].AsStrSlice()
		if err != nil {
			return refused(err)
		}
		if len(clock) != 2 || len(vals) != len(keys) {
			return nil
		}
		now, ok := rediscore.ServerTime(clock[0], clock[1])
		cmds := make(rueidis.Commands, 0, len(calls)+1)
		for k, call := range calls {
			if !ok {
				return nil
			}
			v, err := vals[k].ToString()
			if err != nil {
				return nil // absent, or not a string: the script answers it
			}
			req := reqs[call.index]
			var rec string
			var last int64
			rec, last, answers[k], ok = rediscore.Completion(v, req.Token, req.Result, req.Retention, now)
			if ok && answers[k] == 1 {
				cmds = append(cmds, c.B().Set().Key(keys[k]).Value(rec).PxatMillisecondsTimestamp(last).Build())
			}
		}
		if !ok {
			return nil
		}
		if len(cmds) == 0 {
			wrote = true // nothing to write: every answer is 0 or 2
			return nil
		}
		sent = true
		cmds = append(cmds, c.B().Exec().Build())
		rs = c.DoMulti(cctx, cmds...)
		m, err := rs[len(rs)-1].ToMessage()
		switch {
		case rueidis.IsRedisNil(err) || (err == nil && m.IsNil()):
			return nil // aborted: a key changed; the script decides
		case err != nil:
			// EXECABORT (a command refused as it was queued) wrote
			// nothing either.
			return refused(err)
		}
		replies, err := m.ToArray()
		if err != nil || len(replies) != len(cmds)-1 {
			return fmt.Errorf("EXEC answered %s", describe(&m))
		}
		for _, r := range replies {
			if err := r.Error(); err != nil {
				return err
			}
		}
		wrote = true
		return nil
	})
	if failed != nil {
		for _, c := range calls {
			errs[c.index] = s.fail(ctx, "complete", c.key, failed)
			if done != nil {
				done[c.index] = store.CompletionUnknown
			}
		}
		return true
	}
	if !wrote {
		return false
	}
	for k, c := range calls {
		completion, err := s.core.Completed(c.key, answers[k])
		errs[c.index] = err
		if done != nil {
			done[c.index] = completion
		}
	}
	return true
}
