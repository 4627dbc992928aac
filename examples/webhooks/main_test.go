package main

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dedup-go/dedup/internal/redistest"
	"github.com/dedup-go/dedup/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestReplays plays the senders against two replicas over the real Redis:
// every Standard Webhooks and GitHub event is delivered four times at once
// (each retried until a 2xx, on alternating replicas) and twice more after
// that, and one event of each sender is first delivered by a sender that
// gives up while the handler runs, then retried at once and after. Each
// event has one effect, one original response (that no sender saw, for
// the event whose first delivery was given up on) and replays of it;
// forged and id-less deliveries have none.
func TestReplays(t *testing.T) {
	c := redistest.Client(t)
	prefix := redistest.Prefix(t, c)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	o, err := demo(ctx, testenv.Redis.Addr(t), prefix, &out)
	t.Log("\n" + out.String())
	require.NoError(t, err)

	require.Len(t, o.events, 8, "three events and a slow one per sender")
	require.Len(t, o.effects, len(o.events), "only the events had effects")
	for _, ev := range o.events {
		require.Equal(t, 1, o.effects[ev.id], "%s %s: one effect", ev.sender.name, ev.id)
		tries := o.tries[ev.id]
		originals, replays := 0, 0
		for _, a := range tries {
			switch {
			case a.ok() && a.Replayed:
				replays++
			case a.ok():
				originals++
			case a.Err == nil:
				require.Equal(t, http.StatusServiceUnavailable, a.Status, "%s: only the in-flight answer is not a 2xx: %s", ev.id, a.Body)
				require.NotEmpty(t, a.RetryAfter, "%s: a 503 says when to retry", ev.id)
			}
		}
		if slices.Contains(o.slow, ev.id) {
			require.ErrorIs(t, tries[0].Err, context.Canceled, "%s: the sender gave up", ev.id)
			require.Equal(t, http.StatusServiceUnavailable, tries[1].Status, "%s: the retry while the handler ran: %s", ev.id, tries[1].Body)
			require.Zero(t, originals, "%s: the original answer went to the sender that gave up", ev.id)
			require.GreaterOrEqual(t, replays, 1, ev.id)
			last := tries[len(tries)-1]
			require.True(t, last.ok() && last.Replayed, "%s: the retry after it gets the completed response", ev.id)
			continue
		}
		require.Equal(t, 1, originals, "%s: one original answer", ev.id)
		require.Equal(t, 5, replays, "%s: six deliveries accepted, five of them replays", ev.id)
	}

	require.Len(t, o.refused, 3)
	require.Equal(t, http.StatusUnauthorized, o.refused[0].got.Status, "forged")
	require.Equal(t, http.StatusBadRequest, o.refused[1].got.Status, "no id")
	require.Contains(t, o.refused[1].got.Body, `"code":"idempotency-key-missing"`)
	require.Equal(t, http.StatusBadRequest, o.refused[2].got.Status, "a 300-byte id")
	require.Contains(t, o.refused[2].got.Body, `"code":"idempotency-key-invalid"`)
	require.Contains(t, out.String(), "Every event had its effect once: true")
}
