package memcore

import (
	"fmt"

	"github.com/dedup-go/dedup/store"
)

// Remember keeps a copy of rec, a completed record that another store
// holds, as if it had been completed here: Peek and Acquire answer with it
// until rec.ExpiresAt on this store's clock. It is how a local tier caches
// what its remote store confirmed (tieredstore); the caller picks an
// ExpiresAt no later than the remote record's. No token completes a
// remembered record again: Complete, Release and Extend of its key fail
// with store.ErrLeaseLost.
//
// A record in another state, without a key, or already expired is refused
// with an error matching store.ErrInvalidConfig (store.ErrInvalidKey for no
// key); a key claimed in this store is left to its claim, and Remember
// reports false. The copy keeps rec's Token, CreatedAt and CompletedAt as
// they are, zero or not, for Peek and Acquire to answer with.
func (s *Store) Remember(rec store.Record) (bool, error) {
	if rec.Key == "" {
		return false, errEmptyKey("remember")
	}
	if rec.State != store.StateCompleted {
		return false, fmt.Errorf("memstore: remember %q: %w: only completed records are remembered, not %s ones", rec.Key, store.ErrInvalidConfig, rec.State)
	}
	data, packed := pack(rec.Key, rec.Fingerprint, rec.LastError, rec.Result)
	flags := uint32(metaRemembered)
	if packed {
		flags |= metaPacked
	}
	now := s.clock.Now()
	if !now.Before(rec.ExpiresAt) {
		return false, fmt.Errorf("memstore: remember %q: %w: the record expired at %v", rec.Key, store.ErrInvalidConfig, rec.ExpiresAt)
	}
	sh, k := s.locate(rec.Key)
	sh.mu.Lock()
	if _, ok := sh.claims[rec.Key]; ok {
		sh.mu.Unlock()
		return false, nil
	}
	if i := sh.settled.find(&k); i != 0 {
		sh.forgetSlotSteps(i) // the copy replaces the record
		sh.remove(i)          // settle adds a key that is not there
	}
	e := slot{
		data:    data,
		token:   rec.Token,
		created: unixNano(rec.CreatedAt),
		done:    unixNano(rec.CompletedAt),
		expires: s.at(rec.ExpiresAt),
		hash:    k.hash(),
	}
	e.setMeta(rec.Attempt, flags)
	owed := sh.settle(e, s.at(now))
	sh.mu.Unlock()
	if owed {
		s.evictElsewhere(sh, now)
	}
	return true, nil
}
