package dedup

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dedup-go/dedup/store"
)

// maxLostClaims bounds the keys remembered at once. Past it, a claim whose
// answer was lost is asked again with a fresh token: the key then waits
// for its lease, as it would without this memory.
const maxLostClaims = 1 << 14

// lostClaims remembers, for each key whose Acquire failed (a timeout, a
// connection reset, a failover: the store may have written the claim and
// lost its answer), the token that Acquire asked with. The next Acquire of
// the key in this receiver, the same message tried again, asks with the
// same token, and the store grants the claim it wrote to its own token
// instead of answering "in flight" for a lease that nobody holds: a lost
// answer costs one store retry, not a lease. A remembered token is taken
// by one Acquire only (deliveries of one key may claim at once: NoWait,
// HandleBatch), so no two callers ever hold one claim.
type lostClaims struct {
	n  atomic.Int64 // len(m), read without the lock on the claim path
	mu sync.Mutex
	m  map[string]lostClaim
}

type lostClaim struct {
	token store.Token
	until time.Time // after this, a fresh claim: the lost one is long over
}

// take returns the token to claim key with at now: the one of a lost claim
// of key, which it forgets, else a fresh one. It takes no lock while
// nothing is remembered, which is the usual case.
func (l *lostClaims) take(key string, now time.Time) store.Token {
	if l.n.Load() == 0 {
		return store.NewToken()
	}
	l.mu.Lock()
	e, ok := l.m[key]
	if ok {
		delete(l.m, key)
		l.n.Store(int64(len(l.m)))
	}
	l.mu.Unlock()
	if !ok || now.After(e.until) {
		return store.NewToken()
	}
	return e.token
}

// settle records the outcome of an Acquire of key with token, sent at sent
// for a lease: a failure that may have left a claim behind is remembered
// until two leases after it was sent.
func (l *lostClaims) settle(key string, token store.Token, err error, sent time.Time, lease time.Duration) {
	if err == nil || !mayHaveClaimed(err) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.m[key]; !ok && len(l.m) >= maxLostClaims {
		l.expire(sent)
		if len(l.m) >= maxLostClaims {
			return
		}
	}
	if l.m == nil {
		l.m = make(map[string]lostClaim)
	}
	l.m[key] = lostClaim{token: token, until: sent.Add(2 * lease)}
	l.n.Store(int64(len(l.m)))
}

// mayHaveClaimed reports whether an Acquire that failed with err may have
// claimed the key all the same: any failure but the store's refusal of the
// request itself.
func mayHaveClaimed(err error) bool {
	return !errors.Is(err, store.ErrKeyReused) && !errors.Is(err, store.ErrInvalidKey) && !errors.Is(err, store.ErrInvalidConfig)
}

// expire drops the claims past their time. l.mu is held.
func (l *lostClaims) expire(now time.Time) {
	for k, e := range l.m {
		if now.After(e.until) {
			delete(l.m, k)
		}
	}
	l.n.Store(int64(len(l.m)))
}
