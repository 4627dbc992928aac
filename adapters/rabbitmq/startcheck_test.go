package dedupamqp_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	dedupamqp "github.com/dedup-go/dedup/adapters/rabbitmq"
	"github.com/dedup-go/dedup/idstrategy"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/store/memstore"
)

func nopReceiver(t *testing.T, cfg *dedup.Config) *dedup.Receiver[*dedup.Message[Order], struct{}] {
	t.Helper()
	store, err := memstore.New(nil)
	require.NoError(t, err)
	rcv, err := dedup.NewReceiver(store, idstrategy.MessageID[Order](),
		func(context.Context, *dedup.Message[Order]) (struct{}, error) { return struct{}{}, nil }, cfg)
	require.NoError(t, err)
	return rcv
}

// TestOptionsValidation: bad options are an error matching
// dedup.ErrInvalidConfig from NewConsumer that names what is wrong, never a
// panic later. nil options are all defaults, and where poison goes has
// none: refused, naming both fields.
func TestOptionsValidation(t *testing.T) {
	t.Parallel()
	rcv := nopReceiver(t, nil)
	const url = "amqp://guest:guest@127.0.0.1:5672/"
	for name, tc := range map[string]struct {
		url, queue string
		opts       *dedupamqp.Options
		want       string
	}{
		"nil options":        {url, "q", nil, "DeadLetterExchange is empty and DropPoison is false"},
		"nil, no queue":      {url, "", nil, "queue is empty"},
		"nil, no url":        {"", "q", nil, "url is empty and Dial is nil"},
		"no dead letters":    {url, "q", &dedupamqp.Options{}, "DeadLetterExchange is empty and DropPoison is false"},
		"both dead letters":  {url, "q", &dedupamqp.Options{DeadLetterExchange: "x", DropPoison: true}, "choose one"},
		"empty queue":        {url, "", &dedupamqp.Options{DropPoison: true}, "queue is empty"},
		"no url, no Dial":    {"", "q", &dedupamqp.Options{DropPoison: true}, "url is empty and Dial is nil"},
		"negative workers":   {url, "q", &dedupamqp.Options{DropPoison: true, Concurrency: -1}, "Concurrency"},
		"prefetch too large": {url, "q", &dedupamqp.Options{DropPoison: true, Prefetch: 70000}, "Prefetch"},
		"negative tier":      {url, "q", &dedupamqp.Options{DropPoison: true, RetryTiers: []time.Duration{-time.Second}}, "RetryTiers"},
		"sub-ms tier":        {url, "q", &dedupamqp.Options{DropPoison: true, RetryTiers: []time.Duration{1500 * time.Microsecond}}, "milliseconds"},
		"negative hold":      {url, "q", &dedupamqp.Options{DropPoison: true, InPlaceRetryMax: -1}, "InPlaceRetryMax"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := dedupamqp.NewConsumer(tc.url, tc.queue, rcv, tc.opts)
			require.ErrorIs(t, err, dedup.ErrInvalidConfig)
			require.ErrorContains(t, err, tc.want)
		})
	}
	_, err := dedupamqp.NewConsumer[Order, struct{}](url, "q", nil, &dedupamqp.Options{DropPoison: true})
	require.ErrorIs(t, err, dedup.ErrInvalidConfig)

	err = dedupamqp.Topology{Queue: "q", DeliveryLimit: 3}.Declare(t.Context(), nil)
	require.ErrorIs(t, err, dedup.ErrInvalidConfig)
}

// TestStartChecks: Start refuses a topology it cannot use (a missing
// dead-letter exchange, retry tier or queue) and, with StrictHorizon, a
// lease over the consumer timeout or a retention under the longest tier.
// A refused Start leaves the consumer unstarted, with nothing running.
func TestStartChecks(t *testing.T) {
	t.Parallel()
	url := testenv.RabbitMQ.Addr(t)
	top := declare(t, url, dedupamqp.Topology{RetryTiers: []time.Duration{time.Second}})
	start := func(t *testing.T, queue string, cfg *dedup.Config, opts *dedupamqp.Options) error {
		t.Helper()
		c, err := dedupamqp.NewConsumer(url, queue, nopReceiver(t, cfg), opts)
		require.NoError(t, err)
		err = c.Start(t.Context())
		if err == nil {
			stopAtCleanup(t, c)
		} else {
			require.ErrorIs(t, c.Stop(t.Context()), dedupamqp.ErrNotStarted)
		}
		return err
	}
	t.Run("ok", func(t *testing.T) {
		require.NoError(t, start(t, top.Queue, nil, top.Options()))
	})
	t.Run("missing dead-letter exchange", func(t *testing.T) {
		err := start(t, top.Queue, nil, &dedupamqp.Options{DeadLetterExchange: top.Queue + ".nope"})
		require.ErrorContains(t, err, "dead-letter exchange")
		require.ErrorContains(t, err, "NOT_FOUND")
	})
	t.Run("missing retry tier", func(t *testing.T) {
		opts := top.Options()
		opts.RetryTiers = append(opts.RetryTiers, 3*time.Second)
		err := start(t, top.Queue, nil, opts)
		require.ErrorContains(t, err, adapter.RetryName(top.Queue, 3*time.Second))
	})
	t.Run("missing queue", func(t *testing.T) {
		err := start(t, top.Queue+".nope", nil, top.Options())
		require.ErrorContains(t, err, "NOT_FOUND")
	})
	t.Run("lease over consumer timeout", func(t *testing.T) {
		opts := top.Options()
		opts.ConsumerTimeout = time.Second
		opts.StrictHorizon = true
		err := start(t, top.Queue, &dedup.Config{Lease: 2 * time.Second}, opts)
		require.ErrorIs(t, err, dedupamqp.ErrHorizon)
		require.ErrorIs(t, err, dedup.ErrInvalidConfig)
		require.ErrorContains(t, err, "consumer_timeout")
	})
	t.Run("retention under the longest tier", func(t *testing.T) {
		opts := top.Options()
		opts.StrictHorizon = true
		err := start(t, top.Queue, &dedup.Config{Lease: 100 * time.Millisecond, Retention: 500 * time.Millisecond}, opts)
		require.ErrorIs(t, err, dedupamqp.ErrHorizon)
		require.ErrorContains(t, err, "retention")
	})
	t.Run("warning without StrictHorizon", func(t *testing.T) {
		var lg logs
		opts := top.Options()
		opts.Logger = slogNew(lg.handler())
		require.NoError(t, start(t, top.Queue, &dedup.Config{Lease: 100 * time.Millisecond, Retention: 500 * time.Millisecond}, opts))
		require.Len(t, lg.contains("retention"), 1)
	})
	t.Run("twice", func(t *testing.T) {
		c, err := dedupamqp.NewConsumer(url, top.Queue, nopReceiver(t, nil), top.Options())
		require.NoError(t, err)
		require.NoError(t, c.Start(t.Context()))
		stopAtCleanup(t, c)
		require.True(t, errors.Is(c.Start(t.Context()), dedupamqp.ErrStarted))
	})
}
