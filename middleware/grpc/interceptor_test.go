package dedupgrpc_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/deduptest"
	"github.com/dedup-go/dedup/internal/testenv"
	dedupgrpc "github.com/dedup-go/dedup/middleware/grpc"
	"github.com/dedup-go/dedup/store"
)

// requireStatus checks err's code and, when reason is set, the
// interceptor's reason.
func requireStatus(t testing.TB, err error, code codes.Code, reason string) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, code, status.Code(err), "%v", err)
	require.Equal(t, reason, dedupgrpc.ReasonOf(err), "%v", err)
}

func requireReplayed(t testing.TB, header metadata.MD, replayed bool) {
	t.Helper()
	if replayed {
		require.Equal(t, []string{"true"}, header.Get(dedupgrpc.ReplayedMetadata))
	} else {
		require.Empty(t, header.Get(dedupgrpc.ReplayedMetadata))
	}
}

// One key, 100 concurrent calls through two servers sharing the store (two
// replicas): the handler runs once, every other call is refused as in
// flight at once (never waits), and every replay afterwards is identical.
func TestConcurrentCallsOneKey(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func(testing.TB) store.Store) {
		st := newStore(t)
		started, release := make(chan struct{}), make(chan struct{})
		svc := &payments{}
		svc.fn = func(ctx context.Context, run int64, req *dynamicpb.Message) (*dynamicpb.Message, error) {
			if run == 1 {
				close(started)
				<-release
			}
			return reply(run, req), nil
		}
		a, b := serve(t, svc, newInterceptor(t, st, nil)), serve(t, svc, newInterceptor(t, st, nil))

		const n = 100
		type answer struct {
			resp *dynamicpb.Message
			err  error
		}
		answers := make(chan answer, n)
		var wg sync.WaitGroup
		for i := range n {
			s := a
			if i%2 == 1 {
				s = b
			}
			wg.Go(func() {
				resp, _, err := s.charge(t, chargeReq("acct-1", 500, ""), dedupgrpc.MetadataKey, "order-1")
				answers <- answer{resp, err}
			})
		}
		testenv.Recv(t, started, "the first call's handler")
		var ok []answer
		for range n - 1 { // every call but the one running is refused at once
			got := testenv.Recv(t, answers, "a refused call")
			if got.err == nil {
				ok = append(ok, got)
				continue
			}
			requireStatus(t, got.err, codes.Aborted, dedupgrpc.ReasonInFlight)
			_, hasDelay := dedupgrpc.RetryDelayOf(got.err)
			require.True(t, hasDelay, "an in-flight refusal says when to retry")
		}
		require.Empty(t, ok, "no call answered before the handler finished")
		close(release)
		first := testenv.Recv(t, answers, "the first call")
		require.NoError(t, first.err)
		testenv.Wait(t, &wg, "the callers")
		require.Equal(t, int64(1), svc.runs.Load())
		require.Equal(t, "ch-1", idOf(first.resp))

		var replays sync.WaitGroup
		for i := range 20 {
			s := a
			if i%2 == 1 {
				s = b
			}
			replays.Go(func() {
				resp, header, err := s.charge(t, chargeReq("acct-1", 500, ""), dedupgrpc.MetadataKey, "order-1")
				if !assertNoError(t, err) {
					return
				}
				requireReplayed(t, header, true)
				require.True(t, proto.Equal(first.resp, resp))
				require.Equal(t, wire(t, first.resp), wire(t, resp))
			})
		}
		testenv.Wait(t, &replays, "the replays")
		require.Equal(t, int64(1), svc.runs.Load())
	})
}

// assertNoError is require.NoError for a goroutine other than the test's.
func assertNoError(t testing.TB, err error) bool {
	if err != nil {
		t.Errorf("unexpected error: %v", err)
		return false
	}
	return true
}

// The same key from two principals is two operations: each call made
// three times at once and retried until answered runs once per principal,
// and each principal's copies are replayed its own response.
func TestTwoPrincipals(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func(testing.TB) store.Store) {
		var fx deduptest.Effects
		svc := &payments{fn: func(ctx context.Context, run int64, req *dynamicpb.Message) (*dynamicpb.Message, error) {
			principal, _ := tenant(ctx)
			fx.Record(principal)
			return reply(run, req), nil
		}}
		s := serve(t, svc, newInterceptor(t, newStore(t), nil))
		rep := retried(t, s, chargeReq("acct-1", 500, ""), []call{{"alice", "k-1"}, {"bob", "k-1"}}, &fx)
		// Once per principal (a principal answered with the other's record
		// would show no effect), every copy answered, every replay its
		// principal's first answer.
		rep.Check(t)
	})
}

// The same key with another request is FailedPrecondition and runs
// nothing, on another method too: the key is scoped by the principal, and
// the method is in the fingerprint.
func TestKeyReusedWithAnotherRequest(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func(testing.TB) store.Store) {
		st := newStore(t)
		svc, s := setup(t, st, nil)
		_, _, err := s.charge(t, chargeReq("acct-1", 500, ""), dedupgrpc.MetadataKey, "k-1")
		require.NoError(t, err)
		_, _, err = s.charge(t, chargeReq("acct-1", 501, ""), dedupgrpc.MetadataKey, "k-1")
		requireStatus(t, err, codes.FailedPrecondition, dedupgrpc.ReasonKeyReused)
		_, _, err = s.charge(t, chargeReq("acct-2", 500, ""), dedupgrpc.MetadataKey, "k-1")
		requireStatus(t, err, codes.FailedPrecondition, dedupgrpc.ReasonKeyReused)
		require.Equal(t, int64(1), svc.runs.Load())

		_, _, err = s.echo(t, "hi", dedupgrpc.MetadataKey, "k-1")
		requireStatus(t, err, codes.FailedPrecondition, dedupgrpc.ReasonKeyReused)
		require.Zero(t, svc.echo.Load(), "the key on another method must not run its handler")
		require.Equal(t, 1, records(t, st))

		resp, header, err := s.charge(t, chargeReq("acct-1", 500, ""), dedupgrpc.MetadataKey, "k-1")
		require.NoError(t, err)
		requireReplayed(t, header, true)
		require.Equal(t, "ch-1", idOf(resp))
	})
}

// With SharedScope (and no Principal), every caller's keys are one scope:
// the same key and request from another caller is the first caller's
// record, replayed.
func TestSharedScope(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func(testing.TB) store.Store) {
		svc, s := setup(t, newStore(t), &dedupgrpc.Options{SharedScope: true})
		req := chargeReq("acct-1", 500, "")
		ra, _, err := s.charge(t, req, "x-tenant", "alice", dedupgrpc.MetadataKey, "k-1")
		require.NoError(t, err)
		rb, header, err := s.charge(t, req, "x-tenant", "bob", dedupgrpc.MetadataKey, "k-1")
		require.NoError(t, err)
		requireReplayed(t, header, true)
		require.Equal(t, idOf(ra), idOf(rb))
		require.Equal(t, int64(1), svc.runs.Load())
	})
}

// A handler error is not kept: the key is released and the next call
// with it runs the handler again, whose success is then replayed.
func TestErrorThenRetryRunsAgain(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func(testing.TB) store.Store) {
		svc := &payments{}
		svc.fn = func(ctx context.Context, run int64, req *dynamicpb.Message) (*dynamicpb.Message, error) {
			if run == 1 {
				return nil, status.Error(codes.Unavailable, "the bank is down")
			}
			return reply(run, req), nil
		}
		s := serve(t, svc, newInterceptor(t, newStore(t), nil))
		req := chargeReq("acct-1", 500, "k-1") // the key in the request field
		_, _, err := s.charge(t, req)
		require.Equal(t, codes.Unavailable, status.Code(err))
		require.Equal(t, "the bank is down", status.Convert(err).Message(), "the handler's own status reaches the client")
		require.Empty(t, dedupgrpc.ReasonOf(err))

		resp, header, err := s.charge(t, req)
		require.NoError(t, err)
		requireReplayed(t, header, false)
		require.Equal(t, "ch-2", idOf(resp))
		resp, header, err = s.charge(t, req)
		require.NoError(t, err)
		requireReplayed(t, header, true)
		require.Equal(t, "ch-2", idOf(resp))
		require.Equal(t, int64(2), svc.runs.Load())
	})
}

// With KeepError, the errors it selects are kept and replayed like a
// response; the others still release the key.
func TestKeepError(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func(testing.TB) store.Store) {
		svc := &payments{}
		svc.fn = func(ctx context.Context, run int64, req *dynamicpb.Message) (*dynamicpb.Message, error) {
			if req.Get(chargeRequest.Fields().ByName("amount")).Int() < 0 {
				return nil, status.Error(codes.InvalidArgument, "negative amount")
			}
			return nil, status.Error(codes.Internal, "bug")
		}
		keep := func(method string, err error) bool {
			return method == chargeMethod && status.Code(err) == codes.InvalidArgument
		}
		s := serve(t, svc, newInterceptor(t, newStore(t), &dedupgrpc.Options{KeepError: keep}))
		for i, replayed := range []bool{false, true, true} {
			_, header, err := s.charge(t, chargeReq("acct-1", -5, "neg"))
			require.Equal(t, codes.InvalidArgument, status.Code(err), "call %d", i)
			require.Equal(t, "negative amount", status.Convert(err).Message())
			requireReplayed(t, header, replayed)
		}
		require.Equal(t, int64(1), svc.runs.Load())
		for range 2 {
			_, _, err := s.charge(t, chargeReq("acct-1", 5, "bug"))
			require.Equal(t, codes.Internal, status.Code(err))
		}
		require.Equal(t, int64(3), svc.runs.Load())
	})
}

// A panicking handler is recovered by the interceptor: Internal, the key
// released, the server still serving, the next call with the key runs.
func TestPanicReleasesTheKey(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func(testing.TB) store.Store) {
		svc := &payments{}
		svc.fn = func(ctx context.Context, run int64, req *dynamicpb.Message) (*dynamicpb.Message, error) {
			if run == 1 {
				panic("boom")
			}
			return reply(run, req), nil
		}
		logs := new(syncBuffer)
		cfg := &dedup.Config{Namespace: "payments", Logger: testLogger(t, logs)}
		s := serve(t, svc, newInterceptor(t, newStore(t), &dedupgrpc.Options{Config: cfg}))
		req := chargeReq("acct-1", 500, "")
		_, _, err := s.charge(t, req, dedupgrpc.MetadataKey, "k-1")
		require.Equal(t, codes.Internal, status.Code(err))
		require.Contains(t, status.Convert(err).Message(), "panicked")
		require.NotContains(t, status.Convert(err).Message(), "goroutine", "the stack is logged, not sent")
		require.Contains(t, logs.String(), "the handler panicked")
		require.Contains(t, logs.String(), "TestPanicReleasesTheKey", "the log has the panic's stack")

		resp, _, err := s.charge(t, req, dedupgrpc.MetadataKey, "k-1")
		require.NoError(t, err)
		require.Equal(t, "ch-2", idOf(resp))
		require.Equal(t, int64(2), svc.runs.Load())
	})
}

// Keys that break the rules are InvalidArgument before anything runs or
// is stored; a key of exactly 255 bytes is fine.
func TestBadKeys(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func(testing.TB) store.Store) {
		st := newStore(t)
		svc, s := setup(t, st, nil)
		req := chargeReq("acct-1", 500, "")
		bad := []struct {
			name string
			req  *dynamicpb.Message
			md   []string
		}{
			{"empty metadata", req, []string{dedupgrpc.MetadataKey, ""}},
			{"256 bytes", req, []string{dedupgrpc.MetadataKey, strings.Repeat("k", 256)}},
			{"sent twice", req, []string{dedupgrpc.MetadataKey, "a", dedupgrpc.MetadataKey, "b"}},
			{"unterminated quote", req, []string{dedupgrpc.MetadataKey, `"abc`}},
			{"quoted empty", req, []string{dedupgrpc.MetadataKey, `""`}},
			{"control character in the field", chargeReq("acct-1", 500, "ab\x01c"), nil},
			{"DEL in the field", chargeReq("acct-1", 500, "ab\x7f"), nil},
			{"C1 control in the field", chargeReq("acct-1", 500, "ab\u0085"), nil},
			{"field of 256 bytes", chargeReq("acct-1", 500, strings.Repeat("é", 128)), nil},
		}
		for _, c := range bad {
			_, _, err := s.charge(t, c.req, c.md...)
			requireStatus(t, err, codes.InvalidArgument, dedupgrpc.ReasonKeyInvalid)
		}
		require.Equal(t, int64(0), svc.runs.Load())
		require.Equal(t, 0, records(t, st))

		long := strings.Repeat("k", 255)
		_, _, err := s.charge(t, req, dedupgrpc.MetadataKey, long)
		require.NoError(t, err)
		_, header, err := s.charge(t, req, dedupgrpc.MetadataKey, `"`+long+`"`) // the same key, quoted
		require.NoError(t, err)
		requireReplayed(t, header, true)
		_, header, err = s.charge(t, req, dedupgrpc.MetadataKey, `"a\"b"`)
		require.NoError(t, err)
		requireReplayed(t, header, false)
		// The same key in the request field: the request differs by that field.
		_, _, err = s.charge(t, chargeReq("acct-1", 500, `a"b`))
		requireStatus(t, err, codes.FailedPrecondition, dedupgrpc.ReasonKeyReused)
		require.Equal(t, int64(2), svc.runs.Load())
	})
}

// A call without a key runs unprotected, unless RequireKey; nothing is
// stored for it.
func TestMissingKey(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func(testing.TB) store.Store) {
		st := newStore(t)
		svc, s := setup(t, st, nil)
		req := chargeReq("acct-1", 500, "")
		for range 2 {
			_, header, err := s.charge(t, req)
			require.NoError(t, err)
			requireReplayed(t, header, false)
		}
		require.Equal(t, int64(2), svc.runs.Load())
		require.Equal(t, 0, records(t, st))

		svc, s = setup(t, st, &dedupgrpc.Options{RequireKey: true})
		_, _, err := s.charge(t, req)
		requireStatus(t, err, codes.InvalidArgument, dedupgrpc.ReasonKeyMissing)
		require.Equal(t, int64(0), svc.runs.Load())
	})
}

// Methods leaves unselected methods untouched, key or not.
func TestMethodsSelectsWhatIsProtected(t *testing.T) {
	st := stores[0].new(t)
	only := func(m string) bool { return m == chargeMethod }
	svc, s := setup(t, st, &dedupgrpc.Options{Methods: only})
	for i := range 2 {
		got, header, err := s.echo(t, "hi", dedupgrpc.MetadataKey, "k-1")
		require.NoError(t, err)
		requireReplayed(t, header, false)
		require.Equal(t, []string{"hi #1", "hi #2"}[i], got)
	}
	require.Equal(t, int64(2), svc.echo.Load())
}

// A response of a generated type (registered in protoregistry.GlobalTypes)
// replays with the default Types, and with Types that do not hold it.
func TestReplayOfARegisteredType(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func(testing.TB) store.Store) {
		for _, opts := range []*dedupgrpc.Options{{SharedScope: true}, {Types: testTypes, SharedScope: true}} {
			ic, err := dedupgrpc.New(newStore(t), opts)
			require.NoError(t, err)
			svc := &payments{}
			s := serve(t, svc, ic)
			for _, replayed := range []bool{false, true} {
				got, header, err := s.echo(t, "hi", dedupgrpc.MetadataKey, "k-1")
				require.NoError(t, err)
				requireReplayed(t, header, replayed)
				require.Equal(t, "hi #1", got)
			}
			require.Equal(t, int64(1), svc.echo.Load())
			require.Equal(t, dedup.Stats{Processed: 1, Duplicates: 1}, ic.Stats())
		}
	})
}

// A response larger than the limit is not kept but completes the key: the
// first caller gets it, a replay is AlreadyExists saying why, and the
// handler never runs again. A kept response whose type cannot be resolved
// is Internal, and does not run the handler either.
func TestResponsesThatCannotBeReplayed(t *testing.T) {
	eachStore(t, func(t *testing.T, newStore func(testing.TB) store.Store) {
		st := newStore(t)
		svc := &payments{}
		svc.fn = func(ctx context.Context, run int64, req *dynamicpb.Message) (*dynamicpb.Message, error) {
			out := reply(run, req)
			out.Set(chargeReply.Fields().ByName("blob"), protoreflect.ValueOfBytes(make([]byte, 2000)))
			return out, nil
		}
		s := serve(t, svc, newInterceptor(t, st, &dedupgrpc.Options{Config: &dedup.Config{Namespace: "payments", MaxResultSize: 1000}}))
		resp, _, err := s.charge(t, chargeReq("acct-1", 500, "big"))
		require.NoError(t, err)
		require.Len(t, resp.Get(chargeReply.Fields().ByName("blob")).Bytes(), 2000)
		for range 2 {
			_, _, err = s.charge(t, chargeReq("acct-1", 500, "big"))
			requireStatus(t, err, codes.AlreadyExists, dedupgrpc.ReasonResponseNotKept)
			require.Contains(t, status.Convert(err).Message(), "over the limit of 1000")
		}
		require.Equal(t, int64(1), svc.runs.Load())

		svc2 := &payments{}
		s2 := serve(t, svc2, newInterceptor(t, st, &dedupgrpc.Options{Types: new(emptyTypes)}))
		_, _, err = s2.charge(t, chargeReq("acct-1", 500, "unknown-type"))
		require.NoError(t, err)
		_, _, err = s2.charge(t, chargeReq("acct-1", 500, "unknown-type"))
		require.Equal(t, codes.Internal, status.Code(err), "%v", err)
		require.Equal(t, int64(1), svc2.runs.Load())
	})
}

// emptyTypes resolves no type.
type emptyTypes struct{}

func (*emptyTypes) FindMessageByName(name protoreflect.FullName) (protoreflect.MessageType, error) {
	return nil, errors.New("not registered: " + string(name))
}

func (*emptyTypes) FindMessageByURL(url string) (protoreflect.MessageType, error) {
	return nil, errors.New("not registered: " + url)
}

// KeyCheck sees the key, principal and operation; its refusals map to
// PermissionDenied (ErrKeyForbidden), InvalidArgument, or its own status.
func TestKeyCheck(t *testing.T) {
	st := stores[0].new(t)
	type seen struct{ key, principal, operation string }
	var mu sync.Mutex
	var calls []seen
	check := func(ctx context.Context, key, principal, operation string) error {
		mu.Lock()
		calls = append(calls, seen{key, principal, operation})
		mu.Unlock()
		switch key {
		case "stolen":
			return errors.Join(errors.New("issued to mallory"), dedupgrpc.ErrKeyForbidden)
		case "forged":
			return errors.New("bad signature")
		case "custom":
			return status.Error(codes.ResourceExhausted, "too many keys")
		}
		return nil
	}
	svc, s := setup(t, st, &dedupgrpc.Options{KeyCheck: check})
	req := chargeReq("acct-1", 500, "")
	_, _, err := s.charge(t, req, "x-tenant", "alice", dedupgrpc.MetadataKey, "stolen")
	requireStatus(t, err, codes.PermissionDenied, dedupgrpc.ReasonKeyForbidden)
	_, _, err = s.charge(t, req, "x-tenant", "alice", dedupgrpc.MetadataKey, "forged")
	requireStatus(t, err, codes.InvalidArgument, dedupgrpc.ReasonKeyInvalid)
	require.Contains(t, status.Convert(err).Message(), "bad signature")
	_, _, err = s.charge(t, req, "x-tenant", "alice", dedupgrpc.MetadataKey, "custom")
	requireStatus(t, err, codes.ResourceExhausted, "")
	require.Equal(t, int64(0), svc.runs.Load())
	_, _, err = s.charge(t, req, "x-tenant", "alice", dedupgrpc.MetadataKey, "good")
	require.NoError(t, err)
	require.Equal(t, int64(1), svc.runs.Load())
	require.Equal(t, seen{"good", "alice", chargeMethod}, calls[len(calls)-1])
	require.Equal(t, 1, records(t, st))
}

// A Principal, Key or KeyCheck func that panics is Internal, and the server
// survives; a Principal error is Unauthenticated. Each is one event, whose
// Err says why.
func TestUserFuncsThatFail(t *testing.T) {
	st := stores[0].new(t)
	principal := func(ctx context.Context) (string, error) {
		switch v := metadata.ValueFromIncomingContext(ctx, "x-tenant"); {
		case len(v) == 0:
			return "", errors.New("who are you")
		case v[0] == "panic":
			panic("principal func")
		default:
			return v[0], nil
		}
	}
	var rec recorder
	svc, s := setup(t, st, &dedupgrpc.Options{Principal: principal, Config: &dedup.Config{Namespace: "payments", Observer: &rec}})
	req := chargeReq("acct-1", 500, "")
	_, _, err := s.charge(t, req, dedupgrpc.MetadataKey, "k")
	requireStatus(t, err, codes.Unauthenticated, "")
	require.ErrorIs(t, rec.one(t, "no principal").Err, dedup.ErrNoKey)
	_, _, err = s.charge(t, req, "x-tenant", "panic", dedupgrpc.MetadataKey, "k")
	requireStatus(t, err, codes.Internal, "")
	e := rec.one(t, "a panic")
	var pe *dedup.PanicError
	require.ErrorAs(t, e.Err, &pe, "the event says what panicked")
	require.Equal(t, "principal func", pe.Value)
	require.ErrorIs(t, e.Err, dedup.ErrInvalidKey)
	var re *dedupgrpc.RefusedError
	require.ErrorAs(t, e.Err, &re)
	require.Equal(t, codes.Internal, re.Code)
	_, _, err = s.charge(t, req, "x-tenant", "alice", dedupgrpc.MetadataKey, "k")
	require.NoError(t, err)
	require.Equal(t, int64(1), svc.runs.Load())
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
