package memcore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/internal/memcore"
)

var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func setup(t *testing.T) (*memcore.Store, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(epoch)
	s, err := memcore.New(&memcore.Options{Clock: clk})
	require.NoError(t, err)
	return s, clk
}

func TestRemember(t *testing.T) {
	t.Parallel()
	s, clk := setup(t)
	ctx := t.Context()
	result := []byte("receipt")
	rec := store.Record{Key: "ns:a", State: store.StateCompleted, Attempt: 3, Fingerprint: "fp", Result: result, ExpiresAt: epoch.Add(time.Minute)}
	ok, err := s.Remember(rec)
	require.NoError(t, err)
	require.True(t, ok)
	result[0] = 'X' // the store keeps its own copy

	got := s.Peek("ns:", "a")
	require.NotNil(t, got)
	require.Equal(t, "receipt", string(got.Result))
	require.Equal(t, 3, got.Attempt)
	require.Equal(t, "fp", got.Fingerprint)

	_, err = s.Acquire(ctx, store.AcquireRequest{Key: "ns:a", Lease: time.Second, Fingerprint: "other"})
	require.ErrorIs(t, err, store.ErrKeyReused, "a remembered record keeps its fingerprint")

	// No token completed it here, so none completes it again.
	var zero store.Token
	require.ErrorIs(t, s.Complete(ctx, store.CompleteRequest{Key: "ns:a", Token: store.NewToken(), Retention: time.Minute}), store.ErrLeaseLost)
	require.ErrorIs(t, s.Complete(ctx, store.CompleteRequest{Key: "ns:a", Token: zero, Retention: time.Minute}), store.ErrLeaseLost)

	clk.Advance(time.Minute)
	require.Nil(t, s.Peek("ns:", "a"), "a remembered record expires at its ExpiresAt")
	c, err := s.Acquire(ctx, store.AcquireRequest{Key: "ns:a", Lease: time.Second})
	require.NoError(t, err)
	require.True(t, c.Acquired)

	// A local claim is left alone.
	ok, err = s.Remember(store.Record{Key: "ns:a", State: store.StateCompleted, ExpiresAt: clk.Now().Add(time.Minute)})
	require.NoError(t, err)
	require.False(t, ok)
	require.Nil(t, s.Peek("ns:", "a"))
}

func TestRememberReplaces(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	for _, result := range []string{"old", "new"} {
		ok, err := s.Remember(store.Record{Key: "ns:a", State: store.StateCompleted, Result: []byte(result), ExpiresAt: epoch.Add(time.Minute)})
		require.NoError(t, err)
		require.True(t, ok)
	}
	got := s.Peek("ns:", "a")
	require.NotNil(t, got)
	require.Equal(t, "new", string(got.Result))
	require.Equal(t, 1, s.Stats().Len)
}

func TestRememberRefuses(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	for name, rec := range map[string]store.Record{
		"no key":     {State: store.StateCompleted, ExpiresAt: epoch.Add(time.Minute)},
		"processing": {Key: "k", State: store.StateProcessing, ExpiresAt: epoch.Add(time.Minute)},
		"failed":     {Key: "k", State: store.StateFailed, ExpiresAt: epoch.Add(time.Minute)},
		"expired":    {Key: "k", State: store.StateCompleted, ExpiresAt: epoch},
	} {
		ok, err := s.Remember(rec)
		require.Error(t, err, name)
		require.False(t, ok, name)
		require.Nil(t, s.Peek("", "k"), name)
	}
}
