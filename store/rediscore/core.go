package rediscore

import (
	"strconv"
	"strings"
	"time"

	"github.com/dedup-go/dedup/store"
)

// Core is a store's settings that every request needs, and the methods
// that build its keys and arguments, check its requests and make its
// errors. Every error's text starts with Pkg.
type Core struct {
	// Pkg names the store in its errors: "redisstore", "rueidisstore".
	Pkg string
	// Prefix is put before every Redis key (the store's Options.Prefix).
	Prefix string
	// AbandonedTTL is how long a processing record is kept after its
	// lease ends (the store's Options.AbandonedTTL).
	AbandonedTTL time.Duration
}

// RedisKey returns the Redis key that holds the record of key: the prefix,
// the layout version, then key.
func (c *Core) RedisKey(key string) string { return c.Prefix + Layout + key }

// KeyOf returns the receiver's key of a Redis key of the store.
func (c *Core) KeyOf(redisKey string) string {
	return strings.TrimPrefix(redisKey, c.Prefix+Layout)
}

// RedisKeys returns the Redis keys of n receiver's keys, key(0) to
// key(n-1), cut from one string: three allocations, not one a key.
func (c *Core) RedisKeys(n int, key func(int) string) []string {
	size := 0
	for k := range n {
		size += len(c.Prefix) + len(Layout) + len(key(k))
	}
	var b strings.Builder
	b.Grow(size)
	ends := make([]int, n)
	for k := range n {
		b.WriteString(c.Prefix)
		b.WriteString(Layout)
		b.WriteString(key(k))
		ends[k] = b.Len()
	}
	all := b.String()
	keys := make([]string, n)
	start := 0
	for k, end := range ends {
		keys[k], start = all[start:end], end
	}
	return keys
}

// ScanMatch is the SCAN MATCH pattern of the Redis keys of the records
// whose key starts with prefix.
func (c *Core) ScanMatch(prefix string) string {
	return globEscape(c.RedisKey(prefix)) + "*"
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

// ExtendArgs returns the arguments of ExtendScript after the token for
// req at now: the new deadline (now plus the lease, on this process's
// clock, as every lease) and the key's TTL (the lease plus AbandonedTTL).
func (c *Core) ExtendArgs(req store.ExtendRequest, now time.Time) (deadline string, ttl int64) {
	return TimeString(now.UnixMilli() + MS(req.Lease)), MS(req.Lease) + MS(c.AbandonedTTL)
}

// DeleteIfArgs returns the arguments of DeleteIfScript for req at now:
// the states to delete ("p", "c", "f" in any order; completed and failed
// when req names none), "1" or "0" for req.ExpiredLease, and now in ms in
// decimal.
func DeleteIfArgs(req store.DeleteRequest, now time.Time) (states, expired, nowMS string) {
	want := req.States
	if len(want) == 0 {
		want = []store.State{store.StateCompleted, store.StateFailed}
	}
	b := make([]byte, 0, 3)
	for _, st := range want {
		switch st {
		case store.StateProcessing:
			b = append(b, 'p')
		case store.StateCompleted:
			b = append(b, 'c')
		case store.StateFailed:
			b = append(b, 'f')
		}
	}
	expired = "0"
	if req.ExpiredLease {
		expired = "1"
	}
	return string(b), expired, strconv.FormatInt(now.UnixMilli(), 10)
}

// MS converts d to whole milliseconds, rounding up so that a positive
// duration never becomes a zero lease.
func MS(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// Repeats reports whether a key appears more than once in keys: a batch of
// completions that does runs CompleteEachScript, not CompleteManyScript.
func Repeats(keys []string) bool {
	if len(keys) < 2 {
		return false
	}
	seen := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		if _, ok := seen[k]; ok {
			return true
		}
		seen[k] = struct{}{}
	}
	return false
}

// MaxMany bounds the keys of one multi-key script run, which holds the
// server for its whole run.
const MaxMany = 1000

// ScanCount is the COUNT hint of each SCAN step.
const ScanCount = 500
