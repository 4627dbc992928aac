package dedupgrpc_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/idstrategy"
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
		require.ErrorIs(t, dedupgrpc.ValidateKey(bad), dedup.ErrInvalidKey, "%q", bad)
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
		got, err := meta(dedupgrpc.Call{Ctx: md(dedupgrpc.MetadataKey, c.in), FullMethod: "/s/M"})
		require.NoError(t, err, c.in)
		require.Equal(t, c.want, got, c.in)
	}
	for _, bad := range []string{"", `""`, `"abc`, `"a"b"`, `"a\nb"`, `"a\x01"`, `"é"`} {
		_, err := meta(dedupgrpc.Call{Ctx: md(dedupgrpc.MetadataKey, bad), FullMethod: "/s/M"})
		require.ErrorIs(t, err, dedup.ErrInvalidKey, "%q", bad)
	}
	got, err := meta(dedupgrpc.Call{Ctx: ctx, FullMethod: "/s/M"})
	require.ErrorIs(t, err, dedup.ErrNoKey, "no metadata: no key")
	require.Empty(t, got)

	field := dedupgrpc.FromField(dedupgrpc.FieldName)
	got, err = field(dedupgrpc.Call{Ctx: ctx, FullMethod: "/s/M", Req: chargeReq("a", 1, "from-field")})
	require.NoError(t, err)
	require.Equal(t, "from-field", got)
	for _, none := range []any{chargeReq("a", 1, ""), wrapperspb.String("x"), struct{}{}, nil} {
		got, err = field(dedupgrpc.Call{Ctx: ctx, FullMethod: "/s/M", Req: none})
		require.ErrorIs(t, err, dedup.ErrNoKey, "%T", none)
		require.Empty(t, got, "%T", none)
	}
	_, err = field(dedupgrpc.Call{Ctx: ctx, FullMethod: "/s/M", Req: dynamicpb.NewMessage(numberKeyRequest)})
	require.ErrorIs(t, err, dedup.ErrInvalidKey, "an idempotency_key that is not a string")

	both := idstrategy.FirstOf(meta, field)
	got, err = both(dedupgrpc.Call{Ctx: md(dedupgrpc.MetadataKey, "from-metadata"), FullMethod: "/s/M", Req: chargeReq("a", 1, "from-field")})
	require.NoError(t, err)
	require.Equal(t, "from-metadata", got, "the metadata comes first")
	got, err = both(dedupgrpc.Call{Ctx: ctx, FullMethod: "/s/M", Req: chargeReq("a", 1, "from-field")})
	require.NoError(t, err)
	require.Equal(t, "from-field", got)
	_, err = both(dedupgrpc.Call{Ctx: ctx, FullMethod: "/s/M", Req: chargeReq("a", 1, "")})
	require.ErrorIs(t, err, dedup.ErrNoKey, "neither")
	_, err = both(dedupgrpc.Call{Ctx: md(dedupgrpc.MetadataKey, ""), FullMethod: "/s/M", Req: chargeReq("a", 1, "from-field")})
	require.ErrorIs(t, err, dedup.ErrInvalidKey, "a bad metadata key is not passed over for the field")
}

// idstrategy.FirstOf composes the interceptor's key funcs: the metadata,
// else a field of the service's own; a call with neither runs unprotected.
func TestKeyFirstOf(t *testing.T) {
	st := stores[0].new(t)
	svc, s := setup(t, st, &dedupgrpc.Options{Key: idstrategy.FirstOf(
		dedupgrpc.FromMetadata(dedupgrpc.MetadataKey), dedupgrpc.FromField("account"))})
	for range 2 {
		_, _, err := s.charge(t, chargeReq("acct-1", 1, ""))
		require.NoError(t, err)
	}
	require.Equal(t, int64(1), svc.runs.Load(), "keyed by the account field")
	_, _, err := s.charge(t, chargeReq("acct-1", 1, ""), dedupgrpc.MetadataKey, "k-1")
	require.NoError(t, err)
	require.Equal(t, int64(2), svc.runs.Load(), "the metadata comes first")
}

// A KeyFunc's error carrying a status is returned as is; another is
// InvalidArgument.
func TestKeyFuncErrors(t *testing.T) {
	st := stores[0].new(t)
	key := func(c dedupgrpc.Call) (string, error) {
		if v := metadata.ValueFromIncomingContext(c.Ctx, "x-mode"); len(v) == 1 && v[0] == "status" {
			return "", status.Error(codes.PermissionDenied, "not yours")
		}
		return "", errors.New("no key for you")
	}
	svc, s := setup(t, st, &dedupgrpc.Options{Key: key})
	_, _, err := s.charge(t, chargeReq("a", 1, ""), "x-mode", "status")
	requireStatus(t, err, codes.PermissionDenied, "")
	_, _, err = s.charge(t, chargeReq("a", 1, ""))
	requireStatus(t, err, codes.InvalidArgument, dedupgrpc.ReasonKeyInvalid)
	require.Equal(t, int64(0), svc.runs.Load())
}
