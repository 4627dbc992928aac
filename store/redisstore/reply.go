package redisstore

import (
	"github.com/dedup-go/dedup/store"
)

// settled reads the answer of the scripts that settle or extend a claim
// (see rediscore.Core.Settled).
func (s *Store) settled(op, key string, reply any) error {
	if code, ok := reply.(int64); ok {
		return s.core.Settled(op, key, code)
	}
	return s.core.Reply(op, key, reply)
}

// completed reads the answer of the completion scripts (see
// rediscore.Core.Completed).
func (s *Store) completed(key string, reply any) (store.Completion, error) {
	if code, ok := reply.(int64); ok {
		return s.core.Completed(key, code)
	}
	return store.CompletionUnknown, s.core.Reply("complete", key, reply)
}

func field[T any](f []any, i int) (T, bool) {
	var zero T
	if i >= len(f) {
		return zero, false
	}
	v, ok := f[i].(T)
	return v, ok
}
