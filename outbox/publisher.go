package outbox

import (
	"context"
	"errors"
	"fmt"
)

// Publisher sends outbox messages to a broker and waits for the broker to
// acknowledge them. A relay calls it with messages that it may have in
// flight at once: no two messages of one call share a non-empty
// OrderingKey (the relay sends the next message of a key only once the
// previous one was acknowledged), so a publisher keeps no order among
// them and may send them all before waiting.
//
// Implementations must be safe for concurrent use, and must not keep msgs
// or their bodies after Publish returns. Package outboxtest checks one
// against its broker.
type Publisher interface {
	// Publish sends every message of msgs to its Destination, with its ID
	// where the broker's producer id lives and its Header, and returns
	// once the broker acknowledged each (stored it, as the broker's own
	// acknowledgement says: a JetStream PubAck, a RabbitMQ confirm of a
	// mandatory publish, Kafka's acks from all in-sync replicas) or ctx
	// ended.
	//
	// It returns nil when every message was acknowledged; a *BatchError
	// when some were and some not, saying which; any other error when
	// none is known to be. An empty msgs returns nil; a ctx that ended
	// before every acknowledgement arrived gives ctx's error (wrapped, or
	// in the BatchError's entries of the messages not acknowledged). A
	// message whose
	// acknowledgement was not received may have reached the broker
	// anyway: the relay publishes it again, with the same ID.
	Publish(ctx context.Context, msgs []Message) error
}

// BatchError is the error of a Publish of which some messages were
// acknowledged and some not.
type BatchError struct {
	// Errs has one entry per message of the call: nil when the broker
	// acknowledged it, else why not.
	Errs []error
}

// Error counts the failures and gives the first.
func (e *BatchError) Error() string {
	n, first := 0, error(nil)
	for _, err := range e.Errs {
		if err != nil {
			if first == nil {
				first = err
			}
			n++
		}
	}
	return fmt.Sprintf("outbox: %d of %d messages not acknowledged: %v", n, len(e.Errs), first)
}

// Unwrap returns the failures, so errors.Is and errors.As look at each.
func (e *BatchError) Unwrap() []error {
	var out []error
	for _, err := range e.Errs {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// Acknowledged reports, for a Publish of n messages that returned err,
// which of them the broker acknowledged: all when err is nil, those a
// *BatchError of n entries says, none for any other error.
func Acknowledged(err error, n int) []bool {
	acked := make([]bool, n)
	var be *BatchError
	switch {
	case err == nil:
		for i := range acked {
			acked[i] = true
		}
	case errors.As(err, &be) && len(be.Errs) == n:
		for i, e := range be.Errs {
			acked[i] = e == nil
		}
	}
	return acked
}
