package dedupgrpc_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/dedup-go/dedup"
	dedupgrpc "github.com/dedup-go/dedup/middleware/grpc"
	"github.com/dedup-go/dedup/store/memstore"
)

// saga is a Charge handler of two steps, charge and reserve, whose
// reserve fails with reserveErr, and the compensation of charge. What
// each did is counted.
type saga struct {
	charges, reserves, refunds atomic.Int32
	reserveErr                 error
	// refundErr, when set, is the compensation's outcome at its nth run
	// (1 for the first): nil refunds.
	refundErr func(n int32) error
	// refunded is the charge the compensation got: the recorded result.
	refunded atomic.Pointer[string]
}

func (s *saga) charge(ctx context.Context, run int64, req *dynamicpb.Message) (*dynamicpb.Message, error) {
	account := req.Get(chargeRequest.Fields().ByName("account")).String()
	if _, err := dedup.Step(ctx, "charge", func(ctx context.Context) (string, error) {
		s.charges.Add(1)
		return "ch_" + account, ctx.Err()
	}); err != nil {
		return nil, err
	}
	if _, err := dedup.Step(ctx, "reserve", func(ctx context.Context) (int, error) {
		s.reserves.Add(1)
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		return 0, s.reserveErr
	}); err != nil {
		return nil, err
	}
	return reply(run, req), nil
}

func (s *saga) opts(maxAttempts int) *dedupgrpc.Options {
	return &dedupgrpc.Options{Config: &dedup.Config{
		Namespace:   "payments",
		MaxAttempts: maxAttempts,
		Backoff:     dedup.BackoffFunc(func(n int) time.Duration { return time.Duration(n) * 2 * time.Second }),
		Compensations: dedup.Compensations{
			// The interceptor's messages are its own: a compensation takes
			// any, and finds what it undoes in the step's result.
			"charge": dedup.Compensate(func(ctx context.Context, _ any, charge string) error {
				n := s.refunds.Add(1)
				if s.refundErr != nil {
					if err := s.refundErr(n); err != nil {
						return err
					}
				}
				s.refunded.Store(&charge)
				return ctx.Err()
			}),
		},
	}}
}

// start serves s behind an interceptor over a store that keeps step
// records, and returns the service (its runs) and the server.
func (s *saga) start(t *testing.T, opts *dedupgrpc.Options) (*payments, *server) {
	t.Helper()
	mem, err := memstore.New(nil)
	require.NoError(t, err)
	svc := &payments{fn: s.charge}
	return svc, serve(t, svc, newInterceptor(t, mem, opts))
}

// TestPermanentGivesUp: a handler's dedup.Permanent error gives the key up
// at once: the compensation of its completed step runs once, the caller
// gets the handler's status as the handler made it (the mark taken off),
// and a later call with the key is FailedPrecondition
// IDEMPOTENCY_KEY_GIVEN_UP without the handler running.
func TestPermanentGivesUp(t *testing.T) {
	t.Parallel()
	s := saga{reserveErr: dedup.Permanent(status.Error(codes.NotFound, "sku gone"))}
	svc, srv := s.start(t, s.opts(5))
	req := chargeReq("acct-1", 500, "k-1")

	_, _, err := srv.charge(t, req)
	require.Equal(t, codes.NotFound, status.Code(err), "%v", err)
	require.Equal(t, "sku gone", status.Convert(err).Message(), "the handler's status, not the text of its mark")
	require.Empty(t, dedupgrpc.ReasonOf(err))
	require.EqualValues(t, 1, s.refunds.Load(), "the charge is refunded before the call is answered")
	require.NotNil(t, s.refunded.Load())
	require.Equal(t, "ch_acct-1", *s.refunded.Load(), "the compensation got the step's recorded result")

	for range 2 {
		_, _, err = srv.charge(t, req)
		requireStatus(t, err, codes.FailedPrecondition, dedupgrpc.ReasonGivenUp)
	}
	require.EqualValues(t, 1, svc.runs.Load(), "the handler does not run for a key given up")
	require.EqualValues(t, 1, s.refunds.Load(), "the compensation runs once")
	require.EqualValues(t, 1, s.charges.Load())
	require.EqualValues(t, 1, s.reserves.Load())
}

// TestAttemptsGiveUp: calls that fail MaxAttempts times with the same key
// give it up in the call that hit the limit, which still gets the
// handler's status: the compensation runs once, and a later call is
// FailedPrecondition IDEMPOTENCY_ATTEMPTS_EXHAUSTED without the handler
// running.
func TestAttemptsGiveUp(t *testing.T) {
	t.Parallel()
	s := saga{reserveErr: status.Error(codes.Unavailable, "warehouse down")}
	svc, srv := s.start(t, s.opts(3))
	req := chargeReq("acct-1", 500, "k-1")

	for i := 1; i <= 3; i++ {
		_, _, err := srv.charge(t, req)
		require.Equal(t, codes.Unavailable, status.Code(err), "call %d: %v", i, err)
		require.Equal(t, "warehouse down", status.Convert(err).Message(), "call %d", i)
		if i < 3 {
			require.Zero(t, s.refunds.Load(), "call %d: not given up before MaxAttempts", i)
		}
	}
	require.EqualValues(t, 1, s.refunds.Load(), "the charge is refunded in the call that hit the limit")
	require.EqualValues(t, 1, s.charges.Load(), "the charge ran once: later calls replayed it")
	require.EqualValues(t, 3, s.reserves.Load())

	for range 2 {
		_, _, err := srv.charge(t, req)
		requireStatus(t, err, codes.FailedPrecondition, dedupgrpc.ReasonAttemptsExhausted)
	}
	require.EqualValues(t, 3, svc.runs.Load(), "the handler does not run for a key given up")
	require.EqualValues(t, 1, s.refunds.Load(), "the compensation runs once")
}

// TestAttemptsGiveUpFoundLater: a key given up for its attempts, asked of
// an interceptor whose MaxAttempts is higher (a deploy raised it), is
// found given up by the receiver (dedup.ErrGivenUp, for attempts
// exhausted): IDEMPOTENCY_ATTEMPTS_EXHAUSTED as before, the handler not
// running.
func TestAttemptsGiveUpFoundLater(t *testing.T) {
	t.Parallel()
	s := saga{reserveErr: status.Error(codes.Unavailable, "warehouse down")}
	mem, err := memstore.New(nil)
	require.NoError(t, err)
	svc := &payments{fn: s.charge}
	before := serve(t, svc, newInterceptor(t, mem, s.opts(2)))
	req := chargeReq("acct-1", 500, "k-1")
	for range 2 {
		_, _, err := before.charge(t, req)
		require.Equal(t, codes.Unavailable, status.Code(err))
	}
	require.EqualValues(t, 1, s.refunds.Load())

	after := serve(t, svc, newInterceptor(t, mem, s.opts(10)))
	_, _, err = after.charge(t, req)
	requireStatus(t, err, codes.FailedPrecondition, dedupgrpc.ReasonAttemptsExhausted)
	require.EqualValues(t, 2, svc.runs.Load(), "the handler does not run")
	require.EqualValues(t, 1, s.refunds.Load())
}

// TestCompensationFailed: a compensation that fails (a panic, an error)
// is Unavailable IDEMPOTENCY_KEY_GIVING_UP with the receiver's backoff as
// RetryInfo, in place of the handler's status; the compensations resume
// on the retry, the handler never running again; once the failure is
// final the call is FailedPrecondition IDEMPOTENCY_KEY_GIVEN_UP, and its
// message names nothing internal.
func TestCompensationFailed(t *testing.T) {
	t.Parallel()
	s := saga{
		reserveErr: dedup.Permanent(status.Error(codes.NotFound, "sku gone")),
		refundErr: func(n int32) error {
			switch n {
			case 1:
				panic("refund API down")
			case 2, 3:
				return fmt.Errorf("secret-internal refund error %d", n)
			}
			return nil
		},
	}
	svc, srv := s.start(t, s.opts(3))
	req := chargeReq("acct-1", 500, "k-1")

	for i, delay := range []time.Duration{2 * time.Second, 4 * time.Second} {
		_, _, err := srv.charge(t, req)
		requireStatus(t, err, codes.Unavailable, dedupgrpc.ReasonGivingUp)
		d, ok := dedupgrpc.RetryDelayOf(err)
		require.True(t, ok, "call %d: no RetryInfo", i)
		require.Equal(t, delay, d, "call %d", i)
		require.EqualValues(t, i+1, s.refunds.Load())
	}
	_, _, err := srv.charge(t, req) // the third failure is final
	requireStatus(t, err, codes.FailedPrecondition, dedupgrpc.ReasonGivenUp)
	msg := status.Convert(err).Message()
	for _, internal := range []string{"secret-internal", "charge", "refund", "compensation"} {
		require.NotContains(t, msg, internal)
	}
	require.EqualValues(t, 3, s.refunds.Load())
	require.Nil(t, s.refunded.Load())
	require.EqualValues(t, 1, svc.runs.Load(), "the handler ran once: the retries resumed the compensations")
	require.False(t, strings.Contains(msg, "sku gone"))
}

// TestKeepErrorUnmarked: a Permanent error that KeepError keeps is kept,
// and replayed, as the handler's status, without its mark's text; the key
// completes, so nothing is given up.
func TestKeepErrorUnmarked(t *testing.T) {
	t.Parallel()
	s := saga{reserveErr: dedup.Permanent(status.Error(codes.NotFound, "sku gone"))}
	opts := s.opts(3)
	opts.KeepError = func(_ string, err error) bool { return status.Code(err) == codes.NotFound }
	svc, srv := s.start(t, opts)
	for i, replayed := range []bool{false, true} {
		_, header, err := srv.charge(t, chargeReq("acct-1", 500, "k-1"))
		require.Equal(t, codes.NotFound, status.Code(err), "call %d: %v", i, err)
		require.Equal(t, "sku gone", status.Convert(err).Message(), "call %d", i)
		requireReplayed(t, header, replayed)
	}
	require.EqualValues(t, 1, svc.runs.Load())
	require.Zero(t, s.refunds.Load(), "a kept error completes the key: nothing is given up")
}
