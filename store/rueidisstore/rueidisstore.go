package rueidisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/rediscore"
)

// Defaults of Options: redisstore's.
const (
	DefaultPrefix       = "dedup:"
	DefaultTimeout      = 2 * time.Second
	DefaultAbandonedTTL = 24 * time.Hour
)

// Options configures a Store. A nil *Options means all defaults; a zero
// field takes its default. They are redisstore's Options less
// MinReplicas and ReplicaTimeout (see "What it leaves out" in the package
// documentation).
type Options struct {
	// Prefix is put before every key, so that dedup's records are told
	// apart from the rest of a shared Redis and can be scanned. A
	// redisstore with the same Prefix reads and writes the same records.
	// Defaults to "dedup:".
	Prefix string

	// Timeout bounds every call to Redis: a Redis that does not answer
	// fails the call with an error matching store.ErrUnavailable after at
	// most this long. A call whose context cannot be cancelled
	// (context.Background, or the receiver's completions, which run
	// detached from the caller) shares a deadline with the calls that
	// start within an eighth of Timeout of it, so that it may be cut short
	// by up to that eighth. Must not be negative. Defaults to 2s.
	Timeout time.Duration

	// AbandonedTTL is how long a processing record is kept after its lease
	// ends, so that the redelivery that takes over the claim of a worker
	// that crashed counts the attempt, and a message that crashes its
	// worker every time reaches MaxAttempts instead of looping. Must not
	// be negative. Defaults to 24h.
	AbandonedTTL time.Duration
}

// Store is a store.Store in Redis through a rueidis client. It is safe for
// concurrent use and holds no state of its own beyond the client, which
// the caller owns and closes.
type Store struct {
	client    rueidis.Client
	core      rediscore.Core // the prefix and AbandonedTTL, the checks and errors
	timeout   time.Duration
	deadlines rediscore.Deadlines // bound every call by timeout
	cluster   bool                // keys live on many servers: no multi-key scripts
}

var (
	_ store.Store            = (*Store)(nil)
	_ store.BatchStore       = (*Store)(nil)
	_ store.Inspector        = (*Store)(nil)
	_ store.Bounded          = (*Store)(nil)
	_ store.CompleteReporter = (*Store)(nil)
)

// New returns a Store on client after checking that Redis answers and
// loading the store's scripts on every node, all within ctx and
// Options.Timeout: a Redis that is down gives an error matching
// store.ErrUnavailable, not a hang.
func New(ctx context.Context, client rueidis.Client, opts *Options) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("rueidisstore: %w: the client is nil", store.ErrInvalidConfig)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Timeout < 0 {
		return nil, fmt.Errorf("rueidisstore: %w: Timeout is %v, it must not be negative", store.ErrInvalidConfig, o.Timeout)
	}
	if o.AbandonedTTL < 0 {
		return nil, fmt.Errorf("rueidisstore: %w: AbandonedTTL is %v, it must not be negative", store.ErrInvalidConfig, o.AbandonedTTL)
	}
	s := &Store{
		client: client,
		core: rediscore.Core{
			Pkg:          "rueidisstore",
			Prefix:       cmp.Or(o.Prefix, DefaultPrefix),
			AbandonedTTL: cmp.Or(o.AbandonedTTL, DefaultAbandonedTTL),
		},
		timeout: cmp.Or(o.Timeout, DefaultTimeout),
		cluster: client.Mode() == rueidis.ClientModeCluster,
	}
	s.deadlines.Timeout = s.timeout
	if err := s.load(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// load pings every node and loads the scripts there, so that the first
// message does not pay for it and a Redis that is down is found at
// start-up. A script the server loses later (a restart, SCRIPT FLUSH) is
// sent again by rueidis's Lua.Exec on NOSCRIPT.
func (s *Store) load(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var err error
	for addr, node := range s.client.Nodes() {
		cmds := make(rueidis.Commands, 0, 1+len(sources))
		cmds = append(cmds, node.B().Ping().Build())
		for _, src := range sources {
			cmds = append(cmds, node.B().ScriptLoad().Script(src).Build())
		}
		for _, r := range node.DoMulti(cctx, cmds...) {
			if rerr := r.Error(); rerr != nil {
				err = fmt.Errorf("%s: %w", addr, rerr)
				break
			}
		}
		if err != nil {
			break
		}
	}
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("rueidisstore: connect to Redis: %w", ctx.Err())
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("rueidisstore: %w: Redis did not answer within %v (Options.Timeout): %w", store.ErrUnavailable, s.timeout, err)
	default:
		return fmt.Errorf("rueidisstore: %w: Redis at %w", store.ErrUnavailable, err)
	}
}

// Prefix returns Options.Prefix, under which the store's Redis keys live
// (see RedisKey).
func (s *Store) Prefix() string { return s.core.Prefix }

// RedisKey returns the Redis key that holds the record of key: the prefix,
// the layout version ":v3:", then key, as redisstore's RedisKey.
func (s *Store) RedisKey(key string) string { return s.core.RedisKey(key) }

// StepsKey returns the Redis key that holds the step records of key (see
// "Step records" in the package documentation): a hash tag that puts it
// in the Cluster slot of RedisKey(key), RedisKey(key), then ":steps".
func (s *Store) StepsKey(key string) string { return s.core.StepsKey(key) }

// CallTimeout is Options.Timeout, which bounds every call of the store
// whatever its context: the receiver then spends no timer of its own on
// completions.
func (s *Store) CallTimeout() time.Duration { return s.timeout }

// Acquire claims req.Key if it is absent, failed, or processing under a
// lease that has ended, and reports the record holding it otherwise; the
// claim is made with req.Token when it is not zero. A key processing under
// req.Token itself, its lease live or ended, is the caller's own claim
// asked for again: it is granted again with its attempt count, its lease
// running req.Lease from now. A new key takes one plain command, SET NX
// GET, which also answers the record of a key that is taken; only a
// failed record, an ended lease or the caller's own claim takes a second
// call, the takeover script. A fingerprint that differs from the record's
// is store.ErrKeyReused in every state, whatever the token.
func (s *Store) Acquire(ctx context.Context, req store.AcquireRequest) (store.Claim, error) {
	if err := s.core.CheckAcquire(req); err != nil {
		return store.Claim{}, err
	}
	if err := ctx.Err(); err != nil {
		return store.Claim{}, s.core.Context("acquire", req.Key, err)
	}
	now := time.Now()
	a := s.newAcquire(req, now)
	cctx, cancel := s.deadlines.Bound(ctx, now, &a.ctx)
	defer cancel()
	c, again, err := s.claimed(&a.Acquisition, s.client.Do(cctx, s.setNXGet(a.redisKey, &a.Acquisition)))
	if err != nil {
		return store.Claim{}, s.acquireFailed(ctx, req.Key, err)
	}
	if !again {
		return c, nil
	}
	m, err := acquireScript.Exec(cctx, s.client, []string{a.redisKey}, a.Args()).ToMessage()
	if err != nil {
		return store.Claim{}, s.fail(ctx, "acquire", req.Key, err)
	}
	return s.retaken(&a.Acquisition, &m)
}

// oneAcquire is a single Acquire, allocated once with its Redis key and
// the context that bounds it.
type oneAcquire struct {
	rediscore.Acquisition
	redisKey string // cut with Record from one string
	ctx      rediscore.Bounded
}

// newAcquire prepares req at now.
func (s *Store) newAcquire(req store.AcquireRequest, now time.Time) *oneAcquire {
	a := new(oneAcquire)
	s.core.InitAcquisition(&a.Acquisition, req, now)
	var buf [160]byte
	b := append(append(append(buf[:0], s.core.Prefix...), rediscore.Layout...), req.Key...)
	k := len(b)
	all := string(rediscore.AppendProcessing(b, a.Token, a.Deadline, a.Now, req.Fingerprint))
	a.redisKey, a.Record = all[:k], all[k:]
	return a
}

// setNXGet is the command that claims a new key: SET key record NX GET
// PX ttl.
func (s *Store) setNXGet(key string, a *rediscore.Acquisition) rueidis.Completed {
	return s.client.B().Set().Key(key).Value(a.Record).Nx().Get().PxMilliseconds(rediscore.MS(a.TTL)).Build()
}

// claimed reads the answer of SET NX GET (see rediscore.Core.Claimed): a
// nil reply means the key is claimed.
func (s *Store) claimed(a *rediscore.Acquisition, r rueidis.RedisResult) (store.Claim, bool, error) {
	old, err := r.ToString()
	if err != nil && !rueidis.IsRedisNil(err) {
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

// retaken reads the answer of the takeover script, {code, record} (see
// rediscore.Core.Retaken).
func (s *Store) retaken(a *rediscore.Acquisition, m *rueidis.RedisMessage) (store.Claim, error) {
	code, v, ok := pair(m)
	if !ok {
		return store.Claim{}, s.core.Reply("acquire", a.Req.Key, describe(m))
	}
	return s.core.Retaken(a, code, v)
}

// Complete stores req.Result for the key held by req.Token and keeps it,
// immutable, for req.Retention, by the server's clock. Completing again
// with the token that completed the record succeeds and changes nothing.
func (s *Store) Complete(ctx context.Context, req store.CompleteRequest) error {
	_, err := s.CompleteReport(ctx, req)
	return err
}

// CompleteReport is Complete, reporting whether this call wrote the record
// (store.CompletionWrote) or found it completed already by req.Token
// (store.CompletionUnchanged), from the same round trip.
func (s *Store) CompleteReport(ctx context.Context, req store.CompleteRequest) (store.Completion, error) {
	if err := s.core.CheckSettle("complete", req.Key, req.Token, req.Retention); err != nil {
		return store.CompletionUnknown, err
	}
	r, err := s.evalOne(ctx, "complete", req.Key, completeScript,
		string(req.Token[:]), string(req.Result), strconv.FormatInt(rediscore.MS(req.Retention), 10))
	if err != nil {
		return store.CompletionUnknown, err
	}
	return s.completed(req.Key, &r)
}

// Release records the failure of the key held by req.Token and frees the
// key for the next Acquire, keeping the failed record (its attempt count
// and req.Error) for req.Retention, and its step records at least as
// long.
func (s *Store) Release(ctx context.Context, req store.ReleaseRequest) error {
	if err := s.core.CheckSettle("release", req.Key, req.Token, req.Retention); err != nil {
		return err
	}
	r, err := s.evalSteps(ctx, "release", req.Key, releaseScript,
		string(req.Token[:]), req.Error, strconv.FormatInt(rediscore.MS(req.Retention), 10))
	if err != nil {
		return err
	}
	return s.settled("release", req.Key, &r)
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
	r, err := s.evalSteps(ctx, "extend", req.Key, extendScript, string(req.Token[:]), deadline, strconv.FormatInt(ttl, 10))
	if err != nil {
		return err
	}
	return s.settled("extend", req.Key, &r)
}

// evalOne runs script on key with args, bounded by Options.Timeout:
// EVALSHA, and the script's source if the server lost it.
func (s *Store) evalOne(ctx context.Context, op, key string, script *rueidis.Lua, args ...string) (rueidis.RedisMessage, error) {
	return s.eval(ctx, op, key, script, []string{s.core.RedisKey(key)}, args)
}

// evalSteps runs script, one that takes a record's key and its steps key
// (rediscore.Core.StepsKey), on key with args.
func (s *Store) evalSteps(ctx context.Context, op, key string, script *rueidis.Lua, args ...string) (rueidis.RedisMessage, error) {
	return s.eval(ctx, op, key, script, s.stepsKeys(key), args)
}

// stepsKeys returns the keys of the scripts that take a record's: its
// Redis key and its steps key, in the same Cluster slot.
func (s *Store) stepsKeys(key string) []string {
	rk := s.core.RedisKey(key)
	return []string{rk, rediscore.StepsKeyOf(rk)}
}

// eval runs script on keys, those of key, with args.
func (s *Store) eval(ctx context.Context, op, key string, script *rueidis.Lua, keys, args []string) (rueidis.RedisMessage, error) {
	if err := ctx.Err(); err != nil {
		return rueidis.RedisMessage{}, s.core.Context(op, key, err)
	}
	b := new(rediscore.Bounded)
	cctx, cancel := s.deadlines.Bound(ctx, time.Now(), b)
	defer cancel()
	m, err := script.Exec(cctx, s.client, keys, args).ToMessage()
	if err != nil {
		return m, s.fail(ctx, op, key, err)
	}
	return m, nil
}

// fail wraps an error of a Redis call. When the caller's ctx ended, the
// error is the context's; anything else (a refused connection, a timeout,
// a script the server rejected) is a *store.OpError, which matches
// store.ErrUnavailable.
func (s *Store) fail(ctx context.Context, op, key string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return s.core.Context(op, key, cerr)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("no answer within %v: %w", s.timeout, err)
	}
	return s.core.Unavailable(op, key, err)
}
