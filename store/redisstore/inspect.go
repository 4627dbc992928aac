package redisstore

import (
	"context"
	"errors"
	"iter"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/rediscore"
)

// Get returns the record of key, in whatever state, with its step
// records, or an error matching store.ErrNotFound. A completed or failed
// record is not found from its ExpiresAt on, by the server's clock, as
// Acquire sees it: Redis drops it then. The record and its step records
// are read in one pipeline (one round trip: they share a Cluster slot).
func (s *Store) Get(ctx context.Context, key string) (store.Record, error) {
	if key == "" {
		return store.Record{}, s.core.EmptyKey("get")
	}
	if err := ctx.Err(); err != nil {
		return store.Record{}, s.core.Context("get", key, err)
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	keys := s.stepsKeys(key)
	pipe := s.client.Pipeline()
	get := pipe.Get(cctx, keys[0])
	steps := pipe.HGetAll(cctx, keys[1])
	_, _ = pipe.Exec(cctx) // each command carries its own error
	v, err := get.Result()
	if errors.Is(err, redis.Nil) {
		return store.Record{}, s.core.NotFound("get", key)
	}
	if err == nil {
		var rec store.Record
		if rec, err = rediscore.Unpack(key, v); err == nil {
			var hash map[string]string
			if hash, err = steps.Result(); err == nil || redis.HasErrorPrefix(err, "WRONGTYPE") {
				rec.Steps = rediscore.RecordSteps(v, hash)
				return rec, nil
			}
		}
	}
	return store.Record{}, s.fail(ctx, "get", key, err)
}

// Delete forgets key, whatever its state, with its step records: a
// duplicate arriving later is processed again, and the holder of a
// deleted claim gets ErrLeaseLost. Deleting an absent key is not an
// error.
func (s *Store) Delete(ctx context.Context, key string) error {
	if key == "" {
		return s.core.EmptyKey("delete")
	}
	if err := ctx.Err(); err != nil {
		return s.core.Context("delete", key, err)
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := s.client.Del(cctx, s.stepsKeys(key)...).Err(); err != nil {
		return s.fail(ctx, "delete", key, err)
	}
	return nil
}

// DeleteIf deletes the record of req.Key, with its step records, only when
// req allows its state (store.DeleteRequest), in one script that reads the
// record and deletes it: a claim made after the read is never deleted. A lease has ended when
// this process's clock reads its deadline or later, as Acquire decides a
// takeover. A record kept is returned with deleted false; an absent key
// (or a completed or failed record past its expiry, which Redis dropped)
// is an error matching store.ErrNotFound.
func (s *Store) DeleteIf(ctx context.Context, req store.DeleteRequest) (bool, store.Record, error) {
	if req.Key == "" {
		return false, store.Record{}, s.core.EmptyKey("delete")
	}
	states, expired, now := rediscore.DeleteIfArgs(req, time.Now())
	reply, err := s.evalSteps(ctx, "delete", req.Key, deleteIfScript, []any{states, expired, now})
	if err != nil {
		return false, store.Record{}, err
	}
	f, ok := reply.([]any)
	if !ok {
		return false, store.Record{}, s.core.Reply("delete", req.Key, reply)
	}
	if len(f) == 0 {
		return s.core.Deleted(req.Key, false, 0, "")
	}
	code, ok1 := field[int64](f, 0)
	v, ok2 := field[string](f, 1)
	if !ok1 || !ok2 {
		return false, store.Record{}, s.core.Reply("delete", req.Key, reply)
	}
	return s.core.Deleted(req.Key, true, code, v)
}

// Scan yields every unexpired record whose key starts with prefix, with
// its step records. It
// walks the keyspace with SCAN (never KEYS, which blocks the server), on
// every master of a Cluster one after another, and reads each page of
// records and their step records in one pipeline (an HGETALL beside each
// GET). Order is Redis's; a record written or expiring
// during the scan may be missed or seen, as SCAN guarantees.
// Options.Timeout bounds each step, not the whole scan. A failure (or the
// end of ctx) is yielded once, as a zero Record with the error, and ends
// the scan; so does the caller breaking out of its loop.
func (s *Store) Scan(ctx context.Context, prefix string) iter.Seq2[store.Record, error] {
	return func(yield func(store.Record, error) bool) {
		err := s.scan(ctx, prefix, func(rec store.Record) bool { return yield(rec, nil) })
		if err != nil {
			yield(store.Record{}, err)
		}
	}
}

// scan calls fn for every record of Scan until fn returns false (then it
// returns nil) or a step fails.
func (s *Store) scan(ctx context.Context, prefix string, fn func(store.Record) bool) error {
	match := s.core.ScanMatch(prefix)
	errStop := errors.New("stop")
	scanNode := func(node redis.UniversalClient) error {
		var cursor uint64
		for {
			if err := ctx.Err(); err != nil {
				return s.core.Context("scan", prefix, err)
			}
			cctx, cancel := context.WithTimeout(ctx, s.timeout)
			keys, next, err := node.Scan(cctx, cursor, match, rediscore.ScanCount).Result()
			var recs []store.Record
			if err == nil && len(keys) > 0 {
				recs, err = s.readAll(cctx, node, keys)
			}
			cancel()
			if err != nil {
				return s.fail(ctx, "scan", prefix, err)
			}
			for _, rec := range recs {
				if !fn(rec) {
					return errStop
				}
			}
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	var nodes []redis.UniversalClient
	if cluster, ok := s.client.(*redis.ClusterClient); ok {
		// The masters are scanned one after another, so that fn is never
		// called concurrently; ForEachMaster only lists them.
		var mu sync.Mutex
		cctx, cancel := context.WithTimeout(ctx, s.timeout)
		err := cluster.ForEachMaster(cctx, func(_ context.Context, m *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			nodes = append(nodes, m)
			return nil
		})
		cancel()
		if err != nil {
			return s.fail(ctx, "scan", prefix, err)
		}
	} else {
		nodes = []redis.UniversalClient{s.client}
	}
	for _, node := range nodes {
		if err := scanNode(node); errors.Is(err, errStop) {
			return nil
		} else if err != nil {
			return err
		}
	}
	return nil
}

// readAll reads the records of Redis keys in one pipeline, skipping those
// that expired since SCAN saw them and those that hold no record of this
// package (another program's keys under the prefix).
func (s *Store) readAll(ctx context.Context, node redis.UniversalClient, keys []string) ([]store.Record, error) {
	slices.Sort(keys)
	pipe := node.Pipeline()
	cmds := make([]*redis.StringCmd, len(keys))
	steps := make([]*redis.MapStringStringCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.Get(ctx, k)
		steps[i] = pipe.HGetAll(ctx, rediscore.StepsKeyOf(k))
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	recs := make([]store.Record, 0, len(keys))
	for i, k := range keys {
		v, err := cmds[i].Result()
		switch {
		case errors.Is(err, redis.Nil), redis.HasErrorPrefix(err, "WRONGTYPE"):
			continue
		case err != nil:
			return nil, err
		}
		rec, err := rediscore.Unpack(s.core.KeyOf(k), v)
		if err != nil {
			continue
		}
		hash, err := steps[i].Result()
		if err != nil && !redis.HasErrorPrefix(err, "WRONGTYPE") {
			return nil, err
		}
		rec.Steps = rediscore.RecordSteps(v, hash)
		recs = append(recs, rec)
	}
	return recs, nil
}
