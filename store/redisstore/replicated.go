package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/rediscore"
)

// The operations with Options.MinReplicas: the same commands and scripts
// as without, each master's sent in one pipeline that ends with WAIT
// (execWaited), and a write that too few replicas acknowledged failed as
// unavailable. A claim that fails so is given back (abandonLua) when the
// master still answers, so that it costs the key no lease.

// acquireReplicated is Acquire with MinReplicas.
func (s *Store) acquireReplicated(ctx context.Context, req store.AcquireRequest) (store.Claim, error) {
	out := make([]store.AcquireOutcome, 1)
	s.acquireWaited(ctx, []*rediscore.Acquisition{&s.newAcquire(req, time.Now()).Acquisition}, out)
	return out[0].Claim, out[0].Err
}

// acquireWaited runs the acquisitions acqs[i] into out[i] (a nil one is
// skipped): SET NX GET for every key, then the takeover script for those
// that found a failed record, an ended lease or the caller's own claim,
// each round trip with its WAITs. Only a claim that wrote needs its WAIT
// (a claim granted again wrote its new lease).
func (s *Store) acquireWaited(ctx context.Context, acqs []*rediscore.Acquisition, out []store.AcquireOutcome) {
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var idx []int
	var keys []string
	var cmds []redis.Cmder
	for i, a := range acqs {
		if a == nil {
			continue
		}
		if a.Record == "" { // a batch's, which packs its records itself when it sends no WAIT
			a.Record = rediscore.PackProcessing(a.Token, a.Deadline, a.Now, a.Req.Fingerprint)
		}
		key := s.RedisKey(a.Req.Key)
		idx, keys = append(idx, i), append(keys, key)
		cmds = append(cmds, redis.NewStringCmd(cctx, "set", key, a.Record, "px", rediscore.MS(a.TTL), "nx", "get"))
	}
	waits := s.execWaited(cctx, keys, cmds)
	var again []scriptCall
	var unconfirmed []int
	for k, i := range idx {
		a := acqs[i]
		c, retry, err := s.claimed(a, cmds[k].(*redis.StringCmd))
		switch {
		case err != nil:
			out[i].Err = s.acquireFailed(ctx, a.Req.Key, err)
		case retry:
			again = append(again, scriptCall{index: i, key: a.Req.Key, script: acquireScript, args: anys(a.Args())})
		case c.Acquired:
			if out[i].Err = s.replicated(ctx, "acquire", a.Req.Key, waits[k]); out[i].Err != nil {
				unconfirmed = append(unconfirmed, i)
			} else {
				out[i].Claim = c
			}
		default:
			out[i].Claim = c // a duplicate's answer: nothing written, nothing to wait for
		}
	}
	s.runWaited(ctx, "acquire", acquireManyScript, again, func(i int, reply any, wait *redis.IntCmd, err error) {
		var c store.Claim
		if err == nil {
			c, err = s.retaken(acqs[i], reply)
		}
		if err == nil && c.Acquired {
			if err = s.replicated(ctx, "acquire", acqs[i].Req.Key, wait); err != nil {
				unconfirmed = append(unconfirmed, i)
			}
		}
		if err == nil {
			out[i].Claim = c
		}
		out[i].Err = err
	})
	s.giveBack(ctx, acqs, unconfirmed, out)
}

// giveBack runs abandonLua for the claims of acqs[i], i in idx, that too
// few replicas acknowledged, and says in each one's error what became of
// the claim. It sends no WAIT: a give-back that a failover loses leaves
// the claim as it was, which ends with its lease.
func (s *Store) giveBack(ctx context.Context, acqs []*rediscore.Acquisition, idx []int, out []store.AcquireOutcome) {
	if len(idx) == 0 {
		return
	}
	calls := make([]scriptCall, len(idx))
	for k, i := range idx {
		calls[k] = scriptCall{index: i, key: acqs[i].Req.Key, script: abandonScript, args: []any{string(acqs[i].Token[:])}}
	}
	// The caller's context may have ended; the claim is given back all the
	// same, within Options.Timeout.
	s.run(context.WithoutCancel(ctx), "acquire", abandonManyScript, calls, func(i int, reply any, err error) {
		note := "the claim was given back"
		switch {
		case err != nil:
			note = fmt.Sprintf("giving the claim back failed (%v): it holds the key until its lease ends", err)
		case reply != int64(1):
			note = "the claim no longer held the key"
		}
		var oe *store.OpError
		if errors.As(out[i].Err, &oe) {
			oe.Err = fmt.Errorf("%w; %s", oe.Err, note)
		}
	})
}

// completeReplicated is CompleteReport with MinReplicas.
func (s *Store) completeReplicated(ctx context.Context, req store.CompleteRequest) (store.Completion, error) {
	errs, done := make([]error, 1), make([]store.Completion, 1)
	s.completeWaited(ctx, []store.CompleteRequest{req}, []int{0}, errs, done)
	return done[0], errs[0]
}

// completeWaited completes reqs[i], i in todo, into errs[i] and, unless
// nil, done[i]. A completion that found its record completed by its token
// already (a retry of one whose WAIT fell short, most likely) is confirmed
// by confirmLua and the WAIT after it.
func (s *Store) completeWaited(ctx context.Context, reqs []store.CompleteRequest, todo []int, errs []error, done []store.Completion) {
	calls := make([]scriptCall, len(todo))
	keys := make([]string, len(todo))
	for k, i := range todo {
		calls[k] = scriptCall{index: i, key: reqs[i].Key, script: completeScript, args: completeArgs(reqs[i])}
		keys[k] = reqs[i].Key
	}
	many := completeManyScript
	if len(calls) == 1 {
		many = nil // one key: the single-key script, as without WAIT
	} else if rediscore.Repeats(keys) {
		many = completeEachScript
	}
	var found []scriptCall
	s.runWaited(ctx, "complete", many, calls, func(i int, reply any, wait *redis.IntCmd, err error) {
		c := store.CompletionUnknown
		if err == nil {
			c, err = s.completed(reqs[i].Key, reply)
		}
		switch {
		case err != nil:
			err = s.trusted(ctx, "complete", reqs[i].Key, wait, err)
		case c == store.CompletionWrote:
			err = s.replicated(ctx, "complete", reqs[i].Key, wait)
		case c == store.CompletionUnchanged:
			found = append(found, scriptCall{index: i, key: reqs[i].Key, script: confirmScript, args: []any{string(reqs[i].Token[:])}})
			return
		}
		if err != nil {
			c = store.CompletionUnknown
		}
		errs[i] = err
		if done != nil {
			done[i] = c
		}
	})
	var confirmMany *redis.Script
	if len(found) > 1 {
		confirmMany = confirmManyScript
	}
	s.runWaited(ctx, "complete", confirmMany, found, func(i int, reply any, wait *redis.IntCmd, err error) {
		c := store.CompletionUnchanged
		switch {
		case err != nil:
		case reply != int64(1):
			err = &store.OpError{Op: "complete", Key: reqs[i].Key, Err: errors.New("redisstore: the record this token had completed is gone before its replicas could be asked")}
		default:
			err = s.replicated(ctx, "complete", reqs[i].Key, wait)
		}
		if err != nil {
			c = store.CompletionUnknown
		}
		errs[i] = err
		if done != nil {
			done[i] = c
		}
	})
}

// settleReplicated is settle (Release, Extend, SaveStep) with MinReplicas.
func (s *Store) settleReplicated(ctx context.Context, op, key string, script *redis.Script, args []any) error {
	var err error
	s.runWaited(ctx, op, nil, []scriptCall{{key: key, script: script, args: args, steps: true}}, func(_ int, reply any, wait *redis.IntCmd, rerr error) {
		if err = rerr; err == nil {
			if err = s.settled(op, key, reply); err == nil {
				err = s.replicated(ctx, op, key, wait)
			} else {
				err = s.trusted(ctx, op, key, wait, err)
			}
		}
	})
	return err
}

// extendWaited is ExtendBatch's round trip with MinReplicas.
func (s *Store) extendWaited(ctx context.Context, reqs []store.ExtendRequest, calls []scriptCall, errs []error) {
	s.runWaited(ctx, "extend", extendManyScript, calls, func(i int, reply any, wait *redis.IntCmd, err error) {
		if err == nil {
			if err = s.settled("extend", reqs[i].Key, reply); err == nil {
				err = s.replicated(ctx, "extend", reqs[i].Key, wait)
			} else {
				err = s.trusted(ctx, "extend", reqs[i].Key, wait, err)
			}
		}
		errs[i] = err
	})
}

// runWaited is run with a WAIT after each master's writes: calls, all of
// one single-key script, go out in one round trip, through many (the
// script's multi-key form, up to maxMany keys a run) on a single server
// when many is not nil, else one run per call; done gets each call's
// reply and the WAIT that followed it. A context that ended fails every
// call with its error and sends nothing.
func (s *Store) runWaited(ctx context.Context, op string, many *redis.Script, calls []scriptCall, done func(index int, reply any, wait *redis.IntCmd, err error)) {
	if len(calls) == 0 {
		return
	}
	if err := ctx.Err(); err != nil {
		for _, c := range calls {
			done(c.index, nil, nil, s.core.Context(op, c.key, err))
		}
		return
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if many == nil || !s.oneServer() {
		keys := make([]string, len(calls))
		argvs := make([][]any, len(calls))
		for i, c := range calls {
			ks := s.callKeys(c)
			keys[i] = ks[0]
			argvs[i] = append([]any{"evalsha", c.script.Hash(), len(ks)}, anys(ks)...)
			argvs[i] = append(argvs[i], c.args...)
		}
		cmds, waits := s.evalWaited(cctx, keys, argvs)
		for i, c := range calls {
			reply, err := cmds[i].Result()
			if err != nil {
				err = s.fail(ctx, op, c.key, err)
			}
			done(c.index, reply, waits[i], err)
		}
		return
	}
	var chunks [][]scriptCall
	var argvs [][]any
	for rest := calls; len(rest) > 0; {
		chunk := rest[:min(len(rest), rediscore.MaxMany)]
		rest = rest[len(chunk):]
		var keys []string
		for _, c := range chunk {
			keys = append(keys, s.callKeys(c)...)
		}
		argv := append([]any{"evalsha", many.Hash(), len(keys)}, anys(keys)...)
		for _, c := range chunk {
			argv = append(argv, c.args...)
		}
		chunks, argvs = append(chunks, chunk), append(argvs, argv)
	}
	cmds, waits := s.evalWaited(cctx, make([]string, len(argvs)), argvs) // one server: no key routes
	for k, chunk := range chunks {
		replies, err := cmds[k].Slice()
		for i, c := range chunk {
			switch {
			case err != nil:
				done(c.index, nil, waits[k], s.fail(ctx, op, c.key, err))
			case i >= len(replies):
				done(c.index, nil, waits[k], s.core.Reply(op, c.key, replies))
			default:
				done(c.index, replies[i], waits[k], nil)
			}
		}
	}
}

// evalWaited sends a command of arguments argvs[i] (an EVALSHA) to the
// master of keys[i], through execWaited, and sends again, once the
// scripts are loaded, those the server answered NOSCRIPT: it ran nothing
// (it restarted, or is a replica promoted since New, whose script cache
// is its own).
func (s *Store) evalWaited(ctx context.Context, keys []string, argvs [][]any) ([]*redis.Cmd, []*redis.IntCmd) {
	send := func(idx []int) ([]*redis.Cmd, []*redis.IntCmd) {
		cmds := make([]*redis.Cmd, len(idx))
		cmders := make([]redis.Cmder, len(idx))
		routes := make([]string, len(idx))
		for k, i := range idx {
			cmds[k] = redis.NewCmd(ctx, argvs[i]...)
			cmders[k], routes[k] = cmds[k], keys[i]
		}
		return cmds, s.execWaited(ctx, routes, cmders)
	}
	all := make([]int, len(argvs))
	for i := range all {
		all[i] = i
	}
	cmds, waits := send(all)
	var again []int
	for i, cmd := range cmds {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return cmds, waits
	}
	if err := s.loadScripts(ctx); err != nil {
		for _, i := range again {
			cmds[i].SetErr(errReload(err))
		}
		return cmds, waits
	}
	retried, rwaits := send(again)
	for k, i := range again {
		cmds[i], waits[i] = retried[k], rwaits[k]
	}
	return cmds, waits
}

// trusted returns err, the answer of a script that wrote nothing, unless
// it says the token lost the key (store.ErrLeaseLost) on a master whose
// WAIT fell short: that master may not be the one the claim was
// replicated to (a master that came back empty after a failover, and is a
// master until Sentinel or the Cluster makes it a replica, to which a
// client may still be sent), so the answer is the shortfall, which the
// receiver retries, not a loss, on which it would give up.
func (s *Store) trusted(ctx context.Context, op, key string, wait *redis.IntCmd, err error) error {
	if !errors.Is(err, store.ErrLeaseLost) {
		return err
	}
	if werr := s.replicated(ctx, op, key, wait); werr != nil {
		return werr
	}
	return err
}
