package tieredstore

import (
	"context"
	"fmt"

	"github.com/dedup-go/dedup"
)

// inspector returns the remote store as a dedup.Inspector, or an error
// naming what it lacks.
func (s *Store) inspector(op string) (dedup.Inspector, error) {
	in, ok := s.remote.(dedup.Inspector)
	if !ok {
		return nil, fmt.Errorf("tieredstore: %s: %w: the remote store (%T) is not a dedup.Inspector", op, dedup.ErrInvalidConfig, s.remote)
	}
	return in, nil
}

// Get returns the remote store's record of key: the remote store is the
// truth, the local tier only a copy.
func (s *Store) Get(ctx context.Context, key string) (dedup.Record, error) {
	in, err := s.inspector("get")
	if err != nil {
		return dedup.Record{}, err
	}
	return in.Get(ctx, key)
}

// Delete forgets key in the remote store and in this process's local
// tier. Other processes' local tiers keep their copy until it expires, at
// most Options.MaxLocalTTL.
func (s *Store) Delete(ctx context.Context, key string) error {
	in, err := s.inspector("delete")
	if err != nil {
		return err
	}
	if err := in.Delete(ctx, key); err != nil {
		return err
	}
	return s.local.Delete(ctx, key)
}

// Scan scans the remote store.
func (s *Store) Scan(ctx context.Context, prefix string, fn func(dedup.Record) bool) error {
	in, err := s.inspector("scan")
	if err != nil {
		return err
	}
	return in.Scan(ctx, prefix, fn)
}
