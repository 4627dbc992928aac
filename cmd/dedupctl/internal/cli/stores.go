package cli

import (
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
// says where it connects.
func (o *options) redisClient(ctx context.Context) (redis.UniversalClient, string, error) {
	u, err := url.Parse(o.redisURL)
	if err != nil {
		return nil, "", usageErrorf("--redis: %v", err)
	}
	mode := o.redisMode
	if mode == "auto" {
		switch {
		case u.Query().Has("master_name"):
			mode = "sentinel"
		case u.Query().Has("addr"):
			mode = "cluster"
		default:
			mode = "single"
		}
	}
	switch mode {
	case "sentinel":
		opt, err := redis.ParseFailoverURL(o.redisURL)
		if err != nil {
			return nil, "", usageErrorf("--redis (Sentinel): %v", err)
		}
		o.redisTimeouts(&opt.DialTimeout, &opt.ReadTimeout, &opt.WriteTimeout)
		return redis.NewFailoverClient(opt), fmt.Sprintf("Redis master %q of Sentinel %s", opt.MasterName, strings.Join(opt.SentinelAddrs, ",")), nil
	case "cluster":
		opt, err := redis.ParseClusterURL(o.redisURL)
		if err != nil {
			return nil, "", usageErrorf("--redis (Cluster): %v", err)
		}
		o.redisTimeouts(&opt.DialTimeout, &opt.ReadTimeout, &opt.WriteTimeout)
		return redis.NewClusterClient(opt), "Redis Cluster " + strings.Join(opt.Addrs, ","), nil
	default:
		opt, err := redis.ParseURL(o.redisURL)
		if err != nil {
			return nil, "", usageErrorf("--redis: %v", err)
		}
		o.redisTimeouts(&opt.DialTimeout, &opt.ReadTimeout, &opt.WriteTimeout)
		c := redis.NewClient(opt)
		if o.redisMode == "auto" {
			// A single address of a Cluster node: read the whole Cluster.
			cctx, cancel := context.WithTimeout(ctx, o.timeout)
			info, err := c.Info(cctx, "cluster").Result()
			cancel()
			if err == nil && strings.Contains(info, "cluster_enabled:1") {
				_ = c.Close()
				copt, err := redis.ParseClusterURL(o.redisURL)
				if err != nil {
					return nil, "", usageErrorf("--redis (Cluster): %v", err)
				}
				o.redisTimeouts(&copt.DialTimeout, &copt.ReadTimeout, &copt.WriteTimeout)
				return redis.NewClusterClient(copt), "Redis Cluster " + strings.Join(copt.Addrs, ","), nil
			}
		}
		return c, "Redis " + opt.Addr, nil
	}
}

// redisTimeouts sets the client's timeouts the URL left at zero to
// --timeout.
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
		return nil, "", nil, fmt.Errorf("%s: %w", where, err)
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
		return nil, "", nil, fmt.Errorf("%s: %w", where, err)
	}
	s, err := pgstore.New(ctx, pool, &pgstore.Options{Table: o.table, Timeout: o.timeout})
	if err != nil {
		pool.Close()
		return nil, "", nil, fmt.Errorf("%s: %w", where, err)
	}
	return s, where, pool.Close, nil
}

// key returns the store key of an id given on the command line: as it is
// when it holds a colon (namespace:id), else in --namespace.
func (o *options) key(arg string) (string, error) {
	if arg == "" {
		return "", usageErrorf("an empty key")
	}
	if strings.Contains(arg, ":") {
		return arg, nil
	}
	if o.namespace == "" {
		return "", usageErrorf("key %q has no namespace: give NAMESPACE:ID or --namespace", arg)
	}
	return o.namespace + ":" + arg, nil
}

// isNotFound reports whether err says a record does not exist.
func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }
