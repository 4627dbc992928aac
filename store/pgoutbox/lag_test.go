package pgoutbox_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/outbox"
	"github.com/dedup-go/dedup/store/pgoutbox"
	"github.com/dedup-go/dedup/store/pgoutbox/internal/relaytest"
)

// TestRelayReportsLag: the Lag of an EventPublished is how long its
// oldest message waited since it was written, by the database's clock,
// days included: a message written two days and a moment ago reports at
// least that, and no more than the test saw pass since, plus the two days.
func TestRelayReportsLag(t *testing.T) {
	t.Parallel()
	db := relaytest.NewDB(t, 4)
	ob := db.Outbox(t, nil)
	const back = 48 * time.Hour
	const waited = 300 * time.Millisecond

	written := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	_, err := relaytest.Writer{DB: db, OB: ob}.Write(ctx, "lag-claim", pgoutbox.Message{Destination: "orders.events", OrderingKey: "c-1", Body: []byte("x")})
	require.NoError(t, err)
	db.Exec(t, "UPDATE "+db.Table("dedup_outbox")+" SET created_at = created_at - interval '48 hours'")
	time.Sleep(waited) // the least the message waits

	var published atomic.Int64
	ev := &relaytest.Events{}
	r := relaytest.NewRelay(t, ob, publisherFunc(func(ctx context.Context, msgs []outbox.Message) error {
		published.Add(int64(len(msgs)))
		return ctx.Err()
	}), &pgoutbox.RelayOptions{Observer: ev})
	relaytest.Start(t, r)
	relaytest.WaitFor(t, testenv.WaitTimeout, "the message marked sent", func() bool { return len(ev.Of(outbox.EventPublished, "")) > 0 })
	most := time.Since(written) + back

	e := ev.Of(outbox.EventPublished, "")[0]
	require.Equal(t, 1, e.Messages)
	require.EqualValues(t, 1, published.Load())
	require.GreaterOrEqual(t, e.Lag, back+waited, "the lag counts the days and the time since")
	require.LessOrEqual(t, e.Lag, most, "the lag is no more than the message's age")
}
