package rueidisstore

import (
	"context"
	"iter"
	"slices"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/rediscore"
)

// Get returns the record of key, in whatever state, with its step
// records, or an error matching store.ErrNotFound. A completed or failed
// record is not found from its ExpiresAt on, by the server's clock, as
// Acquire sees it: Redis drops it then. The record and its step records
// are read in one round trip (they share a Cluster slot).
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
	rs := s.client.DoMulti(cctx, s.client.B().Get().Key(keys[0]).Build(), s.client.B().Hgetall().Key(keys[1]).Build())
	v, err := rs[0].ToString()
	if rueidis.IsRedisNil(err) {
		return store.Record{}, s.core.NotFound("get", key)
	}
	if err == nil {
		var rec store.Record
		if rec, err = rediscore.Unpack(key, v); err == nil {
			var hash map[string]string
			if hash, err = rs[1].AsStrMap(); err == nil || wrongType(err) {
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
	if err := s.client.Do(cctx, s.client.B().Del().Key(s.stepsKeys(key)...).Build()).Error(); err != nil {
		return s.fail(ctx, "delete", key, err)
	}
	return nil
}

// DeleteIf deletes the record of req.Key, with its step records, only when
// req allows its state (store.DeleteRequest), in one script that reads the
// record and deletes it: a claim made after the read is never deleted. A lease has ended when
// this process's clock reads its deadline or later, as Acquire decides a
// takeover. A record kept is returned with deleted false; an absent key
// is an error matching store.ErrNotFound.
func (s *Store) DeleteIf(ctx context.Context, req store.DeleteRequest) (bool, store.Record, error) {
	if req.Key == "" {
		return false, store.Record{}, s.core.EmptyKey("delete")
	}
	states, expired, now := rediscore.DeleteIfArgs(req, time.Now())
	m, err := s.evalSteps(ctx, "delete", req.Key, deleteIfScript, states, expired, now)
	if err != nil {
		return false, store.Record{}, err
	}
	if f, err := m.ToArray(); err == nil && len(f) == 0 {
		return s.core.Deleted(req.Key, false, 0, "")
	}
	code, v, ok := pair(&m)
	if !ok {
		return false, store.Record{}, s.core.Reply("delete", req.Key, describe(&m))
	}
	return s.core.Deleted(req.Key, true, code, v)
}

// Scan yields every unexpired record whose key starts with prefix, with
// its step records. It walks the keyspace with SCAN (never KEYS, which
// blocks the server), on every master of a Cluster one after another, and
// reads each page of records and their step records in one pipeline (an
// HGETALL beside each GET). Order is Redis's; a record written or expiring
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
	nodes, err := s.masters(ctx)
	if err != nil {
		return s.fail(ctx, "scan", prefix, err)
	}
	match := s.core.ScanMatch(prefix)
	for _, node := range nodes {
		var cursor uint64
		for {
			if err := ctx.Err(); err != nil {
				return s.core.Context("scan", prefix, err)
			}
			cctx, cancel := context.WithTimeout(ctx, s.timeout)
			page, err := node.Do(cctx, node.B().Scan().Cursor(cursor).Match(match).Count(rediscore.ScanCount).Build()).AsScanEntry()
			var recs []store.Record
			if err == nil && len(page.Elements) > 0 {
				recs, err = s.readAll(cctx, node, page.Elements)
			}
			cancel()
			if err != nil {
				return s.fail(ctx, "scan", prefix, err)
			}
			for _, rec := range recs {
				if !fn(rec) {
					return nil
				}
			}
			if cursor = page.Cursor; cursor == 0 {
				break
			}
		}
	}
	return nil
}

// masters returns the clients of the servers that hold the keys: the
// client itself for a single server or Sentinel's master; every node of a
// Cluster that says it is a master (ROLE), since rueidis lists replicas
// too.
func (s *Store) masters(ctx context.Context) ([]rueidis.Client, error) {
	if !s.cluster {
		return []rueidis.Client{s.client}, nil
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var out []rueidis.Client
	for _, node := range s.client.Nodes() {
		role, err := node.Do(cctx, node.B().Role().Build()).ToArray()
		if err != nil {
			return nil, err
		}
		if len(role) > 0 {
			if r, _ := role[0].ToString(); r == "master" {
				out = append(out, node)
			}
		}
	}
	return out, nil
}

// readAll reads the records of Redis keys in one pipeline, skipping those
// that expired since SCAN saw them and those that hold no record of this
// package (another program's keys under the prefix).
func (s *Store) readAll(ctx context.Context, node rueidis.Client, keys []string) ([]store.Record, error) {
	slices.Sort(keys)
	cmds := make(rueidis.Commands, 0, 2*len(keys))
	for _, k := range keys {
		cmds = append(cmds, node.B().Get().Key(k).Build(), node.B().Hgetall().Key(rediscore.StepsKeyOf(k)).Build())
	}
	rs := node.DoMulti(ctx, cmds...)
	recs := make([]store.Record, 0, len(keys))
	for i, k := range keys {
		v, err := rs[2*i].ToString()
		if rueidis.IsRedisNil(err) || wrongType(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		rec, err := rediscore.Unpack(s.core.KeyOf(k), v)
		if err != nil {
			continue
		}
		hash, err := rs[2*i+1].AsStrMap()
		if err != nil && !wrongType(err) {
			return nil, err
		}
		rec.Steps = rediscore.RecordSteps(v, hash)
		recs = append(recs, rec)
	}
	return recs, nil
}

// wrongType reports whether err is Redis's answer to a command on a key of
// another type (another program's key).
func wrongType(err error) bool {
	rerr, ok := rueidis.IsRedisErr(err)
	return ok && strings.HasPrefix(rerr.Error(), "WRONGTYPE")
}
