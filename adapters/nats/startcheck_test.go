package dedupnats_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupnats "github.com/dedup-go/dedup/adapters/nats"
)

// TestStartRefusesImplicitAcks: AckNone and AckAll consumers lose retries
// (a Nak or Term of one message cannot be told apart from the others), so
// Start refuses them.
func TestStartRefusesImplicitAcks(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, url string) {
		_, js := connect(t, url)
		n := newNames()
		streams(t, js, n)
		rcv := okReceiver(t, newEffects(), fastConfig("acks"))
		for _, policy := range []jetstream.AckPolicy{jetstream.AckNonePolicy, jetstream.AckAllPolicy} {
			cons, err := js.CreateOrUpdateConsumer(t.Context(), n.stream, jetstream.ConsumerConfig{
				Durable: "acks_" + suffix(), AckPolicy: policy, MaxDeliver: 5,
			})
			require.NoError(t, err)
			c, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{DeadLetterSubject: n.dlq})
			require.NoError(t, err)
			err = c.Start(t.Context())
			require.ErrorIs(t, err, dedupnats.ErrAckPolicy, policy.String())
			require.ErrorIs(t, err, dedup.ErrInvalidConfig)
			require.ErrorIs(t, c.Stop(t.Context()), dedupnats.ErrNotStarted)
		}
	})
}

// TestStartChecksLeaseAndNakDelays: a third of the receiver's lease at or
// past AckWait (JetStream redelivers before the first InProgress) and a
// horizon that only the adapter's own Nak delays push past the retention
// are warnings, errors under StrictHorizon; the consumer is named once.
func TestStartChecksLeaseAndNakDelays(t *testing.T) {
	t.Parallel()
	_, js := connect(t, embedded(t))
	for _, tc := range []struct {
		name    string
		cons    jetstream.ConsumerConfig
		cfg     dedup.Config
		problem string // "" when nothing is wrong
	}{
		{"lease fits AckWait", jetstream.ConsumerConfig{AckWait: 10 * time.Second, MaxDeliver: 5},
			dedup.Config{Lease: 9 * time.Second}, ""},
		{"a third of the lease is AckWait", jetstream.ConsumerConfig{AckWait: 3 * time.Second, MaxDeliver: 5},
			dedup.Config{Lease: 9 * time.Second}, "redelivers after AckWait 3s, before the first heartbeat's InProgress (a third of the receiver's lease 9s)"},
		{"a BackOff entry under a third of the lease", jetstream.ConsumerConfig{MaxDeliver: 5, BackOff: []time.Duration{time.Minute, 2 * time.Second}},
			dedup.Config{Lease: 9 * time.Second}, "redelivers after AckWait 2s"},
		{"Nak delays past the retention", jetstream.ConsumerConfig{AckWait: 10 * time.Second, MaxDeliver: 6},
			dedup.Config{Lease: 9 * time.Second, Retention: 90 * time.Second, Backoff: dedup.BackoffFunc(func(int) time.Duration { return time.Minute })},
			"may redeliver for 6m0s (AckWait 10s, MaxDeliver 6, BackOff [], the adapter's Nak delays up to 1m0s), longer than the receiver's retention 1m30s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			n := newNames()
			streams(t, js, n)
			cons := consumer(t, js, n, tc.cons)
			tc.cfg.Namespace = "lease"
			rcv := okReceiver(t, newEffects(), &tc.cfg)

			strict, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{DeadLetterSubject: n.dlq, StrictHorizon: true})
			require.NoError(t, err)
			err = strict.Start(t.Context())
			var logs syncBuffer
			lenient, lerr := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{DeadLetterSubject: n.dlq, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			require.NoError(t, lerr)
			require.NoError(t, lenient.Start(t.Context()))
			require.NoError(t, lenient.Stop(t.Context()))
			if tc.problem == "" {
				require.NoError(t, err)
				require.NoError(t, strict.Stop(t.Context()))
				require.NotContains(t, logs.String(), "WARN")
				return
			}
			require.ErrorIs(t, err, dedupnats.ErrHorizon)
			require.ErrorIs(t, err, dedup.ErrInvalidConfig)
			require.ErrorContains(t, err, tc.problem)
			require.ErrorContains(t, err, `consumer "`+n.consumer+`"`)
			require.NotContains(t, err.Error(), n.consumer+n.consumer, "the consumer is named once")
			require.Contains(t, logs.String(), "level=WARN")
			require.Contains(t, logs.String(), strings.ReplaceAll(tc.problem, `"`, `\"`))
		})
	}
}
