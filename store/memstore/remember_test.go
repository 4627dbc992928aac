package memstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
)

func TestRemember(t *testing.T) {
	t.Parallel()
	s, clk := setup(t, 0)
	ctx := t.Context()
	result := []byte("receipt")
	rec := dedup.Record{Key: "ns:a", State: dedup.StateCompleted, Attempt: 3, Fingerprint: "fp", Result: result, ExpiresAt: epoch.Add(time.Minute)}
	ok, err := s.Remember(rec)
	require.NoError(t, err)
	require.True(t, ok)
	result[0] = 'X' // the store keeps its own copy

	got := s.Peek("ns:", "a")
	require.NotNil(t, got)
	require.Equal(t, "receipt", string(got.Result))
	require.Equal(t, 3, got.Attempt)
	require.Equal(t, "fp", got.Fingerprint)

	_, err = s.Acquire(ctx, "ns:a", dedup.AcquireRequest{Lease: time.Second, Fingerprint: "other"})
	require.ErrorIs(t, err, dedup.ErrKeyReused, "a remembered record keeps its fingerprint")

	clk.Advance(time.Minute)
	require.Nil(t, s.Peek("ns:", "a"), "a remembered record expires at its ExpiresAt")
	c, err := s.Acquire(ctx, "ns:a", dedup.AcquireRequest{Lease: time.Second})
	require.NoError(t, err)
	require.True(t, c.Acquired)

	// A local claim is left alone.
	ok, err = s.Remember(dedup.Record{Key: "ns:a", State: dedup.StateCompleted, ExpiresAt: clk.Now().Add(time.Minute)})
	require.NoError(t, err)
	require.False(t, ok)
	require.Nil(t, s.Peek("ns:", "a"))
}

func TestRememberRefuses(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, 0)
	for name, rec := range map[string]dedup.Record{
		"no key":     {State: dedup.StateCompleted, ExpiresAt: epoch.Add(time.Minute)},
		"processing": {Key: "k", State: dedup.StateProcessing, ExpiresAt: epoch.Add(time.Minute)},
		"failed":     {Key: "k", State: dedup.StateFailed, ExpiresAt: epoch.Add(time.Minute)},
		"expired":    {Key: "k", State: dedup.StateCompleted, ExpiresAt: epoch},
	} {
		ok, err := s.Remember(rec)
		require.Error(t, err, name)
		require.False(t, ok, name)
		require.Nil(t, s.Peek("", "k"), name)
	}
}
