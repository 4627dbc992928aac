package e2e_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/outbox"
	"github.com/dedup-go/dedup/store/pgoutbox"
	"github.com/dedup-go/dedup/store/pgoutbox/internal/relaytest"
)

// TestRelayOrderThreeRelays: three relays start on a backlog of a few hot
// ordering keys, committed one transaction after another, and share the
// buckets (the first takes them all, then gives the others their share);
// then messages of 18 keys are committed while they run, one relay stops
// midway and a fourth joins. Every message reaches the stream, and the
// first copies of each key's messages are in the order they were
// committed. Small batches make the relays take turns often. (Relays that
// took rows with FOR UPDATE SKIP LOCKED, without buckets, break this
// order: one takes a later row of a hot key while another holds an
// earlier one, and publishes it first.)
func TestRelayOrderThreeRelays(t *testing.T) {
	t.Parallel()
	db := relaytest.NewDB(t, 16)
	const buckets, keysPerBucket, perKey, hot, hotPerKey = 6, 3, 24, 3, 60
	ob := db.Outbox(t, &pgoutbox.Options{Buckets: buckets})
	_, js := natsConn(t, testenv.NATS.Addr(t))
	out := newOutStream(t, js, jetstream.MemoryStorage, 0)
	pub := jsPublisher(t, js)
	opts := func(ev *relaytest.Events) *pgoutbox.RelayOptions {
		return &pgoutbox.RelayOptions{BatchSize: 8, Lease: 900 * time.Millisecond, PollInterval: 50 * time.Millisecond,
			MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, Observer: ev}
	}
	evs := make([]*relaytest.Events, 4)
	relays := make([]*pgoutbox.Relay, 4)
	for i := range relays {
		evs[i] = &relaytest.Events{}
		relays[i] = relaytest.NewRelay(t, ob, pub, opts(evs[i]))
	}
	// Keys in every bucket, so every relay that holds one has work.
	var keys []string
	inBucket := map[uint32]int{}
	for i := 0; len(keys) < buckets*keysPerBucket; i++ {
		k := fmt.Sprintf("key-%03d", i)
		if b := relaytest.FNV32a(k) % buckets; inBucket[b] < keysPerBucket {
			inBucket[b]++
			keys = append(keys, k)
		}
	}
	w := relaytest.Writer{DB: db, OB: ob}
	want := map[string]int{}
	// A backlog of a few hot keys, on which the relays start and contend.
	for n := range hotPerKey {
		for k := range hot {
			key := fmt.Sprintf("hot-%d", k)
			_, err := w.Write(t.Context(), fmt.Sprintf("order:%s-%d", key, n), out.keyed(key, n))
			require.NoError(t, err)
			want[key]++
		}
	}
	for _, r := range relays[:3] {
		relaytest.Start(t, r)
	}
	for n := range perKey {
		if n == perKey/4 {
			relaytest.WaitFor(t, testenv.WaitTimeout, "each relay holding its share", func() bool {
				for _, r := range relays[:3] {
					if r.Stats().Buckets != buckets/3 {
						return false
					}
				}
				return true
			})
		}
		if n == perKey/2 {
			// It holds two buckets, with keys written since: it alone
			// publishes them.
			relaytest.WaitFor(t, testenv.WaitTimeout, "the first relay publishing", func() bool { return relays[0].Stats().Published > 0 })
			ctx, cancel := context.WithTimeout(t.Context(), testenv.WaitTimeout)
			require.NoError(t, relays[0].Stop(ctx))
			cancel()
			relaytest.Start(t, relays[3])
		}
		for _, key := range keys {
			_, err := w.Write(t.Context(), fmt.Sprintf("order:%s-%d", key, n), out.keyed(key, n))
			require.NoError(t, err)
			want[key]++
		}
	}
	relaytest.WaitFor(t, testenv.WaitTimeout, "every message sent", func() bool { return db.Unsent(t) == 0 })
	msgs := out.read(t)
	requireKeyOrder(t, msgs, want)

	publishing := 0
	for i, r := range relays {
		st := r.Stats()
		t.Logf("relay %d: %+v, %d lease events", i, st, len(evs[i].Of(outbox.EventLeases, "")))
		if st.Published > 0 {
			publishing++
		}
	}
	require.Equal(t, 4, publishing, "the relays shared the work")
	require.Len(t, msgs, len(keys)*perKey+hot*hotPerKey, "copies the duplicate window did not absorb")
}
