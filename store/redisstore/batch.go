package redisstore

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedup-go/dedup/store"
)

// maxMany bounds the keys of one multi-key script run, which holds the
// server for its whole run.
const maxMany = 1000

// AcquireBatch runs Acquire for every request: one pipeline of SET NX GET,
// and, only for the keys that found a failed record or an ended lease, a
// second round trip of the script (one run for all of them on a single
// server, a pipeline of one run per key on a Cluster). A key repeated in
// reqs is claimed by its first request, which the later ones find holding
// it. A request with bad input gets the error Acquire would give it, and a
// cancelled context fails every other request with its error.
func (s *Store) AcquireBatch(ctx context.Context, reqs []store.AcquireRequest) []store.AcquireOutcome {
	out := make([]store.AcquireOutcome, len(reqs))
	acqs := make([]*acquisition, len(reqs))
	now := time.Now()
	for i, req := range reqs {
		if out[i].Err = checkAcquire(req); out[i].Err == nil {
			acqs[i] = s.newAcquire(req, now)
		}
	}
	if err := ctx.Err(); err != nil {
		for i, a := range acqs {
			if a != nil {
				out[i].Err = errContext("acquire", a.req.Key, err)
			}
		}
		return out
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	pipe := s.client.Pipeline()
	cmds := make([]*redis.StatusCmd, len(reqs))
	for i, a := range acqs {
		if a != nil {
			cmds[i] = pipe.SetArgs(cctx, s.RedisKey(a.req.Key), a.record, a.setArgs)
		}
	}
	if pipe.Len() > 0 {
		_, _ = pipe.Exec(cctx) // each command carries its own error
	}
	cancel()
	var again []scriptCall
	for i, a := range acqs {
		if a == nil {
			continue
		}
		c, retry, err := a.claimed(cmds[i].Result())
		switch {
		case err != nil:
			out[i].Err = s.acquireFailed(ctx, a.req.Key, err)
		case retry:
			again = append(again, scriptCall{index: i, key: a.req.Key, script: acquireScript, args: a.args()})
		default:
			out[i].Claim = c
		}
	}
	s.run(ctx, "acquire", acquireManyScript, again, func(i int, reply any, err error) {
		if err == nil {
			out[i].Claim, err = acqs[i].retaken(reply)
		}
		out[i].Err = err
	})
	return out
}

// CompleteBatch runs Complete for every request in one round trip: one
// script run for all of them on a single server (one reading of the
// server's clock), a pipeline of one run per key on a Cluster.
func (s *Store) CompleteBatch(ctx context.Context, reqs []store.CompleteRequest) []error {
	errs := make([]error, len(reqs))
	var calls []scriptCall
	for i, req := range reqs {
		if errs[i] = checkSettle("complete", req.Key, req.Token, req.Retention); errs[i] != nil {
			continue
		}
		calls = append(calls, scriptCall{index: i, key: req.Key, script: completeScript, args: completeArgs(req)})
	}
	s.run(ctx, "complete", completeManyScript, calls, func(i int, reply any, err error) {
		if err == nil {
			err = settledOf("complete", reqs[i].Key, reply)
		}
		errs[i] = err
	})
	return errs
}

// ExtendBatch runs Extend for every request in one round trip, as
// CompleteBatch does: a batch's heartbeat extends all of its claims at
// once.
func (s *Store) ExtendBatch(ctx context.Context, reqs []store.ExtendRequest) []error {
	errs := make([]error, len(reqs))
	var calls []scriptCall
	now := time.Now()
	for i, req := range reqs {
		if errs[i] = checkExtend(req); errs[i] != nil {
			continue
		}
		calls = append(calls, scriptCall{index: i, key: req.Key, script: extendScript, args: s.extendArgs(req, now)})
	}
	s.run(ctx, "extend", extendManyScript, calls, func(i int, reply any, err error) {
		if err == nil {
			err = settledOf("extend", reqs[i].Key, reply)
		}
		errs[i] = err
	})
	return errs
}

// run runs calls, all of one single-key script, in one round trip: through
// many, the script's multi-key form, on a single server; as a pipeline on
// a Cluster. A context that ended fails every call with its error and
// sends nothing.
func (s *Store) run(ctx context.Context, op string, many *redis.Script, calls []scriptCall, done func(index int, reply any, err error)) {
	if len(calls) == 0 {
		return
	}
	if err := ctx.Err(); err != nil {
		for _, c := range calls {
			done(c.index, nil, errContext(op, c.key, err))
		}
		return
	}
	if s.oneServer() {
		s.many(ctx, op, many, calls, done)
	} else {
		s.pipeline(ctx, op, calls, done)
	}
}

// oneServer reports whether every key lives on the one server the client
// talks to, so that a script may touch many keys.
func (s *Store) oneServer() bool {
	_, ok := s.client.(*redis.Client) // a single server, or Sentinel's master
	return ok
}

// many runs calls, all of one single-key script, through its multi-key
// form, up to maxMany keys a run: ARGV is every call's arguments in turn.
// done gets each key's own answer.
func (s *Store) many(ctx context.Context, op string, script *redis.Script, calls []scriptCall, done func(index int, reply any, err error)) {
	for len(calls) > 0 {
		chunk := calls[:min(len(calls), maxMany)]
		calls = calls[len(chunk):]
		keys := make([]string, len(chunk))
		args := make([]any, 0, len(chunk)*len(chunk[0].args))
		for i, c := range chunk {
			keys[i] = s.RedisKey(c.key)
			args = append(args, c.args...)
		}
		cctx, cancel := context.WithTimeout(ctx, s.timeout)
		replies, err := script.Run(cctx, s.client, keys, args...).Slice()
		cancel()
		for i, c := range chunk {
			if err != nil {
				done(c.index, nil, s.fail(ctx, op, c.key, err))
				continue
			}
			if i >= len(replies) {
				done(c.index, nil, errReply(op, c.key, replies))
				continue
			}
			done(c.index, replies[i], nil)
		}
	}
}

// scriptCall is one script run of a batch, for the request at index.
type scriptCall struct {
	index  int
	key    string
	script *redis.Script
	args   []any
}

// pipeline runs calls by SHA in one round trip (one per Cluster node) and
// hands each reply to done. Calls that the server answered NOSCRIPT (it
// restarted, or someone ran SCRIPT FLUSH) did nothing, so their scripts
// are loaded again and they run once more, in a second round trip.
func (s *Store) pipeline(ctx context.Context, op string, calls []scriptCall, done func(index int, reply any, err error)) {
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	cmds := s.exec(cctx, calls)
	var again []scriptCall
	for i, c := range calls {
		if redis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT") {
			again = append(again, c)
			continue
		}
		reply, err := cmds[i].Result()
		if err != nil {
			err = s.fail(ctx, op, c.key, err)
		}
		done(c.index, reply, err)
	}
	if len(again) == 0 {
		return
	}
	var loadErr error
	for _, sc := range scripts {
		if loadErr = sc.Load(cctx, s.client).Err(); loadErr != nil {
			break
		}
	}
	cmds = s.exec(cctx, again)
	for i, c := range again {
		reply, err := cmds[i].Result()
		if err != nil {
			if loadErr != nil {
				err = errors.Join(loadErr, err)
			}
			err = s.fail(ctx, op, c.key, err)
		}
		done(c.index, reply, err)
	}
}

// exec sends calls as EVALSHA in one pipeline and returns their commands,
// each holding its own reply or error.
func (s *Store) exec(ctx context.Context, calls []scriptCall) []*redis.Cmd {
	pipe := s.client.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		cmds[i] = c.script.EvalSha(ctx, pipe, []string{s.RedisKey(c.key)}, c.args...)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	return cmds
}
