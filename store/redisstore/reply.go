package redisstore

import (
	"fmt"

	"github.com/dedup-go/dedup/store"
)

// settledOf reads the answer of the scripts that settle or extend a
// claim: 1 done, 0 the token does not hold the key.
func settledOf(op, key string, reply any) error {
	switch reply {
	case int64(1):
		return nil
	case int64(0):
		return errLeaseLost(op, key)
	}
	return errReply(op, key, reply)
}

// completedOf reads the answer of the completion scripts: 1 this call
// wrote the record, 2 the token had completed it already (nothing
// changed), 0 the token does not hold the key.
func completedOf(key string, reply any) (store.Completion, error) {
	switch reply {
	case int64(1):
		return store.CompletionWrote, nil
	case int64(2):
		return store.CompletionUnchanged, nil
	case int64(0):
		return store.CompletionUnknown, errLeaseLost("complete", key)
	}
	return store.CompletionUnknown, errReply("complete", key, reply)
}

func field[T any](f []any, i int) (T, bool) {
	var zero T
	if i >= len(f) {
		return zero, false
	}
	v, ok := f[i].(T)
	return v, ok
}

// errReply reports a reply no script of this package gives: a key that
// another program wrote, or a server that is not Redis.
func errReply(op, key string, reply any) error {
	return &store.OpError{Op: op, Key: key, Err: fmt.Errorf("redisstore: unexpected reply %v", reply)}
}
