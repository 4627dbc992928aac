package dedup_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/store"
)

// failOneComplete is a batch store whose CompleteBatch fails for one key
// without completing it (a connection that dropped on that item), while a
// single Complete of it works.
type failOneComplete struct {
	store.BatchStore
	key string
}

func (s *failOneComplete) CompleteBatch(ctx context.Context, reqs []store.CompleteRequest) []error {
	errs := make([]error, len(reqs))
	for i, req := range reqs {
		if req.Key == s.key {
			errs[i] = errConnRefused
			continue
		}
		errs[i] = s.BatchStore.Complete(ctx, req)
	}
	return errs
}

// TestHandleBatchCompleteBatchItemFails: an item whose completion failed
// inside CompleteBatch is not taken as completed: it is completed again on
// its own, so a later delivery of it is a duplicate with its result, not
// in flight until its lease ends (or run again after).
func TestHandleBatchCompleteBatchItemFails(t *testing.T) {
	t.Parallel()
	st := newMemstore(t, clock.Real())
	var calls atomic.Int64
	h := func(_ context.Context, o order) (string, error) { calls.Add(1); return "receipt-" + o.ID, nil }
	rcv := newReceiver(t, &failOneComplete{BatchStore: st, key: "ns:b"}, h, &dedup.Config{Namespace: "ns"})
	out := rcv.HandleBatch(t.Context(), []order{{ID: "a"}, {ID: "b"}, {ID: "c"}})
	for _, o := range out {
		require.NoError(t, o.Err)
		require.Equal(t, delivery.StatusProcessed, o.Result.Status)
		require.NoError(t, o.Result.Problem)
	}
	for _, id := range []string{"a", "b", "c"} {
		res, err := rcv.Handle(t.Context(), order{ID: id})
		require.NoError(t, err, id)
		require.Equal(t, delivery.StatusDuplicate, res.Status, id)
		require.Equal(t, "receipt-"+id, res.Value, id)
	}
	require.EqualValues(t, 3, calls.Load())
}
