package adapter

import (
	"context"

	"github.com/dedup-go/dedup"
)

// Fingerprinter is implemented by messages that can fingerprint their
// payload (a hash of the body, say). When the message type implements it,
// the receiver stores the first delivery's fingerprint with the record, and a
// later message with the same key but another fingerprint gets ErrKeyReused
// instead of someone else's result. An empty fingerprint is not checked.
type Fingerprinter interface {
	Fingerprint() (string, error)
}

// Heartbeater is implemented by messages whose broker wants to hear that a
// long handler is still working (JetStream's InProgress). The receiver calls
// Heartbeat each time it extends the message's lease; an error (or a panic)
// is logged and does not stop the handler.
type Heartbeater interface {
	Heartbeat(ctx context.Context) error
}

// Compile-time checks: dedup.Message has both abilities.
var (
	_ Heartbeater   = (*dedup.Message[struct{}])(nil)
	_ Fingerprinter = (*dedup.Message[struct{}])(nil)
)
