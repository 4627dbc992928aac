package dedupgrpc

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/store"
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
		require.NoError(t, adapter.ValidateID(id, 512), "%+v", s)
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

// TestRecordIDFindsTheRecord: the id RecordID builds from a call's
// principal and key is the id of the record the interceptor wrote for it
// (in the receiver's namespace), whatever the method, and hashed for a
// scope too long for the receiver's MaxIDLength (the default, or the
// user's) or a principal that is not UTF-8.
func TestRecordIDFindsTheRecord(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, principal, metadata, key string
		maxIDLength                    int
		hashed                         bool
	}{
		{name: "plain", principal: "acme", metadata: "pay-1", key: "pay-1"},
		{name: "quoted", principal: "acme", metadata: `"pay \"2\""`, key: `pay "2"`},
		{name: "shared scope", metadata: "pay-1", key: "pay-1"},
		{name: "long principal", principal: strings.Repeat("p", 600), metadata: "pay-1", key: "pay-1", hashed: true},
		{name: "own MaxIDLength", principal: "acme", metadata: strings.Repeat("k", 100), key: strings.Repeat("k", 100), maxIDLength: hashedIDLength, hashed: true},
		{name: "non-UTF-8 principal", principal: "caf\xe9", metadata: "pay-1", key: "pay-1", hashed: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			st, err := memstore.New(nil)
			require.NoError(t, err)
			opts := &Options{Config: &dedup.Config{Namespace: "payments", MaxIDLength: c.maxIDLength}}
			if c.principal == "" {
				opts.SharedScope = true
			} else {
				opts.Principal = func(context.Context) (string, error) { return c.principal, nil }
			}
			ic, err := New(st, opts)
			require.NoError(t, err)
			ctx := metadata.NewIncomingContext(t.Context(), metadata.Pairs(MetadataKey, c.metadata))
			_, err = ic.Unary(ctx, wrapperspb.String("req"), &grpc.UnaryServerInfo{FullMethod: "/test.Payments/Pay"},
				func(context.Context, any) (any, error) { return wrapperspb.String("ok"), nil })
			require.NoError(t, err)

			id := RecordID(c.principal, c.key, c.maxIDLength)
			require.Equal(t, c.hashed, strings.HasPrefix(id, hashedPrefix), id)
			rec, err := st.Get(t.Context(), "payments:"+id)
			require.NoError(t, err, "the record of %s", id)
			require.Equal(t, store.StateCompleted, rec.State)
			n := 0
			for _, err := range st.Scan(t.Context(), "") {
				require.NoError(t, err)
				n++
			}
			require.Equal(t, 1, n, "the only record")
		})
	}
	require.Equal(t, "5:alice:k-1", RecordID("alice", "k-1", 0))
	long := strings.Repeat("p", 600)
	require.Equal(t, RecordID(long, "k", 0), RecordID(long, "k", adapter.DefaultMaxIDLength), "0 is the default MaxIDLength")
}
