package dedupgrpc_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/clock"
	"github.com/dedup-go/dedup/deduptest"
	"github.com/dedup-go/dedup/delivery"
	dedupgrpc "github.com/dedup-go/dedup/middleware/grpc"
)

// call is one Charge call of a test driven by deduptest.Run: the tenant
// (x-tenant metadata) and the idempotency key (metadata) it is made with.
type call struct{ tenant, key string }

// retryingCaller is deduptest's Target for s: each delivery is one Charge
// call of req, and its answer is taken as a client that retries until it
// has one would take it. A replay is a duplicate; Aborted for a key in
// flight, Unavailable and the handler's own errors are retried (after the
// RetryInfo delay, on the harness's clock), the interceptor's other
// refusals given up on (dead-lettered). The value is the reply's wire
// form, which every replay must repeat byte for byte.
func retryingCaller(s *server, req *dynamicpb.Message) deduptest.TargetFunc[call, string] {
	return func(ctx context.Context, c call) adapter.Delivery[string] {
		ctx = metadata.NewOutgoingContext(ctx, metadata.Pairs("x-tenant", c.tenant, dedupgrpc.MetadataKey, c.key))
		out := dynamicpb.NewMessage(chargeReply)
		var header metadata.MD
		err := s.conn.Invoke(ctx, chargeMethod, req, out, grpc.Header(&header))
		delay, _ := dedupgrpc.RetryDelayOf(err)
		retry := delivery.Decision{Action: delivery.Retry, Delay: delay}
		switch reason := dedupgrpc.ReasonOf(err); {
		case err == nil:
			b, err := proto.MarshalOptions{Deterministic: true}.Marshal(out)
			res := dedup.Result[string]{Status: delivery.StatusProcessed, Value: string(b)}
			if len(header.Get(dedupgrpc.ReplayedMetadata)) > 0 {
				res.Status = delivery.StatusDuplicate
			}
			return adapter.Delivery[string]{Result: res, Err: err, Decision: delivery.Decision{Action: delivery.Ack}}
		case reason == dedupgrpc.ReasonInFlight:
			return adapter.Delivery[string]{Result: dedup.Result[string]{Status: delivery.StatusInFlight}, Err: err, Decision: retry}
		case reason == dedupgrpc.ReasonStoreUnavailable:
			return adapter.Delivery[string]{Err: err, Decision: retry}
		case reason == "": // the handler's own error (or the connection's)
			return adapter.Delivery[string]{Err: &dedup.HandlerError{Err: err}, Decision: retry}
		default:
			return adapter.Delivery[string]{Err: err, Decision: delivery.Decision{Action: delivery.DeadLetter}}
		}
	}
}

// retried makes each call three times through s, from four clients at
// once in shuffled order, each retried until it has its answer
// (deduptest.Run), and returns the report: a call is named by its tenant,
// whose effects fx counts.
func retried(t *testing.T, s *server, req *dynamicpb.Message, calls []call, fx *deduptest.Effects) *deduptest.Report[string] {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) // the clients' retry delays
	rep, err := deduptest.Run(t.Context(), clk, retryingCaller(s, req), calls, &deduptest.Options[call]{
		ID:      func(c call) string { return c.tenant },
		Effects: fx.Count,
		Idle:    20 * time.Millisecond, // a call's real time before the clock moves
		Timeout: 30 * time.Second,
	})
	require.NoError(t, err)
	return rep
}
