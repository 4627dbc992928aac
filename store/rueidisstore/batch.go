package rueidisstore

import (
	"context"
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

// CompleteBatch runs Complete for every request in one round trip: one
// script run for all of them on a single server (one reading of the
// server's clock, one MGET), one run per key on a Cluster.
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
		calls = append(calls, scriptCall{index: i, key: req.Key, args: []string{string(req.Token[:]), deadline, strconv.FormatInt(ttl, 10)}})
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
			execs[i] = rueidis.LuaExec{Keys: []string{s.core.RedisKey(c.key)}, Args: c.args}
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
		replies, err := many(keys).Exec(cctx, s.client, keys, args).ToArray()
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
