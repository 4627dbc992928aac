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
)

// Defaults of Options.
const (
	DefaultPrefix       = "dedup:"
	DefaultTimeout      = 2 * time.Second
	DefaultAbandonedTTL = 24 * time.Hour
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
	// cuts a read that is already waiting. Must not be negative. Defaults
	// to 2s.
	Timeout time.Duration

	// AbandonedTTL is how long a processing record is kept after its lease
	// ends. A worker that crashed leaves its claim behind; keeping it lets
	// the redelivery that takes the key over count the attempt, so a
	// message that crashes its worker every time reaches MaxAttempts and is
	// dead-lettered instead of looping. Must not be negative. Defaults to
	// 24h.
	AbandonedTTL time.Duration
}

// Store is a store.Store in Redis. It is safe for concurrent use and holds
// no state of its own beyond the client, which the caller owns and closes.
type Store struct {
	client       redis.UniversalClient
	prefix       string
	timeout      time.Duration
	abandonedTTL time.Duration
}

var (
	_ store.Store      = (*Store)(nil)
	_ store.BatchStore = (*Store)(nil)
	_ store.Inspector  = (*Store)(nil)
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
		client:       client,
		prefix:       cmp.Or(o.Prefix, DefaultPrefix),
		timeout:      cmp.Or(o.Timeout, DefaultTimeout),
		abandonedTTL: cmp.Or(o.AbandonedTTL, DefaultAbandonedTTL),
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

// Prefix returns the prefix of the store's Redis keys.
func (s *Store) Prefix() string { return s.prefix }

// redisKey is the Redis key of a record key.
func (s *Store) redisKey(key string) string { return s.prefix + key }

// Acquire claims req.Key if it is absent, failed, or processing under a
// lease that has ended, and reports the record holding it otherwise, in
// one script run. A fingerprint that differs from the record's is
// store.ErrKeyReused in every state.
func (s *Store) Acquire(ctx context.Context, req store.AcquireRequest) (store.Claim, error) {
	if err := checkAcquire(req); err != nil {
		return store.Claim{}, err
	}
	if err := ctx.Err(); err != nil {
		return store.Claim{}, errContext("acquire", req.Key, err)
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	token := store.NewToken()
	reply, err := acquireScript.Run(cctx, s.client, []string{s.redisKey(req.Key)}, s.acquireArgs(token, req)...).Slice()
	if err != nil {
		return store.Claim{}, s.fail(ctx, "acquire", req.Key, err)
	}
	return claimOf(req.Key, token, reply)
}

func (s *Store) acquireArgs(token store.Token, req store.AcquireRequest) []any {
	return []any{string(token[:]), ms(req.Lease), req.Fingerprint, ms(s.abandonedTTL)}
}

func checkAcquire(req store.AcquireRequest) error {
	if req.Key == "" {
		return errEmptyKey("acquire")
	}
	if req.Lease <= 0 {
		return fmt.Errorf("redisstore: acquire %q: %w: the lease is %v, it must be positive", req.Key, store.ErrInvalidConfig, req.Lease)
	}
	return nil
}

// Complete stores req.Result for the key held by req.Token and keeps it,
// immutable, for req.Retention (the key's Redis expiry). Completing again
// with the token that completed the record succeeds and changes nothing:
// the first result and expiry stay.
func (s *Store) Complete(ctx context.Context, req store.CompleteRequest) error {
	if err := checkSettle("complete", req.Key, req.Token, req.Retention); err != nil {
		return err
	}
	return s.settle(ctx, "complete", req.Key, completeArgs(req))
}

func completeArgs(req store.CompleteRequest) []any {
	return []any{string(req.Token[:]), "c", "r", req.Result, ms(req.Retention)}
}

// Release records the failure of the key held by req.Token and frees the
// key for the next Acquire, keeping the failed record (its attempt count
// and req.Error) for req.Retention.
func (s *Store) Release(ctx context.Context, req store.ReleaseRequest) error {
	if err := checkSettle("release", req.Key, req.Token, req.Retention); err != nil {
		return err
	}
	return s.settle(ctx, "release", req.Key, []any{string(req.Token[:]), "f", "e", req.Error, ms(req.Retention)})
}

func (s *Store) settle(ctx context.Context, op, key string, args []any) error {
	if err := ctx.Err(); err != nil {
		return errContext(op, key, err)
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	reply, err := settleScript.Run(cctx, s.client, []string{s.redisKey(key)}, args...).Slice()
	if err != nil {
		return s.fail(ctx, op, key, err)
	}
	return settledOf(op, key, reply)
}

// checkSettle checks the arguments of Complete and Release. A zero token
// never holds a key, so it gets ErrLeaseLost without a round trip.
func checkSettle(op, key string, token store.Token, retention time.Duration) error {
	if key == "" {
		return errEmptyKey(op)
	}
	if retention <= 0 {
		return fmt.Errorf("redisstore: %s %q: %w: the retention is %v, it must be positive", op, key, store.ErrInvalidConfig, retention)
	}
	if token.IsZero() {
		return errLeaseLost(op, key)
	}
	return nil
}

// Extend sets the lease of the key held by req.Token to req.Lease from
// now, even when that is earlier than the deadline it had. A claim whose
// lease ended is extended too while no other Acquire has taken the key
// over.
func (s *Store) Extend(ctx context.Context, req store.ExtendRequest) error {
	if err := checkExtend(req); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return errContext("extend", req.Key, err)
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	reply, err := extendScript.Run(cctx, s.client, []string{s.redisKey(req.Key)}, s.extendArgs(req)...).Slice()
	if err != nil {
		return s.fail(ctx, "extend", req.Key, err)
	}
	return settledOf("extend", req.Key, reply)
}

func (s *Store) extendArgs(req store.ExtendRequest) []any {
	return []any{string(req.Token[:]), ms(req.Lease), ms(s.abandonedTTL)}
}

func checkExtend(req store.ExtendRequest) error {
	if req.Key == "" {
		return errEmptyKey("extend")
	}
	if req.Lease <= 0 {
		return fmt.Errorf("redisstore: extend %q: %w: the lease is %v, it must be positive", req.Key, store.ErrInvalidConfig, req.Lease)
	}
	if req.Token.IsZero() {
		return errLeaseLost("extend", req.Key)
	}
	return nil
}

// ms converts d to whole milliseconds, rounding up so that a positive
// duration never becomes a zero lease.
func ms(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// fail wraps an error of a Redis call. When the caller's ctx ended, the
// error is the context's; anything else (a refused connection, a timeout,
// a script the server rejected) is a *store.OpError, which matches
// store.ErrUnavailable.
func (s *Store) fail(ctx context.Context, op, key string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return errContext(op, key, cerr)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("no answer within %v: %w", s.timeout, err)
	}
	return &store.OpError{Op: op, Key: key, Err: fmt.Errorf("redisstore: %w", err)}
}

// errContext is the error of a call whose context ended: the context's
// error, not a store failure.
func errContext(op, key string, err error) error {
	return fmt.Errorf("redisstore: %s %q: %w", op, key, err)
}

func errLeaseLost(op, key string) error {
	return fmt.Errorf("redisstore: %s %q: %w", op, key, store.ErrLeaseLost)
}

func errEmptyKey(op string) error {
	return fmt.Errorf("redisstore: %s: %w: the key is empty", op, store.ErrInvalidKey)
}
