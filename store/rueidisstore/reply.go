package rueidisstore

import (
	"strings"

	"github.com/redis/rueidis"

	"github.com/dedup-go/dedup/store"
)

// The answers of the scripts, read from rueidis's messages into the plain
// values rediscore reads.

// settled reads the answer of the scripts that settle or extend a claim
// (see rediscore.Core.Settled).
func (s *Store) settled(op, key string, m *rueidis.RedisMessage) error {
	code, err := m.AsInt64()
	if err != nil {
		return s.core.Reply(op, key, describe(m))
	}
	return s.core.Settled(op, key, code)
}

// completed reads the answer of the completion scripts (see
// rediscore.Core.Completed).
func (s *Store) completed(key string, m *rueidis.RedisMessage) (store.Completion, error) {
	code, err := m.AsInt64()
	if err != nil {
		return store.CompletionUnknown, s.core.Reply("complete", key, describe(m))
	}
	return s.core.Completed(key, code)
}

// pair reads an answer {code, record} of the takeover and delete scripts.
func pair(m *rueidis.RedisMessage) (code int64, v string, ok bool) {
	f, err := m.ToArray()
	if err != nil || len(f) != 2 {
		return 0, "", false
	}
	code, err1 := f[0].AsInt64()
	v, err2 := f[1].ToString()
	return code, v, err1 == nil && err2 == nil
}

// describe renders a reply no script of the package gives, for an error.
func describe(m *rueidis.RedisMessage) string {
	return strings.TrimSpace(m.String())
}
