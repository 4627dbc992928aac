package cli

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/dedup-go/dedup"
	dedupgrpc "github.com/dedup-go/dedup/middleware/grpc"
	deduphttp "github.com/dedup-go/dedup/middleware/http"
)

// TestIdempotencyKey: the record the HTTP middleware (behind a real HTTP
// server) or the gRPC interceptor made for a principal's key is found and
// forgotten by get and forget given the namespace, the principal, the
// operation and the key, on Redis and PostgreSQL; after the forget, the
// key's next request runs its handler again.
func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	for _, mk := range []struct {
		name string
		new  func(*testing.T) backend
	}{{"redis", singleBackend}, {"postgres", postgresBackend}} {
		t.Run(mk.name, func(t *testing.T) {
			t.Parallel()
			b := mk.new(t)
			t.Run("http", func(t *testing.T) {
				t.Parallel()
				testIdempotencyHTTP(t, b)
			})
			t.Run("grpc", func(t *testing.T) {
				t.Parallel()
				testIdempotencyGRPC(t, b)
			})
		})
	}
}

// idemCase is a middleware's scope and the flags that name its record.
type idemCase struct {
	name      string
	principal string // "": SharedScope
	operation string // the HTTP middleware's Options.Operation: r.Pattern when set
	key       string
	maxID     int      // the receiver's MaxIDLength; 0: the default
	flags     []string // beyond --namespace, --principal and --idempotency-key
	want      string   // the record's id, when the case pins it literally
}

var idemLong = strings.Repeat("t", 600) // a principal whose scope is hashed

func testIdempotencyHTTP(t *testing.T, b backend) {
	s, flags := b.fresh(t)
	for i, c := range []idemCase{
		{name: "principal", principal: "acme", key: "pay-http-1", want: "4:acme0:pay-http-1"},
		{name: "operation", principal: "acme", operation: "POST /orders/{id}/pay", key: "pay-http-1",
			flags: []string{"--operation", "POST /orders/{id}/pay"}, want: "4:acme21:POST /orders/{id}/paypay-http-1"},
		{name: "shared scope", key: "pay-http-1", want: "0:0:pay-http-1"},
		{name: "hashed", principal: idemLong, key: "pay-http-1"},
		{name: "own MaxIDLength", principal: strings.Repeat("t", 100), key: strings.Repeat("k", 255), maxID: 299,
			flags: []string{"--max-id-length", "299"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := fmt.Sprintf("payments-http%d", i)
			opts := &deduphttp.Options{Config: &dedup.Config{Namespace: ns, MaxIDLength: c.maxID}}
			if c.principal == "" {
				opts.SharedScope = true
			} else {
				opts.Principal = func(r *http.Request) string { return r.Header.Get("X-Tenant") }
			}
			if c.operation != "" {
				opts.Operation = func(r *http.Request) string { return r.Pattern }
			}
			m, err := deduphttp.New(s, opts)
			require.NoError(t, err)
			var runs atomic.Int32
			mux := http.NewServeMux()
			mux.Handle("POST /orders/{id}/pay", m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, `{"charge":%d}`, runs.Add(1))
			})))
			srv := httptest.NewServer(mux)
			t.Cleanup(srv.Close)
			tr := &http.Transport{}
			t.Cleanup(tr.CloseIdleConnections)
			client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
			pay := func() (status int, replayed bool) {
				r, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/orders/o-1/pay", strings.NewReader(`{"cents":1250}`))
				require.NoError(t, err)
				r.Header.Set("Idempotency-Key", c.key)
				r.Header.Set("X-Tenant", c.principal)
				resp, err := client.Do(r)
				require.NoError(t, err)
				require.NoError(t, resp.Body.Close())
				return resp.StatusCode, resp.Header.Get(deduphttp.HeaderReplayed) == "true"
			}
			status, _ := pay()
			require.Equal(t, http.StatusCreated, status)

			want := ns + ":" + deduphttp.RecordID(c.principal, c.operation, c.key, c.maxID)
			if c.want != "" {
				require.Equal(t, ns+":"+c.want, want, "the documented format")
			}
			id := with(flags, append([]string{"--namespace", ns, "--principal", c.principal, "--idempotency-key", c.key}, c.flags...)...)
			checkIdempotencyKey(t, s, id, want, c.principal != "")

			status, replayed := pay()
			assert.Equal(t, http.StatusCreated, status)
			assert.False(t, replayed, "a forgotten key runs again")
			assert.Equal(t, int32(2), runs.Load(), "the handler ran again")
		})
	}
}

func testIdempotencyGRPC(t *testing.T, b backend) {
	s, flags := b.fresh(t)
	for i, c := range []idemCase{
		{name: "principal", principal: "acme", key: "pay-grpc-1", want: "4:acme:pay-grpc-1"},
		{name: "quoted", principal: "acme", key: `pay "2"`},
		{name: "shared scope", key: "pay-grpc-1", want: "0::pay-grpc-1"},
		{name: "hashed", principal: idemLong, key: "pay-grpc-1"},
		{name: "own MaxIDLength", principal: "acme", key: strings.Repeat("k", 100), maxID: 80,
			flags: []string{"--max-id-length", "80"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := fmt.Sprintf("payments-grpc%d", i)
			opts := &dedupgrpc.Options{Config: &dedup.Config{Namespace: ns, MaxIDLength: c.maxID}}
			if c.principal == "" {
				opts.SharedScope = true
			} else {
				opts.Principal = func(context.Context) (string, error) { return c.principal, nil }
			}
			ic, err := dedupgrpc.New(s, opts)
			require.NoError(t, err)
			var runs atomic.Int32
			pay := func() {
				// The key as a client sends it: quoted when it holds a quote.
				md := c.key
				if strings.Contains(md, `"`) {
					md = `"` + strings.ReplaceAll(md, `"`, `\"`) + `"`
				}
				ctx := metadata.NewIncomingContext(t.Context(), metadata.Pairs(dedupgrpc.MetadataKey, md))
				_, err := ic.Unary(ctx, wrapperspb.String("order 1"), &grpc.UnaryServerInfo{FullMethod: "/shop.Payments/Pay"},
					func(context.Context, any) (any, error) { runs.Add(1); return wrapperspb.String("paid"), nil })
				require.NoError(t, err)
			}
			pay()

			want := ns + ":" + dedupgrpc.RecordID(c.principal, c.key, c.maxID)
			if c.want != "" {
				require.Equal(t, ns+":"+c.want, want, "the documented format")
			}
			id := with(flags, append([]string{"--middleware", "grpc", "--namespace", ns, "--principal", c.principal, "--idempotency-key", c.key}, c.flags...)...)
			checkIdempotencyKey(t, s, id, want, c.principal != "")

			pay()
			assert.Equal(t, int32(2), runs.Load(), "a forgotten key runs again")
		})
	}
}

// checkIdempotencyKey: get with the flags id finds the completed record
// want (and, scoped, not another principal's), and forget forgets it.
func checkIdempotencyKey(t *testing.T, s seedStore, id []string, want string, scoped bool) {
	t.Helper()
	r := run(t, with([]string{"get", "-o", "json"}, id...)...)
	require.Equal(t, 0, r.code, "get: %s", r.err)
	recs := lines[recordJSON](t, r.out)
	require.Len(t, recs, 1)
	assert.Equal(t, want, recs[0].Key)
	assert.Equal(t, "completed", recs[0].State)

	if scoped {
		other := append([]string(nil), id...)
		for i, a := range other {
			if a == "--principal" {
				other[i+1] = "globex"
			}
		}
		r = run(t, with([]string{"get"}, other...)...)
		assert.Equal(t, ExitNotFound, r.code, "another principal's key: %s", r.err)
	}

	r = run(t, with([]string{"forget", "-o", "json"}, id...)...)
	require.Equal(t, 0, r.code, "forget: %s", r.err)
	outs := lines[forgetJSON](t, r.out)
	require.Len(t, outs, 1)
	assert.Equal(t, want, outs[0].Key)
	assert.Equal(t, outcomeForgotten, outs[0].Outcome)
	assert.False(t, exists(t, s, want), "forgotten")
}

// TestGRPCRecordID: the tool's copy of the gRPC interceptor's record id
// (it does not import dedupgrpc) is dedupgrpc.RecordID, spelled out and
// hashed.
func TestGRPCRecordID(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		principal, key string
		maxID          int
	}{
		{"acme", "pay-1", 512},
		{"", "pay-1", 512},
		{"a:b", "c:d", 512},
		{"caf\u00e9", "k", 512},
		{"caf\xe9", "k", 512}, // not UTF-8: hashed
		{strings.Repeat("p", 505), "k", 512},
		{strings.Repeat("p", 506), "k", 512}, // one byte over: hashed
		{"acme", strings.Repeat("k", 255), 71},
		{"acme", "k", 1},
	} {
		assert.Equal(t, dedupgrpc.RecordID(c.principal, c.key, c.maxID), grpcRecordID(c.principal, c.key, c.maxID), "%q %q %d", c.principal, c.key, c.maxID)
	}
}

// The flags of a middleware's record are usage errors (exit 2) when they
// are incomplete, contradict each other or the command's other ways of
// naming records, before any store is asked.
func TestIdempotencyKeyUsage(t *testing.T) {
	t.Parallel()
	dead := []string{"--redis", "redis://" + closedPort(t)}
	id := []string{"--namespace", "payments", "--principal", "acme", "--idempotency-key", "pay-1"}
	for _, args := range [][]string{
		{"get", "--principal", "acme"},
		{"get", "--operation", "POST /pay", "payments:1"},
		{"get", "--middleware", "grpc", "payments:1"},
		{"get", "--max-id-length", "300", "payments:1"},
		{"get", "--namespace", "payments", "--idempotency-key", "pay-1"}, // no --principal
		{"get", "--principal", "acme", "--idempotency-key", "pay-1"},     // no --namespace
		{"get", "--namespace", "payments", "--principal", "acme", "--idempotency-key", ""},
		with(id, "get", "--middleware", "soap"),
		with(id, "get", "--middleware", "grpc", "--operation", "/shop.Payments/Pay"),
		with(id, "get", "--max-id-length", "0"),
		with(id, "get", "payments:1"),
		with(id, "forget", "payments:1"),
		with(id, "forget", "--state", "failed"),
		{"forget", "--principal", "acme"},
		{"get"},
		{"forget"},
	} {
		r := run(t, with(dead, args...)...)
		assert.Equal(t, ExitUsage, r.code, "%q: %s", args, r.err)
		assert.Contains(t, r.err, "dedupctl --help", "%q", args)
		assert.NotContains(t, r.err, "127.0.0.1", "%q: refused before the store is asked", args)
	}
	// A store that does not answer is an error (1): the flags are fine.
	r := run(t, with(dead, with(id, "--timeout", "300ms", "get")...)...)
	assert.Equal(t, ExitError, r.code, r.err)
}
