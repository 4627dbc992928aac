package dedup

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dedup-go/dedup/store"
)

// ErrKeyHeld: Forget found the message's record processing under a live
// lease (a delivery is running its handler, or a worker that crashed
// still holds it until its lease ends) and deleted nothing: forgetting it
// would let a second delivery run the handler beside the first. Wait for
// the delivery to finish (or the lease to end) and Forget again.
var ErrKeyHeld = errors.New("dedup: key held by a live claim")

// Forget deletes the record of the message id (the id the key func gives,
// without the namespace) so that the next delivery of the message runs the
// handler afresh. It is the redrive path: a message dead-lettered after
// MaxAttempts leaves a failed record for the retention, and a redriven copy
// would be dead-lettered again at once; fix the bug, Forget the id, then
// republish. A completed record forgotten lets a duplicate run again:
// forget only what you mean to rerun.
//
// Forget never pulls a key from under a live holder. It deletes a
// completed or failed record, or a processing one whose lease has ended
// (on the store's clock: a worker that crashed); a record processing under
// a live lease stays, and the error matches ErrKeyHeld. The store decides
// and deletes in one atomic step (store.Inspector.DeleteIf), so a claim
// made meanwhile is never deleted either. Forgetting an id with no record
// is not an error.
//
// The store must be a store.Inspector (memstore, redisstore, tieredstore
// and pgstore are); otherwise the error matches ErrNotSupported.
func (r *Receiver[M, R]) Forget(ctx context.Context, id string) error {
	if err := validateID(id, r.cfg.MaxIDLength); err != nil {
		return err
	}
	in, ok := r.store.(store.Inspector)
	if !ok {
		return fmt.Errorf("%w: Forget needs a store.Inspector, and %T is not one", ErrNotSupported, r.store)
	}
	key := r.prefix + id
	deleted, rec, err := in.DeleteIf(ctx, store.DeleteRequest{Key: key, ExpiredLease: true})
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("dedup: forget %q: %w", key, err)
	case !deleted:
		return fmt.Errorf("dedup: forget %q: %w: attempt %d is processing, its lease ends at %s",
			key, ErrKeyHeld, rec.Attempt, rec.LeaseUntil.Format(time.RFC3339Nano))
	}
	return nil
}
