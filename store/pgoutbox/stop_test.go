package pgoutbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/pgoutbox"
	"github.com/dedup-go/dedup/store/pgoutbox/internal/relaytest"
)

// TestRelayStopMarks: Stop in the middle of a backlog marks what the
// broker acknowledged: nothing published is left in the outbox.
func TestRelayStopMarks(t *testing.T) {
	t.Parallel()
	db := relaytest.NewDB(t, 8)
	ob := db.Outbox(t, &pgoutbox.Options{Buckets: 4})
	order := relaytest.WriteKeyed(t, relaytest.Writer{DB: db, OB: ob}, relaytest.KeysN(20), 20, func(string, int) string { return "orders.events" })
	pub := newCheckingPublisher(order, 2*time.Millisecond, nil)
	r := relaytest.NewRelay(t, ob, pub, &pgoutbox.RelayOptions{BatchSize: 16, Lease: 5 * time.Second})
	require.NoError(t, r.Start(context.WithoutCancel(t.Context())))
	relaytest.WaitFor(t, testenv.WaitTimeout, "some rounds", func() bool {
		pub.mu.Lock()
		defer pub.mu.Unlock()
		return len(pub.acked) >= 100
	})
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	require.NoError(t, r.Stop(ctx))
	pub.mu.Lock()
	acked := len(pub.acked)
	pub.mu.Unlock()
	require.Less(t, acked, 400, "stopped before the end")
	require.Equal(t, 400-acked, db.Unsent(t), "every acknowledged message marked, and only those")
	require.Equal(t, uint64(acked), r.Stats().Published)
}
