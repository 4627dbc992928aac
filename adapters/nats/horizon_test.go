package dedupnats_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	dedupnats "github.com/dedup-go/dedup/adapters/nats"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/store/memstore"
)

func TestHorizon(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		cfg     jetstream.ConsumerConfig
		want    time.Duration
		bounded bool
	}{
		{"ack wait times max deliver", jetstream.ConsumerConfig{AckWait: 30 * time.Second, MaxDeliver: 5}, 150 * time.Second, true},
		{"default ack wait", jetstream.ConsumerConfig{MaxDeliver: 2}, time.Minute, true},
		{"backoff repeats its last entry", jetstream.ConsumerConfig{AckWait: time.Hour, MaxDeliver: 5, BackOff: []time.Duration{time.Second, 10 * time.Second}}, 41 * time.Second, true},
		{"backoff longer than max deliver", jetstream.ConsumerConfig{MaxDeliver: 2, BackOff: []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}}, 3 * time.Second, true},
		{"unlimited", jetstream.ConsumerConfig{AckWait: time.Second, MaxDeliver: -1}, 0, false},
		{"unset max deliver is unlimited", jetstream.ConsumerConfig{AckWait: time.Second}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, bounded := dedupnats.Horizon(tc.cfg)
			require.Equal(t, tc.bounded, bounded)
			require.Equal(t, tc.want, got)
		})
	}
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestStartChecksHorizon: a consumer that may redeliver longer than the
// receiver keeps its records is an error under StrictHorizon, a warning
// otherwise, and nothing at all when the retention covers it.
func TestStartChecksHorizon(t *testing.T) {
	t.Parallel()
	_, js := connect(t, embedded(t))
	store, err := memstore.New(nil)
	require.NoError(t, err)
	handler := func(context.Context, *dedup.Message[Order]) (Receipt, error) { return Receipt{}, nil }

	for _, tc := range []struct {
		name      string
		cfg       jetstream.ConsumerConfig
		retention time.Duration // the receiver's Config.Retention; 0 is the default
		problem   string        // "" when the horizon is covered
	}{
		{"covered", jetstream.ConsumerConfig{AckWait: time.Minute, MaxDeliver: 10}, time.Hour, ""},
		{"too long", jetstream.ConsumerConfig{AckWait: 10 * time.Minute, MaxDeliver: 10}, time.Hour, "longer than the receiver's retention 1h0m0s"},
		{"backoff too long", jetstream.ConsumerConfig{MaxDeliver: 4, BackOff: []time.Duration{time.Minute, 30 * time.Minute}}, time.Hour, "may redeliver for 1h31m0s"},
		{"unlimited", jetstream.ConsumerConfig{AckWait: time.Second, MaxDeliver: -1}, time.Hour, "redelivers without limit"},
		{"default retention", jetstream.ConsumerConfig{AckWait: time.Hour, MaxDeliver: 25}, 0, "longer than the receiver's retention 24h0m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			n := newNames()
			streams(t, js, n)
			cons := consumer(t, js, n, tc.cfg)
			var rcvLogs syncBuffer
			rcv, err := dedup.NewReceiver(store, idstrategy.MessageID[Order](), handler, &dedup.Config{
				Namespace: "h", Retention: tc.retention, Logger: slog.New(slog.NewTextHandler(&rcvLogs, nil)),
			})
			require.NoError(t, err)

			strict, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{StrictHorizon: true, DropPoison: true})
			require.NoError(t, err)
			err = strict.Start(t.Context())
			if tc.problem == "" {
				require.NoError(t, err)
				require.NoError(t, strict.Stop(t.Context()))
				<-strict.Stopped()
			} else {
				require.ErrorIs(t, err, dedupnats.ErrHorizon)
				require.ErrorIs(t, err, dedup.ErrInvalidConfig)
				require.ErrorContains(t, err, tc.problem)
				require.ErrorIs(t, strict.Stop(t.Context()), dedupnats.ErrNotStarted)
			}

			var logs syncBuffer
			lenient, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{DropPoison: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			require.NoError(t, err)
			require.NoError(t, lenient.Start(t.Context()))
			require.ErrorIs(t, lenient.Start(t.Context()), dedupnats.ErrStarted)
			require.NoError(t, lenient.Stop(t.Context()))
			<-lenient.Stopped()
			if tc.problem == "" {
				require.NotContains(t, logs.String(), "WARN")
			} else {
				require.Contains(t, logs.String(), "level=WARN")
				require.Contains(t, logs.String(), tc.problem)
			}
			require.Empty(t, rcvLogs.String(), "Options.Logger replaces the receiver's")

			// Without Options.Logger, the warning goes to the receiver's.
			byDefault, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{DropPoison: true})
			require.NoError(t, err)
			require.NoError(t, byDefault.Start(t.Context()))
			require.NoError(t, byDefault.Stop(t.Context()))
			<-byDefault.Stopped()
			if tc.problem == "" {
				require.Empty(t, rcvLogs.String())
			} else {
				require.Contains(t, rcvLogs.String(), "level=WARN")
				require.Contains(t, rcvLogs.String(), tc.problem)
			}
		})
	}
}

// TestNewConsumerRejectsBadInput: nil parts and out-of-range options are
// errors matching dedup.ErrInvalidConfig, never a panic later.
func TestNewConsumerRejectsBadInput(t *testing.T) {
	t.Parallel()
	nc, js := connect(t, embedded(t))
	n := newNames()
	streams(t, js, n)
	cons := consumer(t, js, n, jetstream.ConsumerConfig{MaxDeliver: 3})
	store, err := memstore.New(nil)
	require.NoError(t, err)
	rcv, err := dedup.NewReceiver(store, idstrategy.MessageID[Order](), func(context.Context, *dedup.Message[Order]) (int, error) { return 0, nil }, nil)
	require.NoError(t, err)
	for name, fn := range map[string]func() error{
		"nil js":       func() error { _, err := dedupnats.NewConsumer(nil, cons, rcv, nil); return err },
		"nil consumer": func() error { _, err := dedupnats.NewConsumer(js, nil, rcv, nil); return err },
		"nil receiver": func() error { _, err := dedupnats.NewConsumer[Order, int](js, cons, nil, nil); return err },
		"concurrency": func() error {
			_, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{Concurrency: -1})
			return err
		},
		"retry delay": func() error {
			_, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{MinRetryDelay: -1})
			return err
		},
		"nil conn":   func() error { _, err := dedupnats.NewSubscriber(nil, "x", "", rcv, nil); return err },
		"no subject": func() error { _, err := dedupnats.NewSubscriber(nc, "", "", rcv, nil); return err },
		"nil rcv":    func() error { _, err := dedupnats.NewSubscriber[Order, int](nc, "x", "", nil, nil); return err },
	} {
		err := fn()
		require.ErrorIs(t, err, dedup.ErrInvalidConfig, name)
	}
	c, err := dedupnats.NewConsumer(js, cons, rcv, &dedupnats.Options{DropPoison: true})
	require.NoError(t, err)
	require.ErrorIs(t, c.Stop(context.Background()), dedupnats.ErrNotStarted)
	require.True(t, errors.Is(c.Stop(context.Background()), dedupnats.ErrNotStarted))
}
