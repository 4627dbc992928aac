package redisstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/rediscore"
)

// AcquireBatch runs Acquire for every request: one pipeline of SET NX GET,
// and, only for the keys that found a failed record, an ended lease or
// the caller's own claim (AcquireRequest.Token), a second round trip of
// the script (one run for all of them on a single server, a pipeline of
// one run per key on a Cluster). A key repeated in reqs is claimed by its
// first request, which the later ones find holding it (or, with its
// token, granted again). A request with bad input gets the error Acquire
// would give it, and a cancelled context fails every other request with
// its error.
func (s *Store) AcquireBatch(ctx context.Context, reqs []store.AcquireRequest) []store.AcquireOutcome {
	out := make([]store.AcquireOutcome, len(reqs))
	acqs := make([]*rediscore.Acquisition, len(reqs))
	all := make([]rediscore.Acquisition, len(reqs))
	now := time.Now()
	var valid []int
	for i, req := range reqs {
		if out[i].Err = s.core.CheckAcquire(req); out[i].Err == nil {
			acqs[i] = &all[i]
			s.core.InitAcquisition(acqs[i], req, now)
			valid = append(valid, i)
		}
	}
	if err := ctx.Err(); err != nil {
		for i, a := range acqs {
			if a != nil {
				out[i].Err = s.core.Context("acquire", a.Req.Key, err)
			}
		}
		return out
	}
	if s.minReplicas > 0 {
		s.acquireWaited(ctx, acqs, out)
		return out
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	pipe := s.client.Pipeline()
	cmds := make([]*redis.StatusCmd, len(reqs))
	// Every SET NX GET is built here into one array of arguments, the keys
	// and records passed as *string and a TTL repeated from the key before
	// as the same boxed value: go-redis's SetArgs would allocate some eight
	// times a key.
	keys := s.core.RedisKeys(len(valid), func(k int) string { return reqs[valid[k]].Key })
	records := rediscore.PackAll(len(valid), func(k int) *rediscore.Acquisition { return acqs[valid[k]] })
	argv := make([]any, 7*len(valid))
	ttl, boxed := int64(-1), any(nil)
	for k, i := range valid {
		a := acqs[i]
		if m := rediscore.MS(a.TTL); m != ttl {
			ttl, boxed = m, m
		}
		args := argv[7*k : 7*k+7 : 7*k+7]
		args[0], args[1], args[2], args[3], args[4], args[5], args[6] = "set", &keys[k], &records[k], "px", boxed, "nx", "get"
		cmds[i] = redis.NewStatusCmd(cctx, args...)
		_ = pipe.Process(cctx, cmds[i])
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
		c, retry, err := s.claimed(a, cmds[i])
		switch {
		case err != nil:
			out[i].Err = s.acquireFailed(ctx, a.Req.Key, err)
		case retry:
			again = append(again, scriptCall{index: i, key: a.Req.Key, script: acquireScript, args: anys(a.Args())})
		default:
			out[i].Claim = c
		}
	}
	s.run(ctx, "acquire", acquireManyScript, again, func(i int, reply any, err error) {
		if err == nil {
			out[i].Claim, err = s.retaken(acqs[i], reply)
		}
		out[i].Err = err
	})
	return out
}

// CompleteBatch runs Complete for every request in one round trip: one
// script run for all of them on a single server (one reading of the
// server's clock, one MGET), a pipeline of one run per key on a Cluster.
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
	if s.minReplicas > 0 {
		var todo []int
		for i, req := range reqs {
			if errs[i] = s.core.CheckSettle("complete", req.Key, req.Token, req.Retention); errs[i] == nil {
				todo = append(todo, i)
			}
		}
		s.completeWaited(ctx, reqs, todo, errs, done)
		return
	}
	if s.oneServer() {
		s.completeMany(ctx, reqs, errs, done)
		return
	}
	var calls []scriptCall
	for i, req := range reqs {
		if errs[i] = s.core.CheckSettle("complete", req.Key, req.Token, req.Retention); errs[i] != nil {
			continue
		}
		calls = append(calls, scriptCall{index: i, key: req.Key, script: completeScript, args: completeArgs(req)})
	}
	s.run(ctx, "complete", completeManyScript, calls, func(i int, reply any, err error) {
		c := store.CompletionUnknown
		if err == nil {
			c, err = s.completed(reqs[i].Key, reply)
		}
		errs[i] = err
		if done != nil {
			done[i] = c
		}
	})
}

// completeMany is CompleteBatch on a single server: completeManyScript for
// up to maxMany keys a run. Its arguments are built straight into the
// command, with no slice of arguments per key, and a retention repeated
// from the key before is the same boxed value: a batch's completion costs
// the client little beyond the bytes it sends.
func (s *Store) completeMany(ctx context.Context, reqs []store.CompleteRequest, errs []error, done []store.Completion) {
	todo := make([]int, 0, len(reqs))
	for i, req := range reqs {
		if errs[i] = s.core.CheckSettle("complete", req.Key, req.Token, req.Retention); errs[i] == nil {
			todo = append(todo, i)
		}
	}
	if err := ctx.Err(); err != nil {
		for _, i := range todo {
			errs[i] = s.core.Context("complete", reqs[i].Key, err)
		}
		return
	}
	for len(todo) > 0 {
		chunk := todo[:min(len(todo), rediscore.MaxMany)]
		todo = todo[len(chunk):]
		keys := s.core.RedisKeys(len(chunk), func(k int) string { return reqs[chunk[k]].Key })
		// The tokens and results are copied into one string, and passed
		// as *string cut from it, as the keys are.
		size := 0
		for _, i := range chunk {
			size += len(reqs[i].Token) + len(reqs[i].Result)
		}
		var b strings.Builder
		b.Grow(size)
		for _, i := range chunk {
			b.Write(reqs[i].Token[:])
			b.Write(reqs[i].Result)
		}
		text, at := b.String(), 0
		cut := make([]string, 2*len(chunk))
		args := make([]any, 0, 3*len(chunk))
		retention, boxed := int64(-1), any(nil)
		for k, i := range chunk {
			r := &reqs[i]
			if m := rediscore.MS(r.Retention); m != retention {
				retention, boxed = m, m
			}
			n := len(r.Token) + len(r.Result)
			cut[2*k], cut[2*k+1] = text[at:at+len(r.Token)], text[at+len(r.Token):at+n]
			at += n
			args = append(args, &cut[2*k], &cut[2*k+1], boxed)
		}
		script := completeManyScript
		if rediscore.Repeats(keys) {
			script = completeEachScript
		}
		replies, err := s.evalMany(ctx, script, keys, args)
		for k, i := range chunk {
			key := reqs[i].Key
			switch {
			case err != nil:
				errs[i] = s.fail(ctx, "complete", key, err)
			case k >= len(replies):
				errs[i] = s.core.Reply("complete", key, replies)
			default:
				var c store.Completion
				c, errs[i] = s.completed(key, replies[k])
				if done != nil {
					done[i] = c
				}
			}
		}
	}
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
		calls = append(calls, scriptCall{index: i, key: req.Key, script: extendScript, args: s.extendArgs(req, now), steps: true})
	}
	if s.minReplicas > 0 {
		s.extendWaited(ctx, reqs, calls, errs)
		return errs
	}
	s.run(ctx, "extend", extendManyScript, calls, func(i int, reply any, err error) {
		if err == nil {
			err = s.settled("extend", reqs[i].Key, reply)
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
			done(c.index, nil, s.core.Context(op, c.key, err))
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
		chunk := calls[:min(len(calls), rediscore.MaxMany)]
		calls = calls[len(chunk):]
		keys := s.core.RedisKeys(len(chunk), func(k int) string { return chunk[k].key })
		if chunk[0].steps {
			keys = withSteps(keys)
		}
		args := make([]any, 0, len(chunk)*len(chunk[0].args))
		for _, c := range chunk {
			args = append(args, c.args...)
		}
		replies, err := s.evalMany(ctx, script, keys, args)
		for i, c := range chunk {
			if err != nil {
				done(c.index, nil, s.fail(ctx, op, c.key, err))
				continue
			}
			if i >= len(replies) {
				done(c.index, nil, s.core.Reply(op, c.key, replies))
				continue
			}
			done(c.index, replies[i], nil)
		}
	}
}

// evalMany runs a multi-key script on the single server: EVALSHA with
// keys, then args. The command is built here rather than by go-redis's
// EvalSha, which boxes every key again; a key is passed as a *string,
// which go-redis writes as the string and the interface holds with no
// allocation. A server that lost its scripts (NOSCRIPT: it restarted, or
// someone ran SCRIPT FLUSH) ran nothing, so the scripts are loaded again
// and the run is sent once more.
func (s *Store) evalMany(ctx context.Context, script *redis.Script, keys []string, args []any) ([]any, error) {
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	cmdArgs = append(cmdArgs, "evalsha", script.Hash(), len(keys))
	for k := range keys {
		cmdArgs = append(cmdArgs, &keys[k])
	}
	cmdArgs = append(cmdArgs, args...)
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	cmd := redis.NewCmd(cctx, cmdArgs...)
	err := s.client.Process(cctx, cmd)
	if redis.HasErrorPrefix(err, "NOSCRIPT") {
		if err = s.loadScripts(cctx); err == nil {
			cmd = redis.NewCmd(cctx, cmdArgs...)
			err = s.client.Process(cctx, cmd)
		}
	}
	if err != nil {
		return nil, err
	}
	return cmd.Slice()
}

// scriptCall is one script run of a batch, for the request at index.
type scriptCall struct {
	index  int
	key    string
	script *redis.Script
	args   []any
	// steps: the script takes the record's steps key after its key
	// (Release, Extend, SaveStep); a batch's calls all do or all do not.
	steps bool
}

// callKeys returns the keys of c's script: the record's Redis key, and
// its steps key when the script takes it.
func (s *Store) callKeys(c scriptCall) []string {
	if c.steps {
		return s.stepsKeys(c.key)
	}
	return []string{s.RedisKey(c.key)}
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
	if err := s.loadScripts(cctx); err != nil {
		// The cause is the load that failed: the NOSCRIPT a second run
		// would get again only names the script cache being recovered.
		for _, c := range again {
			done(c.index, nil, s.fail(ctx, op, c.key, errReload(err)))
		}
		return
	}
	cmds = s.exec(cctx, again)
	for i, c := range again {
		reply, err := cmds[i].Result()
		if err != nil {
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
		cmds[i] = c.script.EvalSha(ctx, pipe, s.callKeys(c), c.args...)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	return cmds
}

// errReload is the error of the scripts that could not be loaded again
// after the server answered NOSCRIPT: err, the load's, is the cause.
func errReload(err error) error {
	return fmt.Errorf("load the scripts the server lost (NOSCRIPT): %w", err)
}

// loadScripts loads every script of the package, as New does.
func (s *Store) loadScripts(ctx context.Context) error {
	for _, sc := range scripts {
		if err := sc.Load(ctx, s.client).Err(); err != nil {
			return err
		}
	}
	return nil
}
