package dedupgrpc_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	dedupgrpc "github.com/dedup-go/dedup/middleware/grpc"
)

// What the wire cannot carry (gRPC metadata is printable ASCII), checked
// on the functions themselves.
func TestValidateKey(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"k", "order-42", strings.Repeat("é", 127) + "k", "日本語", "a b"} {
		require.NoError(t, dedupgrpc.ValidateKey(ok), "%q", ok)
	}
	for _, bad := range []string{"", strings.Repeat("k", 256), "a\x00b", "a\nb", "a\tb", "a\x7f", "a\u0085", "a\xffb"} {
		require.ErrorIs(t, dedupgrpc.ValidateKey(bad), dedupgrpc.ErrBadKey, "%q", bad)
	}
}

func TestKeyFuncs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	md := func(kv ...string) context.Context { return metadata.NewIncomingContext(ctx, metadata.Pairs(kv...)) }
	meta := dedupgrpc.FromMetadata(dedupgrpc.MetadataKey)
	for _, c := range []struct{ in, want string }{
		{"abc", "abc"}, {`"abc"`, "abc"}, {`"a\\b"`, `a\b`}, {`"a\"b"`, `a"b`}, {`a"b`, `a"b`},
	} {
		got, err := meta(md(dedupgrpc.MetadataKey, c.in), "/s/M", nil)
		require.NoError(t, err, c.in)
		require.Equal(t, c.want, got, c.in)
	}
	for _, bad := range []string{"", `""`, `"abc`, `"a"b"`, `"a\nb"`, `"a\x01"`, `"é"`} {
		_, err := meta(md(dedupgrpc.MetadataKey, bad), "/s/M", nil)
		require.ErrorIs(t, err, dedupgrpc.ErrBadKey, "%q", bad)
	}
	got, err := meta(ctx, "/s/M", nil)
	require.NoError(t, err)
	require.Empty(t, got, "no metadata: no key")

	field := dedupgrpc.FromField(dedupgrpc.FieldName)
	got, err = field(ctx, "/s/M", chargeReq("a", 1, "from-field"))
	require.NoError(t, err)
	require.Equal(t, "from-field", got)
	for _, none := range []any{chargeReq("a", 1, ""), wrapperspb.String("x"), struct{}{}, nil} {
		got, err = field(ctx, "/s/M", none)
		require.NoError(t, err)
		require.Empty(t, got, "%T", none)
	}
	_, err = field(ctx, "/s/M", dynamicpb.NewMessage(numberKeyRequest))
	require.ErrorIs(t, err, dedupgrpc.ErrBadKey, "an idempotency_key that is not a string")

	both := dedupgrpc.FirstOf(meta, field)
	got, err = both(md(dedupgrpc.MetadataKey, "from-metadata"), "/s/M", chargeReq("a", 1, "from-field"))
	require.NoError(t, err)
	require.Equal(t, "from-metadata", got, "the metadata comes first")
	got, err = both(ctx, "/s/M", chargeReq("a", 1, "from-field"))
	require.NoError(t, err)
	require.Equal(t, "from-field", got)
}

// A KeyFunc's error carrying a status is returned as is; another is
// InvalidArgument.
func TestKeyFuncErrors(t *testing.T) {
	st := stores[0].new(t)
	key := func(ctx context.Context, method string, req any) (string, error) {
		if v := metadata.ValueFromIncomingContext(ctx, "x-mode"); len(v) == 1 && v[0] == "status" {
			return "", status.Error(codes.PermissionDenied, "not yours")
		}
		return "", dedupgrpc.ErrBadKey
	}
	svc, s := setup(t, st, &dedupgrpc.Options{Key: key})
	_, _, err := s.charge(t, chargeReq("a", 1, ""), "x-mode", "status")
	requireStatus(t, err, codes.PermissionDenied, "")
	_, _, err = s.charge(t, chargeReq("a", 1, ""))
	requireStatus(t, err, codes.InvalidArgument, dedupgrpc.ReasonKeyInvalid)
	require.Equal(t, int64(0), svc.runs.Load())
}
