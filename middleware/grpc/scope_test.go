package grpc

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/store/memstore"
)

// No two scopes share an id, whatever bytes principal and operation hold,
// and an id never exceeds the receiver's MaxIDLength.
func TestScopedIDsNeverCollide(t *testing.T) {
	t.Parallel()
	type scope struct{ principal, operation, key string }
	long := strings.Repeat("p", 600)
	scopes := []scope{
		{"a:b", "/s/M", "k"}, {"a", "b:/s/M", "k"}, {"a", "/s/M", "b:k"}, {"a:b:", "/s/M", "k"},
		{"", "/s/M", "k"}, {"", "", "/s/M:k"}, {"1:a", "/s/M", "k"}, {"1", "a/s/M", "k"},
		{"a", "/s/M:k", "x"}, {"a", "/s/M", "k:x"},
		{long, "/s/M", "k"}, {long + "q", "/s/M", "k"}, {long, "/s/M", "k2"},
		{"\xff", "/s/M", "k"}, {"\xfe", "/s/M", "k"},
	}
	seen := map[string]scope{}
	for _, s := range scopes {
		id := scopedID(s.principal, s.operation, s.key, 512)
		require.LessOrEqual(t, len(id), 512)
		require.NoError(t, dedup.ValidateID(id, 512), "%+v", s)
		if prev, dup := seen[id]; dup {
			t.Fatalf("%+v and %+v share the id %q", prev, s, id)
		}
		seen[id] = s
	}
	require.Equal(t, "5:alice:4:/s/M:k-1", scopedID("alice", "/s/M", "k-1", 512), "readable when it fits")
	require.True(t, strings.HasPrefix(scopedID(long, "/s/M", "k", 512), hashedPrefix))
	require.Len(t, scopedID("alice", "/s/M", strings.Repeat("k", 255), hashedIDLength), hashedIDLength)
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
		_, err := New(st, &Options{Config: cfg})
		require.ErrorIs(t, err, dedup.ErrInvalidConfig, "%+v", cfg)
	}
	_, err = New(nil, nil)
	require.ErrorIs(t, err, dedup.ErrInvalidConfig)
	ic, err := New(st, &Options{Config: &dedup.Config{MaxIDLength: hashedIDLength}})
	require.NoError(t, err)
	require.True(t, ic.s.cfg.NoWait, "NoWait is always set")
}
