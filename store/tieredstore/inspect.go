package tieredstore

import (
	"context"
	"fmt"
	"iter"

	"github.com/dedup-go/dedup/store"
)

// inspector returns the remote store as a store.Inspector, or an error
// naming what it lacks.
func (s *Store) inspector(op string) (store.Inspector, error) {
	in, ok := s.remote.(store.Inspector)
	if !ok {
		return nil, fmt.Errorf("tieredstore: %s: %w: the remote store (%T) is not a store.Inspector", op, store.ErrInvalidConfig, s.remote)
	}
	return in, nil
}

// Get returns the remote store's record of key: the remote store is the
// truth, the local tier only a copy.
func (s *Store) Get(ctx context.Context, key string) (store.Record, error) {
	in, err := s.inspector("get")
	if err != nil {
		return store.Record{}, err
	}
	return in.Get(ctx, key)
}

// Delete forgets key in the remote store and in this process's local
// tier. Other processes' local tiers keep their copy until it expires, at
// most Options.MaxLocalTTL.
//
// The local copy goes even when the remote Delete fails: dropping a copy
// costs a round trip at most, and keeping it could outlive a Delete that
// failed only on its way back.
func (s *Store) Delete(ctx context.Context, key string) error {
	in, err := s.inspector("delete")
	if err != nil {
		return err
	}
	err = in.Delete(ctx, key)
	s.claims.forget(key)
	// The local tier's Delete fails only on a cancelled context, which
	// must not keep the copy.
	_ = s.local.Delete(context.WithoutCancel(ctx), key)
	return err
}

// DeleteIf deletes the record of req.Key in the remote store only when
// req allows its state there (store.DeleteRequest): the remote store
// decides, atomically, by its clock. Unless the remote store kept the
// record (deleted it, found none, or failed, perhaps after deleting it),
// this process's local copy and its note of the claim go too, as after
// Delete: a copy of a record the remote store no longer has is stale.
func (s *Store) DeleteIf(ctx context.Context, req store.DeleteRequest) (bool, store.Record, error) {
	in, err := s.inspector("delete")
	if err != nil {
		return false, store.Record{}, err
	}
	deleted, rec, err := in.DeleteIf(ctx, req)
	if deleted || err != nil {
		s.claims.forget(req.Key)
		_ = s.local.Delete(context.WithoutCancel(ctx), req.Key)
	}
	return deleted, rec, err
}

// Scan yields the remote store's records whose key starts with prefix.
func (s *Store) Scan(ctx context.Context, prefix string) iter.Seq2[store.Record, error] {
	in, err := s.inspector("scan")
	if err != nil {
		return func(yield func(store.Record, error) bool) { yield(store.Record{}, err) }
	}
	return in.Scan(ctx, prefix)
}
