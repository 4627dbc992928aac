package dedup

import (
	"context"
	"fmt"

	"github.com/dedup-go/dedup/store"
)

// Forget deletes the record of the message id (the id the key func gives,
// without the namespace), whatever its state, so that the next delivery of
// the message runs the handler afresh. It is the redrive path: a message
// dead-lettered after MaxAttempts leaves a failed record for the
// retention, and a redriven copy would be dead-lettered again at once; fix
// the bug, Forget the id, then republish. A completed record forgotten lets
// a duplicate run again: forget only what you mean to rerun.
//
// The store must be a store.Inspector (memstore, redisstore, tieredstore
// and pgstore are); otherwise the error matches ErrNotSupported.
func (r *Receiver[M, R]) Forget(ctx context.Context, id string) error {
	if err := ValidateID(id, r.cfg.MaxIDLength); err != nil {
		return err
	}
	in, ok := r.store.(store.Inspector)
	if !ok {
		return fmt.Errorf("%w: Forget needs a store.Inspector, and %T is not one", ErrNotSupported, r.store)
	}
	key := r.prefix + id
	if err := in.Delete(ctx, key); err != nil {
		return fmt.Errorf("dedup: forget %q: %w", key, err)
	}
	return nil
}
