package outbox

import "context"

// AckPublisher is a Publisher that reports each message's acknowledgement
// as it arrives, rather than once the whole call is over: a relay then
// sends a key's next message as soon as its predecessor's own
// acknowledgement arrived, not when the slowest message of the call that
// carried it did. A relay finds it by type assertion on its Publisher and
// calls PublishEach instead of Publish; Publish stays what it is, for
// callers that want one answer per call.
//
// What Publisher says of the calls a relay makes holds for PublishEach:
// no two messages of one call share a non-empty OrderingKey, the
// implementation is safe for concurrent use and keeps neither msgs nor
// their bodies after PublishEach returns.
type AckPublisher interface {
	Publisher

	// PublishEach sends every message of msgs as Publish does, and calls
	// ack(i, err) for message msgs[i] once its outcome is known: err nil
	// once the broker acknowledged it (as Publish counts an
	// acknowledgement), else why not, matching ErrPermanent when the
	// broker refused it for good (see Publisher). It returns once every
	// message was reported, or once ctx ended.
	//
	// ack is called at most once per message, in any order (the order of
	// the acknowledgements, not that of msgs), from any goroutine,
	// possibly from several at once, and never after PublishEach
	// returned. It does not block: a relay only records the report. A
	// message of no ack call when PublishEach returns is not
	// acknowledged: it fails with the error PublishEach returns (ctx's
	// error when ctx ended first), and is published again, with the same
	// ID: it may have reached the broker anyway.
	// PublishEach returns nil only when it reported every message; an
	// empty msgs returns nil at once.
	PublishEach(ctx context.Context, msgs []Message, ack func(i int, err error)) error
}
