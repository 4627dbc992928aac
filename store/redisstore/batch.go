package redisstore

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/dedup-go/dedup"
)

// AcquireBatch runs Acquire for every item in one pipelined round trip
// (one per node of a Cluster). Each item is its own script run, atomic on
// its key; a key repeated in items is claimed by its first item, which the
// later ones find holding it.
func (s *Store) AcquireBatch(ctx context.Context, items []dedup.AcquireItem) []dedup.AcquireOutcome {
	out := make([]dedup.AcquireOutcome, len(items))
	tokens := make([]dedup.Token, len(items))
	var calls []scriptCall
	for i, it := range items {
		if out[i].Err = checkAcquire(it.Key, it.Request); out[i].Err != nil {
			continue
		}
		tokens[i] = dedup.NewToken()
		calls = append(calls, scriptCall{index: i, key: it.Key, script: acquireScript, args: s.acquireArgs(tokens[i], it.Request)})
	}
	s.pipeline(ctx, "acquire", calls, func(i int, reply []any, err error) {
		if err != nil {
			out[i].Err = err
			return
		}
		out[i].Claim, out[i].Err = claimOf(items[i].Key, tokens[i], reply)
	})
	return out
}

// CompleteBatch runs Complete for every item in one pipelined round trip.
func (s *Store) CompleteBatch(ctx context.Context, items []dedup.CompleteItem) []error {
	errs := make([]error, len(items))
	var calls []scriptCall
	for i, it := range items {
		if errs[i] = checkSettle("complete", it.Key, it.Token, it.Retention); errs[i] != nil {
			continue
		}
		calls = append(calls, scriptCall{index: i, key: it.Key, script: settleScript, args: s.completeArgs(it.Token, it.Result, it.Retention)})
	}
	s.pipeline(ctx, "complete", calls, func(i int, reply []any, err error) {
		if err == nil {
			err = settledOf("complete", items[i].Key, reply)
		}
		errs[i] = err
	})
	return errs
}

// scriptCall is one script run of a pipeline, for the item at index.
type scriptCall struct {
	index  int
	key    string
	script *redis.Script
	args   []any
}

// pipeline runs calls by SHA in one round trip and hands each reply to
// done. Calls that the server answered NOSCRIPT (it restarted, or someone
// ran SCRIPT FLUSH) did nothing, so their scripts are loaded again and they
// run once more, in a second round trip.
func (s *Store) pipeline(ctx context.Context, op string, calls []scriptCall, done func(index int, reply []any, err error)) {
	if len(calls) == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	cmds := s.exec(cctx, calls)
	var again []scriptCall
	for i, c := range calls {
		if redis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT") {
			again = append(again, c)
			continue
		}
		reply, err := cmds[i].Slice()
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
		reply, err := cmds[i].Slice()
		if err != nil {
			if loadErr != nil {
				err = loadErr
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
		cmds[i] = c.script.EvalSha(ctx, pipe, []string{s.redisKey(c.key)}, c.args...)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	return cmds
}
