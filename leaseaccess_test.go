package dedup_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/store/memstore"
)

// TestReceiverLease: Lease reports the configured lease, and the default
// when none is set.
func TestReceiverLease(t *testing.T) {
	t.Parallel()
	s, err := memstore.New(nil)
	require.NoError(t, err)
	key := func(m string) (string, error) { return m, nil }
	handler := func(context.Context, string) (struct{}, error) { return struct{}{}, nil }
	for _, tc := range []struct {
		lease, want time.Duration
	}{{0, 30 * time.Second}, {7 * time.Second, 7 * time.Second}} {
		rcv, err := dedup.NewReceiver(s, key, handler, &dedup.Config{Lease: tc.lease})
		require.NoError(t, err)
		require.Equal(t, tc.want, rcv.Lease())
	}
}
