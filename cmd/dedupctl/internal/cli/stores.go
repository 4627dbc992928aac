package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/pgstore"
	"github.com/dedup-go/dedup/store/redisstore"
)

// openStore opens the store the flags name (exactly one of --redis and
// --postgres) and checks that it answers within --timeout. The error of an
// unreachable store names its address. close releases its connections.
func (o *options) openStore(ctx context.Context) (ins store.Inspector, where string, close func(), err error) {
	switch {
	case o.redisURL != "" && o.postgres != "":
		return nil, "", nil, usageErrorf("give one store: --redis or --postgres, not both")
	case o.redisURL != "":
		return o.openRedis(ctx)
	case o.postgres != "":
		return o.openPostgres(ctx)
	default:
		return nil, "", nil, usageErrorf("no store: give --redis URL ($%s) or --postgres DSN ($%s)", EnvRedisURL, EnvPostgres)
	}
}

// redisClient builds the client --redis and --redis-mode ask for, and
// says where it connects. In auto mode a URL with master_name is a
// Sentinel's and one with addr a Cluster's (as go-redis reads them); any
// other URL is asked, with INFO server, what it points at: a Cluster node
// reads the whole Cluster, and a Sentinel without master_name is a usage
// error rather than a store that fails on its first script.
func (o *options) redisClient(ctx context.Context) (redis.UniversalClient, string, error) {
	mode := o.redisMode
	if mode == "auto" {
		u, err := url.Parse(o.redisURL)
		if err != nil {
			return nil, "", usageErrorf("--redis: %v", err)
		}
		switch q := u.Query(); {
		case q.Has("master_name"):
			mode = "sentinel"
		case q.Has("addr"):
			mode = "cluster"
		default:
			return o.redisProbe(ctx)
		}
	}
	switch mode {
	case "sentinel":
		return o.redisSentinel()
	case "cluster":
		return o.redisCluster()
	default:
		c, where, err := o.redisSingle()
		if err != nil {
			return nil, "", err // not c: a nil *redis.Client would make a non-nil interface
		}
		return c, where, nil
	}
}

func (o *options) redisSingle() (*redis.Client, string, error) {
	opt, err := redis.ParseURL(o.redisURL)
	if err != nil {
		return nil, "", usageErrorf("--redis: %v", err)
	}
	o.redisTimeouts(&opt.DialTimeout, &opt.ReadTimeout, &opt.WriteTimeout)
	opt.ContextTimeoutEnabled = true
	opt.DialerRetries = cmp.Or(opt.DialerRetries, 1)
	return redis.NewClient(opt), "Redis " + opt.Addr, nil
}

func (o *options) redisSentinel() (redis.UniversalClient, string, error) {
	opt, err := redis.ParseFailoverURL(o.redisURL)
	if err != nil {
		return nil, "", usageErrorf("--redis (Sentinel): %v", err)
	}
	if opt.MasterName == "" {
		return nil, "", usageErrorf("--redis (Sentinel): the URL names no master: add ?master_name=NAME")
	}
	o.redisTimeouts(&opt.DialTimeout, &opt.ReadTimeout, &opt.WriteTimeout)
	opt.ContextTimeoutEnabled = true
	opt.DialerRetries = cmp.Or(opt.DialerRetries, 1)
	return redis.NewFailoverClient(opt), fmt.Sprintf("Redis master %q of Sentinel %s", opt.MasterName, strings.Join(opt.SentinelAddrs, ",")), nil
}

func (o *options) redisCluster() (redis.UniversalClient, string, error) {
	opt, err := redis.ParseClusterURL(o.redisURL)
	if err != nil {
		return nil, "", usageErrorf("--redis (Cluster): %v", err)
	}
	o.redisTimeouts(&opt.DialTimeout, &opt.ReadTimeout, &opt.WriteTimeout)
	opt.ContextTimeoutEnabled = true
	opt.DialerRetries = cmp.Or(opt.DialerRetries, 1)
	return redis.NewClusterClient(opt), "Redis Cluster " + strings.Join(opt.Addrs, ","), nil
}

// redisProbe connects to the single address of --redis and asks what it
// is (INFO server's redis_mode), within --timeout: a server that does not
// answer fails here, naming its address.
func (o *options) redisProbe(ctx context.Context) (redis.UniversalClient, string, error) {
	c, where, err := o.redisSingle()
	if err != nil {
		return nil, "", err
	}
	cctx, cancel := context.WithTimeout(ctx, o.timeout)
	info, err := c.Info(cctx, "server").Result()
	cancel()
	if err != nil {
		_ = c.Close()
		return nil, "", o.unreachable(where, err)
	}
	switch redisMode(info) {
	case "cluster":
		_ = c.Close()
		return o.redisCluster()
	case "sentinel":
		_ = c.Close()
		return nil, "", usageErrorf("--redis: %s is a Sentinel: add ?master_name=NAME (the master whose records to read)", strings.TrimPrefix(where, "Redis "))
	default:
		return c, where, nil
	}
}

// unreachable is the error of a store that did not answer: it names
// where, and says when --timeout ran out (the store's own errors say so
// already).
func (o *options) unreachable(where string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, store.ErrUnavailable) {
		return fmt.Errorf("%s: no answer within %v (--timeout): %w", where, o.timeout, err)
	}
	return fmt.Errorf("%s: %w", where, err)
}

// redisMode returns the redis_mode line of INFO server: standalone,
// cluster or sentinel ("" when absent).
func redisMode(info string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_mode:"); ok {
			return v
		}
	}
	return ""
}

// quietRedis stops go-redis logging its own failures (each failed dial)
// on stderr: the tool reports the error of each command once, naming the
// address, and go-redis's lines would only bury it.
func quietRedis() { redis.SetLogger(discardRedisLog{}) }

type discardRedisLog struct{}

func (discardRedisLog) Printf(context.Context, string, ...any) {}

// redisTimeouts sets the client's timeouts the URL left at zero to
// --timeout. The redis* constructors also bound every call by its
// context (ContextTimeoutEnabled: a server that accepts and never answers
// fails at --timeout) and dial once per try unless the URL says otherwise
// (dialer_retries), so that a refused connection is reported as such at
// once rather than retried until --timeout.
func (o *options) redisTimeouts(ds ...*time.Duration) {
	for _, d := range ds {
		if *d == 0 {
			*d = o.timeout
		}
	}
}

func (o *options) openRedis(ctx context.Context) (store.Inspector, string, func(), error) {
	c, where, err := o.redisClient(ctx)
	if err != nil {
		return nil, "", nil, err
	}
	s, err := redisstore.New(ctx, c, &redisstore.Options{Prefix: o.prefix, Timeout: o.timeout})
	if err != nil {
		_ = c.Close()
		return nil, "", nil, o.unreachable(where, err)
	}
	return s, where, func() { _ = c.Close() }, nil
}

func (o *options) openPostgres(ctx context.Context) (store.Inspector, string, func(), error) {
	cfg, err := pgxpool.ParseConfig(o.postgres)
	if err != nil {
		return nil, "", nil, usageErrorf("--postgres: %v", err)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = o.timeout
	}
	where := fmt.Sprintf("PostgreSQL %s:%d/%s", cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, "", nil, o.unreachable(where, err)
	}
	s, err := pgstore.New(ctx, pool, &pgstore.Options{Table: o.table, Timeout: o.timeout})
	if err != nil {
		pool.Close()
		// New checks its options before it connects; --timeout is
		// checked already, so an invalid option is --table's name. A
		// table that does not fit (missing, other columns) is the
		// database's state, not the command line's: ErrMisconfigured.
		if errors.Is(err, store.ErrInvalidConfig) && !errors.Is(err, pgstore.ErrMisconfigured) {
			return nil, "", nil, usageErrorf("--table %q: %v", shown(o.table), err)
		}
		return nil, "", nil, o.unreachable(where, err)
	}
	return s, where, pool.Close, nil
}

// key returns the store key of a key given on the command line:
// NAMESPACE:ID as it is (cut at its first colon, as the receiver joins
// them), or an ID without a colon in --namespace.
func (o *options) key(arg string) (string, error) {
	if arg == "" {
		return "", usageErrorf("an empty key")
	}
	ns, id, ok := strings.Cut(arg, ":")
	if !ok {
		if o.namespace == "" {
			return "", usageErrorf("key %q has no namespace: give NAMESPACE:ID or --namespace", shown(arg))
		}
		ns, id = o.namespace, arg
	}
	switch {
	case ns == "":
		return "", usageErrorf("key %q has an empty namespace", shown(arg))
	case id == "":
		return "", usageErrorf("key %q has an empty id", shown(arg))
	}
	return ns + ":" + id, nil
}

// keys returns the store keys of args, or the first usage error.
func (o *options) keys(args []string) ([]string, error) {
	keys := make([]string, len(args))
	for i, a := range args {
		k, err := o.key(a)
		if err != nil {
			return nil, err
		}
		keys[i] = k
	}
	return keys, nil
}

// storeError is the error of a store call about key ("" for a scan): a
// key the store refuses (too long, not UTF-8) is a usage error; anything
// else names the store's address.
func storeError(where, key string, err error) error {
	if errors.Is(err, store.ErrInvalidKey) {
		return usageErrorf("key %q: %v", shown(key), err)
	}
	return fmt.Errorf("%s: %w", where, err)
}
