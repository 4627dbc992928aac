package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/rediscore"
)

// Defaults of Options.
const (
	DefaultPrefix       = "dedup:"
	DefaultTimeout      = 2 * time.Second
	DefaultAbandonedTTL = 24 * time.Hour

	// DefaultReplicaTimeout is Options.ReplicaTimeout's default. A replica
	// that keeps up acknowledges a write within a round trip (WAIT asks
	// the replicas at once, it does not wait for their once-a-second
	// report): well under a millisecond on a LAN. The timeout only matters
	// when a replica lags or is gone, and is then what each write waits
	// before failing as unavailable: 200ms is a hundred times a healthy
	// replica's answer, a tenth of the default Timeout, and small beside
	// the receiver's StoreTimeout (a fifth of the lease), so that a
	// completion refused for want of a replica is tried again several
	// times in a lease.
	DefaultReplicaTimeout = 200 * time.Millisecond
)

// Options configures a Store. A nil *Options means all defaults; a zero
// field takes its default.
type Options struct {
	// Prefix is put before every key, so that dedup's records are told
	// apart from the rest of a shared Redis and can be scanned. Defaults to
	// "dedup:".
	Prefix string

	// Timeout bounds every call to Redis, retries included: a Redis that
	// does not answer fails the call with an error matching
	// store.ErrUnavailable after at most this long. The client's own
	// DialTimeout, ReadTimeout and WriteTimeout bound each attempt as well;
	// set ContextTimeoutEnabled on the client so that this deadline also
	// cuts a read that is already waiting. A call whose context cannot be
	// cancelled (context.Background, or the receiver's completions, which
	// run detached from the caller) shares a deadline with the calls that
	// start within an eighth of Timeout of it, so that it may be cut short
	// by up to that eighth: a deadline of its own would cost a timer and
	// four allocations a call. Must not be negative. Defaults to 2s.
	Timeout time.Duration

	// AbandonedTTL is how long a processing record is kept after its lease
	// ends. A worker that crashed leaves its claim behind; keeping it lets
	// the redelivery that takes the key over count the attempt, so a
	// message that crashes its worker every time reaches MaxAttempts and is
	// dead-lettered instead of looping. Must not be negative. Defaults to
	// 24h.
	AbandonedTTL time.Duration

	// MinReplicas is how many replicas must acknowledge each write of the
	// store before the call succeeds. After every write that the promise
	// rests on (a claim that wrote, a takeover, an extension, a step
	// record, a completion, a release, and their batch forms; not the
	// answer to a duplicate, which writes nothing, nor LoadSteps) the store
	// sends WAIT MinReplicas ReplicaTimeout on the same connection, in the
	// same pipeline; on a Cluster, to the master that took the write. A
	// write that fewer replicas acknowledged fails the call with an error
	// matching store.ErrUnavailable and ErrNotReplicated: it may be lost in
	// a failover, so it is not reported done. The Inspector's Delete and
	// DeleteIf send no WAIT: an operator's delete that a failover loses
	// leaves the record as it was. See "Replication and failover" in the
	// package documentation for what n must be and what it costs. The
	// client must be a *redis.Client (single server or Sentinel's
	// FailoverClient) or a *redis.ClusterClient. Must not be negative.
	// Defaults to 0: no WAIT, and a failover may lose the last writes
	// acknowledged by the old master.
	MinReplicas int

	// ReplicaTimeout bounds each WAIT that MinReplicas sends. It must be
	// less than Timeout and than the client's ReadTimeout, which bound the
	// write and its WAIT together. Unused when MinReplicas is 0. Defaults
	// to 200ms (see DefaultReplicaTimeout).
	ReplicaTimeout time.Duration
}

// Store is a store.Store in Redis. It is safe for concurrent use and holds
// no state of its own beyond the client, which the caller owns and closes.
type Store struct {
	client  redis.UniversalClient
	core    rediscore.Core // the prefix and AbandonedTTL, the checks and errors
	timeout time.Duration

	minReplicas    int // WAIT after each write when positive
	replicaTimeout time.Duration

	deadlines rediscore.Deadlines // bound every call by timeout
}

var (
	_ store.Store      = (*Store)(nil)
	_ store.BatchStore = (*Store)(nil)
	_ store.Inspector  = (*Store)(nil)
	_ store.Bounded    = (*Store)(nil)

	_ store.CompleteReporter = (*Store)(nil)
)

// New returns a Store on client after checking that Redis answers and
// loading the store's scripts, all within ctx and Options.Timeout: a Redis
// that is down gives an error matching store.ErrUnavailable, not a
// hang. A Redis Cluster gets the scripts on every master.
func New(ctx context.Context, client redis.UniversalClient, opts *Options) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("redisstore: %w: the client is nil", store.ErrInvalidConfig)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Timeout < 0 {
		return nil, fmt.Errorf("redisstore: %w: Timeout is %v, it must not be negative", store.ErrInvalidConfig, o.Timeout)
	}
	if o.AbandonedTTL < 0 {
		return nil, fmt.Errorf("redisstore: %w: AbandonedTTL is %v, it must not be negative", store.ErrInvalidConfig, o.AbandonedTTL)
	}
	s := &Store{
		client: client,
		core: rediscore.Core{
			Pkg:          "redisstore",
			Prefix:       cmp.Or(o.Prefix, DefaultPrefix),
			AbandonedTTL: cmp.Or(o.AbandonedTTL, DefaultAbandonedTTL),
		},
		timeout:        cmp.Or(o.Timeout, DefaultTimeout),
		minReplicas:    o.MinReplicas,
		replicaTimeout: cmp.Or(o.ReplicaTimeout, DefaultReplicaTimeout),
	}
	s.deadlines.Timeout = s.timeout
	if err := s.checkReplicas(o); err != nil {
		return nil, err
	}
	if err := s.load(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// load pings Redis and loads the scripts, so that the first message does
// not pay for it and a Redis that is down is found at start-up.
func (s *Store) load(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	err := s.client.Ping(cctx).Err()
	for _, sc := range scripts {
		if err != nil {
			break
		}
		err = sc.Load(cctx, s.client).Err()
	}
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("redisstore: connect to Redis at %s: %w", s.addrs(), ctx.Err())
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("redisstore: %w: Redis at %s did not answer within %v (Options.Timeout): %w", store.ErrUnavailable, s.addrs(), s.timeout, err)
	default:
		return fmt.Errorf("redisstore: %w: Redis at %s: %w", store.ErrUnavailable, s.addrs(), err)
	}
}

// addrs names the servers the client talks to, for error messages.
func (s *Store) addrs() string {
	switch c := s.client.(type) {
	case *redis.Client:
		return c.Options().Addr
	case *redis.ClusterClient:
		return strings.Join(c.Options().Addrs, ",")
	default:
		return "the configured address"
	}
}

// Prefix returns Options.Prefix, under which the store's Redis keys live
// (see RedisKey).
func (s *Store) Prefix() string { return s.core.Prefix }

// RedisKey returns the Redis key that holds the record of key: the prefix,
// the layout version ":v3:", then key. An operator may read it with
// redis-cli; its value is a packed string only this package reads.
func (s *Store) RedisKey(key string) string { return s.core.RedisKey(key) }

// StepsKey returns the Redis key that holds the step records of key (see
// "Step records" in the package documentation): a hash tag that puts it
// in the Cluster slot of RedisKey(key), RedisKey(key), then ":steps".
func (s *Store) StepsKey(key string) string { return s.core.StepsKey(key) }

// Acquire claims req.Key if it is absent, failed, or processing under a
// lease that has ended, and reports the record holding it otherwise; the
// claim is made with req.Token when it is not zero. A key processing under
// req.Token itself, its lease live or ended, is the caller's own claim
// asked for again: it is granted again with its attempt count, its lease
// running req.Lease from now. A new key takes one plain command, SET NX
// GET, which also answers the record of a key that is taken: a duplicate
// of a completed message, a claim in flight or a reused key cost that one
// command. Only a failed record, an ended lease or the caller's own claim
// takes a second call, a script that decides again on the record as it is
// then. A fingerprint that differs from the record's is
// store.ErrKeyReused in every state, whatever the token.
func (s *Store) Acquire(ctx context.Context, req store.AcquireRequest) (store.Claim, error) {
	if err := s.core.CheckAcquire(req); err != nil {
		return store.Claim{}, err
	}
	if err := ctx.Err(); err != nil {
		return store.Claim{}, s.core.Context("acquire", req.Key, err)
	}
	if s.minReplicas > 0 {
		return s.acquireReplicated(ctx, req)
	}
	now := time.Now()
	a := s.newAcquire(req, now)
	cctx, cancel := s.deadlines.Bound(ctx, now, &a.ctx)
	defer cancel()
	cmd := redis.NewStatusCmd(cctx, a.setNXGet()...)
	_ = s.client.Process(cctx, cmd) // the command carries its error
	c, again, err := s.claimed(&a.Acquisition, cmd)
	if err != nil {
		return store.Claim{}, s.acquireFailed(ctx, req.Key, err)
	}
	if !again {
		return c, nil
	}
	reply, err := acquireScript.Run(cctx, s.client, []string{a.redisKey}, anys(a.Args())...).Result()
	if err != nil {
		return store.Claim{}, s.fail(ctx, "acquire", req.Key, err)
	}
	return s.retaken(&a.Acquisition, reply)
}

// oneAcquire is a single Acquire, allocated once with everything its
// command needs (see setNXGet and rediscore.Deadlines.Bound).
type oneAcquire struct {
	rediscore.Acquisition
	redisKey string // cut with Record from one string
	ttlMS    int64
	argv     [7]any
	ctx      rediscore.Bounded
}

// newAcquire prepares req at now. The lease is measured on the caller's
// clock (see the package documentation); the key lives the lease plus
// Options.AbandonedTTL on the server's.
func (s *Store) newAcquire(req store.AcquireRequest, now time.Time) *oneAcquire {
	a := new(oneAcquire)
	s.core.InitAcquisition(&a.Acquisition, req, now)
	// The Redis key and the record in one string: one allocation.
	var buf [160]byte
	b := append(append(append(buf[:0], s.core.Prefix...), rediscore.Layout...), req.Key...)
	k := len(b)
	all := string(rediscore.AppendProcessing(b, a.Token, a.Deadline, a.Now, req.Fingerprint))
	a.redisKey, a.Record = all[:k], all[k:]
	return a
}

// setNXGet returns the arguments of the SET NX GET that claims a new key,
// built into a: the strings and the TTL passed by pointer, which go-redis
// writes as their values and an interface holds with no allocation.
func (a *oneAcquire) setNXGet() []any {
	a.ttlMS = rediscore.MS(a.TTL)
	a.argv = [7]any{"set", &a.redisKey, &a.Record, "px", &a.ttlMS, "nx", "get"}
	return a.argv[:]
}

// claimed reads the answer of SET NX GET (see rediscore.Core.Claimed): no
// record (redis.Nil) means the key is claimed.
func (s *Store) claimed(a *rediscore.Acquisition, cmd interface{ Result() (string, error) }) (c store.Claim, again bool, _ error) {
	old, err := cmd.Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return store.Claim{}, false, err
	}
	return s.core.Claimed(a, old, err == nil)
}

// acquireFailed is the error of an Acquire that SET NX GET answered with
// err: a reused key is the caller's, anything else a store failure.
func (s *Store) acquireFailed(ctx context.Context, key string, err error) error {
	if errors.Is(err, store.ErrKeyReused) {
		return err
	}
	return s.fail(ctx, "acquire", key, err)
}

// retaken reads the answer of acquireScript, {code, record} (see
// rediscore.Core.Retaken).
func (s *Store) retaken(a *rediscore.Acquisition, reply any) (store.Claim, error) {
	f, _ := reply.([]any)
	code, ok1 := field[int64](f, 0)
	v, ok2 := field[string](f, 1)
	if !ok1 || !ok2 {
		return store.Claim{}, s.core.Reply("acquire", a.Req.Key, reply)
	}
	return s.core.Retaken(a, code, v)
}

// anys returns args as go-redis's arguments.
func anys(args []string) []any {
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = a
	}
	return out
}

// Complete stores req.Result for the key held by req.Token and keeps it,
// immutable, for req.Retention, by the server's clock. Completing again
// with the token that completed the record succeeds and changes nothing:
// the first result and expiry stay.
func (s *Store) Complete(ctx context.Context, req store.CompleteRequest) error {
	_, err := s.CompleteReport(ctx, req)
	return err
}

// CompleteReport is Complete, reporting whether this call wrote the record
// (store.CompletionWrote) or found it completed already by req.Token
// (store.CompletionUnchanged): the completion script answers which, in the
// same round trip.
func (s *Store) CompleteReport(ctx context.Context, req store.CompleteRequest) (store.Completion, error) {
	if err := s.core.CheckSettle("complete", req.Key, req.Token, req.Retention); err != nil {
		return store.CompletionUnknown, err
	}
	if s.minReplicas > 0 {
		return s.completeReplicated(ctx, req)
	}
	reply, err := s.evalOne(ctx, "complete", req.Key, completeScript, oneArgs{token: req.Token, bytes: req.Result, n: rediscore.MS(req.Retention)})
	if err != nil {
		return store.CompletionUnknown, err
	}
	return s.completed(req.Key, reply)
}

func completeArgs(req store.CompleteRequest) []any {
	return []any{string(req.Token[:]), req.Result, rediscore.MS(req.Retention)}
}

// CallTimeout is Options.Timeout, which bounds every call of the store,
// retries included, whatever its context: the receiver then spends no
// timer of its own on completions.
func (s *Store) CallTimeout() time.Duration { return s.timeout }

// Release records the failure of the key held by req.Token and frees the
// key for the next Acquire, keeping the failed record (its attempt count
// and req.Error) for req.Retention, and its step records at least as
// long.
func (s *Store) Release(ctx context.Context, req store.ReleaseRequest) error {
	if err := s.core.CheckSettle("release", req.Key, req.Token, req.Retention); err != nil {
		return err
	}
	return s.settle(ctx, "release", req.Key, releaseScript, oneArgs{token: req.Token, text: req.Error, n: rediscore.MS(req.Retention)})
}

// settle runs one of the scripts that take a record's key and its steps
// key (Release, Extend) and answer 1 (done) or 0 (the token does not hold
// the key).
func (s *Store) settle(ctx context.Context, op, key string, script *redis.Script, args oneArgs) error {
	if s.minReplicas > 0 {
		return s.settleReplicated(ctx, op, key, script, args.list())
	}
	reply, err := s.evalSettle(ctx, op, key, script, args)
	if err != nil {
		return err
	}
	return s.settled(op, key, reply)
}

// settleCall is evalCall for the scripts that take a record's key and its
// steps key (Release, Extend): built in one allocation, the keys and
// arguments cut from one string.
type settleCall struct {
	argv                    [8]any
	sha                     string
	key, steps, token, text string
	n                       int64
	ctx                     rediscore.Bounded
}

// evalSettle is evalOne for the scripts that take a record's key and its
// steps key.
func (s *Store) evalSettle(ctx context.Context, op, key string, script *redis.Script, args oneArgs) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, s.core.Context(op, key, err)
	}
	now := time.Now()
	c := new(settleCall)
	k := len(s.core.Prefix) + len(rediscore.Layout) + len(key)
	var b strings.Builder
	b.Grow(k + rediscore.StepsKeyLen(k) + len(args.token) + len(args.text))
	b.WriteString(s.core.Prefix)
	b.WriteString(rediscore.Layout)
	b.WriteString(key)
	// The steps key is built from the record key's bytes written so far,
	// which stay put: b was grown for everything at once.
	var buf [256]byte
	b.Write(rediscore.AppendStepsKey(buf[:0], b.String()))
	sk := b.Len()
	b.Write(args.token[:])
	b.WriteString(args.text)
	all := b.String()
	c.key, c.steps, c.token, c.text = all[:k], all[k:sk], all[sk:sk+len(args.token)], all[sk+len(args.token):]
	c.sha, c.n = script.Hash(), args.n
	c.argv = [8]any{"evalsha", &c.sha, 2, &c.key, &c.steps, &c.token, &c.text, &c.n}
	cctx, cancel := s.deadlines.Bound(ctx, now, &c.ctx)
	defer cancel()
	cmd := redis.NewCmd(cctx, c.argv[:]...)
	cmd.SetFirstKeyPos(3)
	err := s.client.Process(cctx, cmd)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmd = script.Eval(cctx, s.client, []string{c.key, c.steps}, c.token, c.text, c.n)
		err = cmd.Err()
	}
	if err != nil {
		return nil, s.fail(ctx, op, key, err)
	}
	return cmd.Val(), nil
}

// evalSteps runs script, one that takes a record's key and its steps key
// (rediscore.Core.StepsKey), on key with args: EVALSHA, and the source if
// the server lost it. These are not the calls of a new message (Acquire,
// Complete), which evalOne builds with fewer allocations.
func (s *Store) evalSteps(ctx context.Context, op, key string, script *redis.Script, args []any) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, s.core.Context(op, key, err)
	}
	var b rediscore.Bounded
	cctx, cancel := s.deadlines.Bound(ctx, time.Now(), &b)
	defer cancel()
	reply, err := script.Run(cctx, s.client, s.stepsKeys(key), args...).Result()
	if err != nil {
		return nil, s.fail(ctx, op, key, err)
	}
	return reply, nil
}

// stepsKeys returns the keys of the scripts that take a record's: its
// Redis key and its steps key, in the same Cluster slot.
func (s *Store) stepsKeys(key string) []string {
	rk := s.RedisKey(key)
	return []string{rk, rediscore.StepsKeyOf(rk)}
}

// oneArgs are the arguments of the scripts that change one claim
// (complete, release, extend): the claim's token, a text (the result, the
// error, the new deadline) and a number (the retention, the key's TTL).
type oneArgs struct {
	token store.Token
	text  string
	bytes []byte // the text, when the caller has it as bytes (evalOne only)
	n     int64
}

// list returns the arguments as a script's ARGV, for a pipeline.
func (o oneArgs) list() []any {
	var text any = o.text
	if o.bytes != nil {
		text = o.bytes
	}
	return []any{string(o.token[:]), text, o.n}
}

// evalCall is a script run on one key, built in one allocation: its
// arguments, the strings they point to (cut from one string) and its
// bounded context (see Store.bound).
type evalCall struct {
	argv             [7]any
	sha              string
	key, token, text string
	n                int64
	ctx              rediscore.Bounded
}

// evalOne runs script on key with args and returns its reply: EVALSHA,
// and the script's text if the server lost it (NOSCRIPT: it restarted, or
// someone ran SCRIPT FLUSH), as go-redis's Script.Run does. The command
// is built here rather than by go-redis, which boxes every argument and
// allocates about a dozen times more.
func (s *Store) evalOne(ctx context.Context, op, key string, script *redis.Script, args oneArgs) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, s.core.Context(op, key, err)
	}
	now := time.Now()
	c := new(evalCall)
	var b strings.Builder
	b.Grow(len(s.core.Prefix) + len(rediscore.Layout) + len(key) + len(args.token) + len(args.text) + len(args.bytes))
	b.WriteString(s.core.Prefix)
	b.WriteString(rediscore.Layout)
	b.WriteString(key)
	k := b.Len()
	b.Write(args.token[:])
	b.WriteString(args.text)
	b.Write(args.bytes)
	all := b.String()
	c.key, c.token, c.text = all[:k], all[k:k+len(args.token)], all[k+len(args.token):]
	c.sha, c.n = script.Hash(), args.n
	c.argv = [7]any{"evalsha", &c.sha, 1, &c.key, &c.token, &c.text, &c.n}
	cctx, cancel := s.deadlines.Bound(ctx, now, &c.ctx)
	defer cancel()
	cmd := redis.NewCmd(cctx, c.argv[:]...)
	cmd.SetFirstKeyPos(3)
	err := s.client.Process(cctx, cmd)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmd = script.Eval(cctx, s.client, []string{c.key}, c.token, c.text, c.n)
		err = cmd.Err()
	}
	if err != nil {
		return nil, s.fail(ctx, op, key, err)
	}
	return cmd.Val(), nil
}

// Extend sets the lease of the key held by req.Token to req.Lease from
// now (this process's clock, as every lease), even when that is earlier
// than the deadline it had. A claim whose lease ended is extended too
// while no other Acquire has taken the key over. The key's step records
// are kept at least as long as the record, plus the retention SaveStep
// was given.
func (s *Store) Extend(ctx context.Context, req store.ExtendRequest) error {
	if err := s.core.CheckExtend(req); err != nil {
		return err
	}
	deadline, ttl := s.core.ExtendArgs(req, time.Now())
	return s.settle(ctx, "extend", req.Key, extendScript, oneArgs{token: req.Token, text: deadline, n: ttl})
}

func (s *Store) extendArgs(req store.ExtendRequest, now time.Time) []any {
	deadline, ttl := s.core.ExtendArgs(req, now)
	return []any{string(req.Token[:]), deadline, ttl}
}

// fail wraps an error of a Redis call. When the caller's ctx ended, the
// error is the context's; anything else (a refused connection, a timeout,
// a script the server rejected) is a *store.OpError, which matches
// store.ErrUnavailable. An error that may mean a Cluster's shard moved has
// the client reload its slot map (see refreshTopology).
func (s *Store) fail(ctx context.Context, op, key string, err error) error {
	s.refreshTopology(err)
	if cerr := ctx.Err(); cerr != nil {
		return s.core.Context(op, key, cerr)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("no answer within %v: %w", s.timeout, err)
	}
	return s.core.Unavailable(op, key, err)
}
