package dedupgrpc

import (
	"context"
	"fmt"
	"iter"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/delivery"
)

// BrokerGRPC is the Origin.Broker of the interceptor's events.
const BrokerGRPC = "grpc"

// RefusedError is the Event.Err of a call the interceptor answered itself,
// without handing it to the receiver: no key with RequireKey, a bad key
// (the Key func failed, or the key breaks the rules of a key), a failing
// Principal, a key KeyCheck refused, a Key, Principal or KeyCheck func that
// panicked. Err says what it matches: dedup.ErrNoKey (no key, or no
// principal to scope it by), dedup.ErrInvalidKey (with the Key func's
// error, ErrKeyForbidden or KeyCheck's own error).
type RefusedError struct {
	// Code is the status code answered; Reason its ErrorInfo reason (a
	// Reason constant), empty for a status a user func returned.
	Code   codes.Code
	Reason string
	// Err is why.
	Err error
}

// Error returns the code, the reason and why.
func (e *RefusedError) Error() string {
	return fmt.Sprintf("dedupgrpc: refused with %s %s: %v", e.Code, e.Reason, e.Err)
}

// Unwrap returns Err.
func (e *RefusedError) Unwrap() error { return e.Err }

// refuse reports a call the interceptor answers with st itself to the
// Observer, with cause, and returns st: the one event of a call that never
// reaches the receiver.
func (ic *Interceptor) refuse(ctx context.Context, method string, st, cause error) error {
	if ic.s.cfg.Observer != nil {
		err := &RefusedError{Code: status.Code(st), Reason: ReasonOf(st), Err: cause}
		ic.rcv.Observe(ctx, delivery.Event{Origin: origin(ctx, method), Err: err, Decision: ic.rcv.Decide(dedup.Result[*reply]{}, err)})
	}
	return st
}

// Origin is the call's origin, for the receiver's Observer.
func (c *call) Origin() delivery.Origin { return origin(c.ctx, c.method) }

var _ delivery.Originer = (*call)(nil)

// origin is the Origin of a call of method: Broker "grpc", Source the full
// method, Header the incoming metadata but the idempotency-key. The key is
// in the event's Key (scoped), never in the Origin.
func origin(ctx context.Context, method string) delivery.Origin {
	md, _ := metadata.FromIncomingContext(ctx)
	return delivery.Origin{Broker: BrokerGRPC, Source: method, Header: metadataHeader(md)}
}

// metadataHeader is a call's incoming metadata as a delivery.Header, without
// the idempotency-key. Names are matched in any case (metadata keys are
// lower case).
type metadataHeader metadata.MD

// Get returns the first value of the named key.
func (h metadataHeader) Get(name string) (string, bool) {
	name = strings.ToLower(name)
	if name == MetadataKey {
		return "", false
	}
	if v := h[name]; len(v) > 0 {
		return v[0], true
	}
	return "", false
}

// All yields every key and value but the idempotency-key.
func (h metadataHeader) All() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for k, vs := range h {
			if k == MetadataKey {
				continue
			}
			for _, v := range vs {
				if !yield(k, v) {
					return
				}
			}
		}
	}
}
