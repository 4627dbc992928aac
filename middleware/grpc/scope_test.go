package dedupgrpc

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/store/memstore"
)

// No two scopes share an id, whatever bytes principal and key hold, and
// an id never exceeds the receiver's MaxIDLength.
func TestScopedIDsNeverCollide(t *testing.T) {
	t.Parallel()
	type scope struct{ principal, key string }
	long := strings.Repeat("p", 600)
	scopes := []scope{
		{"a:b", "k"}, {"a", "b:k"}, {"a:b:", "k"}, {"", "a:b:k"}, {"", "k"},
		{"1:a", "k"}, {"1", "a:k"}, {"a", "k:x"}, {"a:k", "x"},
		{long, "k"}, {long + "q", "k"}, {long, "k2"},
		{"\xff", "k"}, {"\xfe", "k"},
	}
	seen := map[string]scope{}
	for _, s := range scopes {
		id := scopedID(s.principal, s.key, 512)
		require.LessOrEqual(t, len(id), 512)
		require.NoError(t, dedup.ValidateID(id, 512), "%+v", s)
		if prev, dup := seen[id]; dup {
			t.Fatalf("%+v and %+v share the id %q", prev, s, id)
		}
		seen[id] = s
	}
	require.Equal(t, "5:alice:k-1", scopedID("alice", "k-1", 512), "readable when it fits")
	require.True(t, strings.HasPrefix(scopedID(long, "k", 512), hashedPrefix))
	require.Len(t, scopedID("alice", strings.Repeat("k", 255), hashedIDLength), hashedIDLength)
}

// MaxIDLength too short for a hashed id, or a Codec, is refused at New.
func TestOptionsValidation(t *testing.T) {
	t.Parallel()
	st, err := memstore.New(nil)
	require.NoError(t, err)
	for _, cfg := range []*dedup.Config{
		{MaxIDLength: hashedIDLength - 1},
		{Codec: dedup.JSONCodec{}},
		{Lease: -1},
		{MaxResultSize: -1},
	} {
		_, err := New(st, &Options{Config: cfg, SharedScope: true})
		require.ErrorIs(t, err, dedup.ErrInvalidConfig, "%+v", cfg)
	}
	_, err = New(nil, nil)
	require.ErrorIs(t, err, dedup.ErrInvalidConfig)

	// No Principal is refused unless SharedScope says so; both is refused.
	principal := func(context.Context) (string, error) { return "p", nil }
	for _, o := range []*Options{nil, {}, {Principal: principal, SharedScope: true}} {
		_, err := New(st, o)
		require.ErrorIs(t, err, dedup.ErrInvalidConfig, "%+v", o)
		require.ErrorContains(t, err, "SharedScope")
	}
	for _, o := range []*Options{{Principal: principal}, {SharedScope: true}} {
		_, err := New(st, o)
		require.NoError(t, err)
	}

	ic, err := New(st, &Options{Config: &dedup.Config{MaxIDLength: hashedIDLength}, SharedScope: true})
	require.NoError(t, err)
	require.True(t, ic.s.cfg.NoWait, "NoWait is always set")
}
