package dedup

import (
	"context"
	"errors"
	"fmt"

	"github.com/dedup-go/dedup/outbox"
	"github.com/dedup-go/dedup/store"
)

// ErrNoClaim: a call that needs the claim of the handler running under its
// context (OutgoingID) was made outside a handler.
var ErrNoClaim = errors.New("dedup: no claim in the context (not called from a handler)")

// OutgoingID returns the id of the message named name that the handler
// running under ctx publishes: derived from the key of the claim it holds
// (the receiver's namespace and the incoming message's id) and name, by
// outbox.MessageID. A handler that runs again for the same message, after
// a failure, a crash or a lease taken over, gets the same ids, so that
// the next consumer's deduplication (keyed on the producer's id:
// idstrategy.MessageID) absorbs what it publishes twice:
//
//	func capture(ctx context.Context, m *dedup.Message[Payment]) (Receipt, error) {
//		id, err := dedup.OutgoingID(ctx, "payment-captured")
//		if err != nil {
//			return Receipt{}, err
//		}
//		// publish with Nats-Msg-Id: id (AMQP MessageId, a Kafka Message-Id header)
//	}
//
// name must be the same on every run and unique among the handler's
// messages: a fixed name, an id from the message, or a position in a
// fixed order ("1", "2", ...). It fails with ErrNoClaim outside a handler
// (or in a delivery run unprotected, fail-open), and with ErrInvalidKey
// for an empty name.
func OutgoingID(ctx context.Context, name string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("%w: the outgoing message's name is empty", ErrInvalidKey)
	}
	held, ok := store.ClaimFromContext(ctx)
	if !ok {
		return "", ErrNoClaim
	}
	return outbox.MessageID(held.Key, name), nil
}
