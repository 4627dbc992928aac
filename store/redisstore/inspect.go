package redisstore

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dedup-go/dedup/store"
)

// scanCount is the COUNT hint of each SCAN step.
const scanCount = 500

// Get returns the record of key, in whatever state, or an error matching
// store.ErrNotFound. A completed or failed record is not found from its
// ExpiresAt on, by the server's clock, as Acquire sees it.
func (s *Store) Get(ctx context.Context, key string) (store.Record, error) {
	if key == "" {
		return store.Record{}, errEmptyKey("get")
	}
	if err := ctx.Err(); err != nil {
		return store.Record{}, errContext("get", key, err)
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	reply, err := getScript.Run(cctx, s.client, []string{s.redisKey(key)}).Slice()
	if err != nil {
		return store.Record{}, s.fail(ctx, "get", key, err)
	}
	if len(reply) == 0 {
		return store.Record{}, fmt.Errorf("redisstore: get %q: %w", key, store.ErrNotFound)
	}
	return recordOf(key, reply)
}

// Delete forgets key, whatever its state: a duplicate arriving later is
// processed again, and the holder of a deleted claim gets ErrLeaseLost.
// Deleting an absent key is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	if key == "" {
		return errEmptyKey("delete")
	}
	if err := ctx.Err(); err != nil {
		return errContext("delete", key, err)
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := s.client.Del(cctx, s.redisKey(key)).Err(); err != nil {
		return s.fail(ctx, "delete", key, err)
	}
	return nil
}

// Scan yields every unexpired record whose key starts with prefix. It
// walks the keyspace with SCAN (never KEYS, which blocks the server), on
// every master of a Cluster one after another, and reads each page of
// records in one pipeline. Order is Redis's; a record written or expiring
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
	match := globEscape(s.prefix+prefix) + "*"
	errStop := errors.New("stop")
	scanNode := func(node redis.UniversalClient) error {
		var cursor uint64
		for {
			if err := ctx.Err(); err != nil {
				return errContext("scan", prefix, err)
			}
			cctx, cancel := context.WithTimeout(ctx, s.timeout)
			keys, next, err := node.Scan(cctx, cursor, match, scanCount).Result()
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

// readAll reads the records of Redis keys in one pipeline, with the
// node's clock after them, skipping those that expired since SCAN saw
// them, and those whose expiry has come although Redis still holds them.
func (s *Store) readAll(ctx context.Context, node redis.UniversalClient, keys []string) ([]store.Record, error) {
	slices.Sort(keys)
	pipe := node.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.HGetAll(ctx, k)
	}
	clock := pipe.Time(ctx)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	now := clock.Val()
	recs := make([]store.Record, 0, len(keys))
	for i, k := range keys {
		if rec, ok := hashRecord(strings.TrimPrefix(k, s.prefix), cmds[i].Val(), now); ok {
			recs = append(recs, rec)
		}
	}
	return recs, nil
}

// hashRecord reads a record from its hash fields (see scripts.go) as the
// server's clock reads now; ok is false for an absent key, a hash that is
// not a record, and a completed or failed record whose expiry has come.
func hashRecord(key string, h map[string]string, now time.Time) (rec store.Record, ok bool) {
	state := stateOf(h["s"])
	if state == 0 {
		return store.Record{}, false
	}
	num := func(name string) int64 {
		n, _ := strconv.ParseInt(h[name], 10, 64)
		return n
	}
	rec = store.Record{
		Key:         key,
		State:       state,
		Attempt:     int(num("a")),
		Fingerprint: h["f"],
		LastError:   h["e"],
	}
	// A field the state does not read may be left from an earlier state.
	switch state {
	case store.StateProcessing:
		rec.LeaseUntil = timeOf(num("l"))
		return rec, true
	case store.StateCompleted:
		if r := h["r"]; r != "" {
			rec.Result = []byte(r)
		}
	}
	rec.ExpiresAt = timeOf(num("x"))
	if !now.Before(rec.ExpiresAt) {
		return store.Record{}, false
	}
	return rec, true
}

// globEscape escapes what SCAN MATCH would read as a pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
