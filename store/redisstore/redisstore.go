package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedup-go/dedup"
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
	// dedup.ErrStoreUnavailable after at most this long. The client's own
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

// Store is a dedup.Store in Redis. It is safe for concurrent use and holds
// no state of its own beyond the client, which the caller owns and closes.
type Store struct {
	client       redis.UniversalClient
	prefix       string
	timeout      time.Duration
	abandonedTTL time.Duration
}

var (
	_ dedup.Store      = (*Store)(nil)
	_ dedup.BatchStore = (*Store)(nil)
	_ dedup.Inspector  = (*Store)(nil)
)

// New returns a Store on client after checking that Redis answers and
// loading the store's scripts, all within ctx and Options.Timeout: a Redis
// that is down gives an error matching dedup.ErrStoreUnavailable, not a
// hang. A Redis Cluster gets the scripts on every master.
func New(ctx context.Context, client redis.UniversalClient, opts *Options) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("redisstore: %w: the client is nil", dedup.ErrInvalidConfig)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Timeout < 0 {
		return nil, fmt.Errorf("redisstore: %w: Timeout is %v, it must not be negative", dedup.ErrInvalidConfig, o.Timeout)
	}
	if o.AbandonedTTL < 0 {
		return nil, fmt.Errorf("redisstore: %w: AbandonedTTL is %v, it must not be negative", dedup.ErrInvalidConfig, o.AbandonedTTL)
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
		return fmt.Errorf("redisstore: %w: Redis at %s did not answer within %v (Options.Timeout): %w", dedup.ErrStoreUnavailable, s.addrs(), s.timeout, err)
	default:
		return fmt.Errorf("redisstore: %w: Redis at %s: %w", dedup.ErrStoreUnavailable, s.addrs(), err)
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

// Acquire claims key if it is absent, failed, or processing under an
// expired lease, and reports the record holding it otherwise, in one
// script run.
func (s *Store) Acquire(ctx context.Context, key string, req dedup.AcquireRequest) (dedup.Claim, error) {
	if err := checkAcquire(key, req); err != nil {
		return dedup.Claim{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	token := dedup.NewToken()
	reply, err := acquireScript.Run(cctx, s.client, []string{s.redisKey(key)}, s.acquireArgs(token, req)...).Slice()
	if err != nil {
		return dedup.Claim{}, s.fail(ctx, "acquire", key, err)
	}
	return claimOf(key, token, reply)
}

func (s *Store) acquireArgs(token dedup.Token, req dedup.AcquireRequest) []any {
	return []any{string(token[:]), ms(req.Lease), req.Fingerprint, ms(s.abandonedTTL)}
}

func checkAcquire(key string, req dedup.AcquireRequest) error {
	if key == "" {
		return errEmptyKey("acquire")
	}
	if req.Lease <= 0 {
		return fmt.Errorf("redisstore: acquire %q: %w: the lease is %v, it must be positive", key, dedup.ErrInvalidConfig, req.Lease)
	}
	return nil
}

// Complete stores result for the key held by token and keeps it, immutable,
// for retention (the key's Redis TTL).
func (s *Store) Complete(ctx context.Context, key string, token dedup.Token, result []byte, retention time.Duration) error {
	if err := checkSettle("complete", key, token, retention); err != nil {
		return err
	}
	return s.settle(ctx, "complete", key, s.completeArgs(token, result, retention))
}

func (s *Store) completeArgs(token dedup.Token, result []byte, retention time.Duration) []any {
	return []any{string(token[:]), "c", "r", result, ms(retention)}
}

// Release records the failure of the key held by token and frees the key
// for the next Acquire, keeping the failed record for failure.Retention.
func (s *Store) Release(ctx context.Context, key string, token dedup.Token, failure dedup.Failure) error {
	if err := checkSettle("release", key, token, failure.Retention); err != nil {
		return err
	}
	return s.settle(ctx, "release", key, []any{string(token[:]), "f", "e", failure.Error, ms(failure.Retention)})
}

func (s *Store) settle(ctx context.Context, op, key string, args []any) error {
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
func checkSettle(op, key string, token dedup.Token, retention time.Duration) error {
	if key == "" {
		return errEmptyKey(op)
	}
	if retention <= 0 {
		return fmt.Errorf("redisstore: %s %q: %w: the retention is %v, it must be positive", op, key, dedup.ErrInvalidConfig, retention)
	}
	if token.IsZero() {
		return errLeaseLost(op, key)
	}
	return nil
}

// Extend pushes the lease of the key held by token to lease from now. A
// claim whose lease ended is extended too while no other Acquire has taken
// the key over.
func (s *Store) Extend(ctx context.Context, key string, token dedup.Token, lease time.Duration) error {
	if key == "" {
		return errEmptyKey("extend")
	}
	if lease <= 0 {
		return fmt.Errorf("redisstore: extend %q: %w: the lease is %v, it must be positive", key, dedup.ErrInvalidConfig, lease)
	}
	if token.IsZero() {
		return errLeaseLost("extend", key)
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	reply, err := extendScript.Run(cctx, s.client, []string{s.redisKey(key)}, string(token[:]), ms(lease), ms(s.abandonedTTL)).Slice()
	if err != nil {
		return s.fail(ctx, "extend", key, err)
	}
	return settledOf("extend", key, reply)
}

// ms converts d to whole milliseconds, rounding up so that a positive
// duration never becomes a zero lease.
func ms(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// fail wraps an error of a Redis call. When the caller's ctx ended, the
// error is the context's; anything else (a refused connection, a timeout,
// a script the server rejected) matches dedup.ErrStoreUnavailable.
func (s *Store) fail(ctx context.Context, op, key string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("redisstore: %s %q: %w", op, key, cerr)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("no answer within %v: %w", s.timeout, err)
	}
	return &dedup.StoreError{Op: op, Key: key, Err: fmt.Errorf("redisstore: %w", err)}
}

func errLeaseLost(op, key string) error {
	return fmt.Errorf("redisstore: %s %q: %w", op, key, dedup.ErrLeaseLost)
}

func errEmptyKey(op string) error {
	return fmt.Errorf("redisstore: %s: %w: the key is empty", op, dedup.ErrInvalidKey)
}
