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
	//
	// A message the broker refuses for good (one it would refuse again
	// however often it is sent: a destination that can never be valid, a
	// body over the broker's limit) fails with an error matching
	// ErrPermanent (see Permanent), so that the relay sets it aside
	// instead of holding back its ordering key for ever. A refusal that a
	// change of the broker's configuration ends (no stream, queue or topic
	// there yet) is not permanent: the relay tries it again.
	Publish(ctx context.Context, msgs []Message) error
}

// ErrPermanent matches the error of a message the broker refused for
// good: sending it again cannot succeed. A relay sets such a message
// aside (pgoutbox keeps it as dead, with its error) and publishes the
// next messages of its ordering key, where it holds back the key behind
// any other failure. Publishers mark such errors with Permanent, or
// declare sentinels that wrap ErrPermanent.
var ErrPermanent = errors.New("outbox: refused for good")

// Permanent marks err as a refusal for good: the result matches both
// ErrPermanent and err with errors.Is (and err's types with errors.As).
// Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil || errors.Is(err, ErrPermanent) {
		return err
	}
	return &permanentError{err: err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string   { return e.err.Error() }
func (e *permanentError) Unwrap() []error { return []error{ErrPermanent, e.err} }

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
