package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/dedup-go/dedup"
)

// scanCount is the COUNT hint of each SCAN step.
const scanCount = 500

// Get returns the record of key, in whatever state, or an error matching
// dedup.ErrNotFound.
func (s *Store) Get(ctx context.Context, key string) (dedup.Record, error) {
	if key == "" {
		return dedup.Record{}, errEmptyKey("get")
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	fields, err := s.client.HGetAll(cctx, s.redisKey(key)).Result()
	if err != nil {
		return dedup.Record{}, s.fail(ctx, "get", key, err)
	}
	rec, ok := hashRecord(key, fields)
	if !ok {
		return dedup.Record{}, fmt.Errorf("redisstore: get %q: %w", key, dedup.ErrNotFound)
	}
	return rec, nil
}

// Delete forgets key, whatever its state: a duplicate arriving later is
// processed again, and the holder of a deleted claim gets ErrLeaseLost.
func (s *Store) Delete(ctx context.Context, key string) error {
	if key == "" {
		return errEmptyKey("delete")
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := s.client.Del(cctx, s.redisKey(key)).Err(); err != nil {
		return s.fail(ctx, "delete", key, err)
	}
	return nil
}

// Scan calls fn for every record whose key starts with prefix. It walks the
// keyspace with SCAN (never KEYS, which blocks the server), on every master
// of a Cluster, and reads each page of records in one pipeline. Order is
// Redis's; a record written during the scan may be missed or seen, as SCAN
// guarantees. Options.Timeout bounds each step, not the whole scan.
func (s *Store) Scan(ctx context.Context, prefix string, fn func(dedup.Record) bool) error {
	match := globEscape(s.prefix+prefix) + "*"
	errStop := errors.New("stop")
	scanNode := func(ctx context.Context, node redis.UniversalClient) error {
		var cursor uint64
		for {
			cctx, cancel := context.WithTimeout(ctx, s.timeout)
			keys, next, err := node.Scan(cctx, cursor, match, scanCount).Result()
			if err == nil && len(keys) > 0 {
				var recs []dedup.Record
				recs, err = s.readAll(cctx, node, keys)
				for _, rec := range recs {
					if !fn(rec) {
						cancel()
						return errStop
					}
				}
			}
			cancel()
			if err != nil {
				return s.fail(ctx, "scan", prefix, err)
			}
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	var err error
	if cluster, ok := s.client.(*redis.ClusterClient); ok {
		// Masters are scanned one after another, so fn is never called
		// concurrently.
		var (
			mu      sync.Mutex
			masters []*redis.Client
		)
		err = cluster.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			masters = append(masters, m)
			return nil
		})
		for _, m := range masters {
			if err != nil {
				break
			}
			err = scanNode(ctx, m)
		}
	} else {
		err = scanNode(ctx, s.client)
	}
	if errors.Is(err, errStop) {
		return nil
	}
	if err != nil && !errors.Is(err, dedup.ErrStoreUnavailable) && ctx.Err() == nil {
		err = s.fail(ctx, "scan", prefix, err)
	}
	return err
}

// readAll reads the records of Redis keys in one pipeline, skipping those
// that expired since SCAN saw them.
func (s *Store) readAll(ctx context.Context, node redis.UniversalClient, keys []string) ([]dedup.Record, error) {
	slices.Sort(keys)
	pipe := node.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.HGetAll(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	recs := make([]dedup.Record, 0, len(keys))
	for i, k := range keys {
		if rec, ok := hashRecord(strings.TrimPrefix(k, s.prefix), cmds[i].Val()); ok {
			recs = append(recs, rec)
		}
	}
	return recs, nil
}

// hashRecord reads a record from its hash fields (see scripts.go); ok is
// false for an absent key or a hash that is not a record.
func hashRecord(key string, h map[string]string) (rec dedup.Record, ok bool) {
	state := stateOf(h["s"])
	if state == 0 {
		return dedup.Record{}, false
	}
	num := func(name string) int64 {
		n, _ := strconv.ParseInt(h[name], 10, 64)
		return n
	}
	rec = dedup.Record{
		Key:         key,
		State:       state,
		Attempt:     int(num("a")),
		Fingerprint: h["f"],
		LastError:   h["e"],
	}
	// A field the state does not read may be left from an earlier state.
	switch state {
	case dedup.StateProcessing:
		rec.LeaseUntil = timeOf(num("l"))
	case dedup.StateCompleted:
		if r := h["r"]; r != "" {
			rec.Result = []byte(r)
		}
		rec.ExpiresAt = timeOf(num("x"))
	default:
		rec.ExpiresAt = timeOf(num("x"))
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
