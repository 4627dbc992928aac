package dedup

import "context"

// Fingerprinter is implemented by messages that can fingerprint their
// payload (a hash of the body, say). When the message type implements it,
// the receiver stores the first delivery's fingerprint with the record, and a
// later message with the same key but another fingerprint gets ErrKeyReused
// instead of someone else's result.
type Fingerprinter interface {
	Fingerprint() (string, error)
}

// Heartbeater is implemented by messages whose broker wants to hear that a
// long handler is still working (JetStream's InProgress). The receiver calls
// Heartbeat each time it extends the message's lease, from the heartbeat's
// goroutine; an error is logged and does not stop the handler.
type Heartbeater interface {
	Heartbeat(ctx context.Context) error
}
