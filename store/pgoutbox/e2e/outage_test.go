package e2e_test

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/outbox"
	"github.com/dedup-go/dedup/store/pgoutbox"
	"github.com/dedup-go/dedup/store/pgoutbox/internal/relaytest"
)

// natsServer is a nats-server with JetStream that the test owns: it may
// stop it and start it again on the same port and store.
type natsServer struct {
	t    testing.TB
	opts server.Options
	srv  *server.Server
}

func startNATS(t testing.TB) *natsServer {
	t.Helper()
	n := &natsServer{t: t, opts: server.Options{Host: "127.0.0.1", Port: testenv.FreePort(t), JetStream: true,
		StoreDir: t.TempDir(), NoLog: true, NoSigs: true}}
	n.Start()
	t.Cleanup(n.Stop)
	return n
}

// URL is the server's client URL.
func (n *natsServer) URL() string {
	return "nats://" + net.JoinHostPort(n.opts.Host, fmt.Sprint(n.opts.Port))
}

// Start starts the server (again) and waits until it accepts clients.
func (n *natsServer) Start() {
	n.t.Helper()
	opts := n.opts
	srv, err := server.NewServer(&opts)
	require.NoError(n.t, err)
	srv.Start()
	require.True(n.t, srv.ReadyForConnections(10*time.Second), "nats-server did not start")
	n.srv = srv
}

// Stop shuts the server down, if it runs.
func (n *natsServer) Stop() {
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
		n.srv = nil
	}
}

// TestRelayBrokerOutage: the broker goes away while a relay publishes
// and messages go on being committed. The relay's rounds fail and it
// backs off, longer with each failure in a row (MinBackoff doubling up
// to MaxBackoff); when the broker is back, it publishes the rest. Every
// message is in the stream once (a copy published again carries the same
// id, which the stream's duplicate window drops), in the order of its key.
//
// The failures in a row are those after the broker is gone: before, on a
// loaded machine, a round can fail at its PublishTimeout with the broker
// up, and the next one succeed, which starts the backoff again.
func TestRelayBrokerOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("a slow fault test (the relay's NATS server stopped and started again): skipped under -short")
	}
	t.Parallel()
	db := relaytest.NewDB(t, 8)
	ob := db.Outbox(t, &pgoutbox.Options{Buckets: 4})
	ns := startNATS(t)
	_, js := natsConn(t, ns.URL())
	out := newOutStream(t, js, jetstream.FileStorage, 0)
	ev := &relaytest.Events{}
	r := relaytest.NewRelay(t, ob, jsPublisher(t, js), &pgoutbox.RelayOptions{BatchSize: 16, Lease: 3 * time.Second, PublishTimeout: 300 * time.Millisecond,
		PollInterval: 50 * time.Millisecond, MinBackoff: 40 * time.Millisecond, MaxBackoff: 320 * time.Millisecond, Observer: ev})
	relaytest.Start(t, r)

	w := relaytest.Writer{DB: db, OB: ob}
	want := map[string]int{}
	write := func(from, to int) {
		for n := from; n < to; n++ {
			for k := range 6 {
				key := fmt.Sprintf("key-%d", k)
				_, err := w.Write(t.Context(), fmt.Sprintf("order:%s-%d", key, n), out.keyed(key, n))
				require.NoError(t, err)
				want[key]++
			}
		}
	}
	write(0, 10)
	relaytest.WaitFor(t, testenv.WaitTimeout, "some messages published", func() bool { return r.Stats().Published >= 20 })
	ns.Stop()
	stopped := time.Now()
	before := len(ev.Of(outbox.EventFailed, "publish"))
	write(10, 20)
	relaytest.WaitFor(t, testenv.WaitTimeout, "five failed rounds in a row", func() bool { return len(ev.Of(outbox.EventFailed, "publish")) >= before+5 })
	write(20, 25)
	ns.Start()
	relaytest.WaitFor(t, testenv.WaitTimeout, "every message sent", func() bool { return db.Unsent(t) == 0 })

	// The failures since the broker went away, in a row: each wait at
	// most the cap, and at least four fifths of twice the one before (the
	// jitter takes up to a fifth), up to four fifths of the cap.
	all, at := ev.Timed(outbox.EventFailed, "publish")
	for i, e := range all {
		t.Logf("publish failure %d (%d after the broker was gone), %v from the stop: %d messages, backoff %v: %v",
			i, i-before, at[i].Sub(stopped).Round(time.Millisecond), e.Messages, e.Backoff, e.Err)
	}
	fails := all[before:]
	require.GreaterOrEqual(t, len(fails), 5)
	for i, e := range fails[:5] {
		require.Error(t, e.Err)
		require.Positive(t, e.Messages)
		require.LessOrEqual(t, e.Backoff, 320*time.Millisecond, "failure %d", i)
		if i > 0 {
			require.GreaterOrEqual(t, e.Backoff, min(fails[i-1].Backoff*8/5, 256*time.Millisecond), "failure %d: %v after %v", i, e.Backoff, fails[i-1].Backoff)
		}
	}
	require.GreaterOrEqual(t, fails[4].Backoff, 256*time.Millisecond, "the cap reached")

	msgs := out.read(t)
	requireKeyOrder(t, msgs, want)
	require.Len(t, msgs, 6*25, "every message once")
	t.Logf("%d failed rounds, stats %+v", len(fails), r.Stats())
}
