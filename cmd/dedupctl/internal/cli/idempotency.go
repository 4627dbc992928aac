package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/dedup-go/dedup/adapter"
	deduphttp "github.com/dedup-go/dedup/middleware/http"
)

// Middleware whose record ids --idempotency-key builds.
const (
	middlewareHTTP = "http"
	middlewareGRPC = "grpc"
)

// idempotencyFlags name the record of an HTTP or gRPC middleware by what
// an operator is told (a tenant's Idempotency-Key) rather than by its id,
// which the middleware builds from the principal, the operation and the
// key (get and forget).
type idempotencyFlags struct {
	key         string
	principal   string
	operation   string
	middleware  string
	maxIDLength int
}

// The flags' names, for the checks of which were given.
const (
	flagIdempotencyKey = "idempotency-key"
	flagPrincipal      = "principal"
	flagOperation      = "operation"
	flagMiddleware     = "middleware"
	flagMaxIDLength    = "max-id-length"
)

func (f *idempotencyFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.key, flagIdempotencyKey, "", "instead of KEY: the record of this `KEY` of the HTTP middleware's Idempotency-Key (or the gRPC interceptor's idempotency-key), sent by --principal, in --namespace")
	fl.StringVar(&f.principal, flagPrincipal, "", "with --idempotency-key (required): the caller the middleware scoped the key by, what its Principal returned (tenant, user; a webhook's Sender); '' under SharedScope")
	fl.StringVar(&f.operation, flagOperation, "", "with --idempotency-key: what the HTTP middleware's Options.Operation returned for the request; leave it out when Operation is not set (the default)")
	fl.StringVar(&f.middleware, flagMiddleware, middlewareHTTP, "with --idempotency-key: whose record: http (deduphttp, the default) or grpc (dedupgrpc, which keeps no operation)")
	fl.IntVar(&f.maxIDLength, flagMaxIDLength, adapter.DefaultMaxIDLength, "with --idempotency-key: the middleware's Config.MaxIDLength (a scope too long for it is hashed)")
}

// recordKey returns the store key --idempotency-key and its companions
// name, in --namespace; ok is false when --idempotency-key was not given
// (and then none of its companions may be).
func (f *idempotencyFlags) recordKey(cmd *cobra.Command, o *options) (key string, ok bool, err error) {
	given := cmd.Flags().Changed
	if !given(flagIdempotencyKey) {
		for _, name := range []string{flagPrincipal, flagOperation, flagMiddleware, flagMaxIDLength} {
			if given(name) {
				return "", false, usageErrorf("--%s goes with --idempotency-key", name)
			}
		}
		return "", false, nil
	}
	switch {
	case f.key == "":
		return "", false, usageErrorf("--idempotency-key: an empty key")
	case !given(flagPrincipal):
		return "", false, usageErrorf("--idempotency-key needs --principal: the caller the middleware scoped the key by (--principal '' for a middleware with SharedScope)")
	case o.namespace == "":
		return "", false, usageErrorf("--idempotency-key needs --namespace: the middleware's Config.Namespace ($%s)", EnvNamespace)
	case f.maxIDLength <= 0:
		return "", false, usageErrorf("--max-id-length %d: must be positive", f.maxIDLength)
	}
	var id string
	switch f.middleware {
	case middlewareHTTP:
		id = deduphttp.RecordID(f.principal, f.operation, f.key, f.maxIDLength)
	case middlewareGRPC:
		if given(flagOperation) {
			return "", false, usageErrorf("--operation: the gRPC interceptor's record ids hold no operation (the method is in the record's fingerprint); leave it out")
		}
		id = grpcRecordID(f.principal, f.key, f.maxIDLength)
	default:
		return "", false, usageErrorf("--middleware %q: want http or grpc", f.middleware)
	}
	return o.namespace + ":" + id, true, nil
}

// grpcRecordID is dedupgrpc.RecordID, which the tool does not import: that
// would build gRPC and protobuf into it. It is the format
// docs/operations.md documents, and a test holds it to dedupgrpc's: the
// principal's decimal length, ':', the principal, ':', the key; or, when
// that is longer than maxIDLength or the principal is not UTF-8, "sha256:"
// and the hex SHA-256 of that.
func grpcRecordID(principal, key string, maxIDLength int) string {
	id := strconv.Itoa(len(principal)) + ":" + principal + ":" + key
	if len(id) <= maxIDLength && utf8.ValidString(principal) {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "sha256:" + hex.EncodeToString(sum[:])
}
