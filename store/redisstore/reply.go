package redisstore

import (
	"fmt"
	"time"

	"github.com/dedup-go/dedup/store"
)

// claimOf reads the reply of acquireScript.
func claimOf(key string, token store.Token, reply []any) (store.Claim, error) {
	outcome, _ := field[string](reply, 0)
	switch outcome {
	case "reused":
		state, _ := field[string](reply, 1)
		return store.Claim{}, fmt.Errorf("redisstore: acquire %q: %w: the %s record has another fingerprint", key, store.ErrKeyReused, stateOf(state))
	case "acquired", "held":
		rec, err := recordOf(key, reply[1:])
		if err != nil {
			return store.Claim{}, err
		}
		if outcome == "held" {
			return store.Claim{Record: rec}, nil
		}
		return store.Claim{Acquired: true, Token: token, Record: rec}, nil
	}
	return store.Claim{}, errReply("acquire", key, reply)
}

// recordOf reads {state, attempt, fingerprint, result, last error, lease
// deadline, expiry} as the scripts answer a record (view in scripts.go).
func recordOf(key string, f []any) (store.Record, error) {
	state, ok1 := field[string](f, 0)
	attempt, ok2 := field[int64](f, 1)
	fp, ok3 := field[string](f, 2)
	result, ok4 := field[string](f, 3)
	lastErr, ok5 := field[string](f, 4)
	lease, ok6 := field[int64](f, 5)
	expiry, ok7 := field[int64](f, 6)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7) || stateOf(state) == 0 {
		return store.Record{}, errReply("read", key, f)
	}
	rec := store.Record{
		Key:         key,
		State:       stateOf(state),
		Attempt:     int(attempt),
		Fingerprint: fp,
		LastError:   lastErr,
		LeaseUntil:  timeOf(lease),
		ExpiresAt:   timeOf(expiry),
	}
	if result != "" {
		rec.Result = []byte(result)
	}
	return rec, nil
}

// settledOf reads the reply of settleScript and extendScript.
func settledOf(op, key string, reply []any) error {
	switch outcome, _ := field[string](reply, 0); outcome {
	case "ok":
		return nil
	case "lost":
		return errLeaseLost(op, key)
	}
	return errReply(op, key, reply)
}

func field[T any](f []any, i int) (T, bool) {
	var zero T
	if i >= len(f) {
		return zero, false
	}
	v, ok := f[i].(T)
	return v, ok
}

func stateOf(s string) store.State {
	switch s {
	case "p":
		return store.StateProcessing
	case "c":
		return store.StateCompleted
	case "f":
		return store.StateFailed
	}
	return 0
}

// timeOf converts a script's milliseconds; zero is no time.
func timeOf(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// errReply reports a reply no script of this package gives: a key that
// another program wrote, or a server that is not Redis.
func errReply(op, key string, reply any) error {
	return &store.OpError{Op: op, Key: key, Err: fmt.Errorf("redisstore: unexpected reply %v", reply)}
}
