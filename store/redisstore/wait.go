package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/rediscore"
)

// ErrNotReplicated is matched by the error of a call whose write fewer
// replicas acknowledged than Options.MinReplicas within
// Options.ReplicaTimeout. The error matches store.ErrUnavailable as well:
// the write reached the master, but a failover could lose it, so the call
// is not reported done.
var ErrNotReplicated = errors.New("too few replicas acknowledged the write")

// checkReplicas checks Options.MinReplicas and ReplicaTimeout against the
// client they are to be used with.
func (s *Store) checkReplicas(o Options) error {
	switch {
	case o.MinReplicas < 0:
		return fmt.Errorf("redisstore: %w: MinReplicas is %d, it must not be negative", store.ErrInvalidConfig, o.MinReplicas)
	case o.ReplicaTimeout < 0:
		return fmt.Errorf("redisstore: %w: ReplicaTimeout is %v, it must not be negative", store.ErrInvalidConfig, o.ReplicaTimeout)
	case o.MinReplicas == 0:
		return nil
	case s.replicaTimeout >= s.timeout:
		return fmt.Errorf("redisstore: %w: ReplicaTimeout is %v, it must be less than Timeout (%v), which bounds the write and its WAIT together",
			store.ErrInvalidConfig, s.replicaTimeout, s.timeout)
	}
	var read time.Duration
	switch c := s.client.(type) {
	case *redis.Client:
		read = c.Options().ReadTimeout
	case *redis.ClusterClient:
		read = c.Options().ReadTimeout
	default:
		// WAIT must follow the write on the connection that sent it, which
		// only these two clients let a pipeline promise.
		return fmt.Errorf("redisstore: %w: MinReplicas needs a *redis.Client or a *redis.ClusterClient, not a %T", store.ErrInvalidConfig, s.client)
	}
	if read > 0 && read <= s.replicaTimeout {
		return fmt.Errorf("redisstore: %w: the client's ReadTimeout (%v) must be more than ReplicaTimeout (%v): a pipeline's reply waits for its WAIT",
			store.ErrInvalidConfig, read, s.replicaTimeout)
	}
	return nil
}

// execWaited sends cmds, cmds[i] to the master of the Redis key keys[i],
// each master's commands in one pipeline that ends with WAIT, and returns
// for each command the WAIT that followed it on its connection. Each
// command carries its own reply or error; a command that could not be
// routed has its error and no WAIT.
//
// WAIT has no key, so a pipeline of a ClusterClient would send it to a
// master of go-redis's choosing (round robin), which took none of the
// writes: each master gets a pipeline of its own, through the client of
// that master (ClusterClient.MasterForKey), and the pipelines run at once.
// A pipeline is never a MULTI transaction: inside MULTI, WAIT answers at
// once, without waiting for the replicas.
func (s *Store) execWaited(ctx context.Context, keys []string, cmds []redis.Cmder) []*redis.IntCmd {
	waits := make([]*redis.IntCmd, len(cmds))
	cc, ok := s.client.(*redis.ClusterClient)
	if !ok {
		wait := s.pipelineWaited(ctx, s.client, cmds)
		for i := range waits {
			waits[i] = wait
		}
		return waits
	}
	var order []*redis.Client
	groups := make(map[*redis.Client][]int)
	for i, key := range keys {
		node, err := cc.MasterForKey(ctx, key)
		if err != nil {
			cmds[i].SetErr(err)
			continue
		}
		if _, seen := groups[node]; !seen {
			order = append(order, node)
		}
		groups[node] = append(groups[node], i)
	}
	send := func(node *redis.Client) {
		idx := groups[node]
		group := make([]redis.Cmder, len(idx))
		for k, i := range idx {
			group[k] = cmds[i]
		}
		wait := s.pipelineWaited(ctx, node, group)
		for _, i := range idx {
			waits[i] = wait
		}
	}
	if len(order) == 1 {
		send(order[0]) // a single key's call: no goroutine
		return waits
	}
	var wg sync.WaitGroup
	for _, node := range order {
		wg.Go(func() { send(node) })
	}
	wg.Wait()
	return waits
}

// pipelineWaited sends cmds and then WAIT in one pipeline of c, which
// writes them on one connection, and returns the WAIT.
func (s *Store) pipelineWaited(ctx context.Context, c redis.Cmdable, cmds []redis.Cmder) *redis.IntCmd {
	pipe := c.Pipeline()
	for _, cmd := range cmds {
		_ = pipe.Process(ctx, cmd)
	}
	wait := redis.NewIntCmd(ctx, "wait", s.minReplicas, rediscore.MS(s.replicaTimeout))
	_ = pipe.Process(ctx, wait)
	_, _ = pipe.Exec(ctx) // each command carries its own error
	return wait
}

// replicated is the error of a write whose WAIT answered wait: nil when at
// least MinReplicas replicas acknowledged it.
func (s *Store) replicated(ctx context.Context, op, key string, wait *redis.IntCmd) error {
	if wait == nil {
		return s.fail(ctx, op, key, errors.New("no WAIT was sent"))
	}
	acked, err := wait.Result()
	if err != nil {
		return s.fail(ctx, op, key, fmt.Errorf("WAIT after the write: %w", err))
	}
	if acked >= int64(s.minReplicas) {
		return nil
	}
	return &store.OpError{Op: op, Key: key, Err: fmt.Errorf("redisstore: %w: %d of the %d wanted (Options.MinReplicas) within %v: a failover could lose it",
		ErrNotReplicated, acked, s.minReplicas, s.replicaTimeout)}
}
