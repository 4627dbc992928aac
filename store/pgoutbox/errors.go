package pgoutbox

import (
	"errors"
	"fmt"

	"github.com/dedup-go/dedup/store"
)

// Errors of this package. Match them with errors.Is.
var (
	// ErrInvalidMessage: Writer.Add refused a message (no destination, a
	// body or headers over the limits, text that is not valid UTF-8, a
	// name used twice). The error is also marked permanent
	// (dedup.IsPermanent): returned from the handler, it rolls the
	// transaction back and the incoming message is dead-lettered at once,
	// as no retry would write it.
	ErrInvalidMessage = errors.New("pgoutbox: invalid message")

	// ErrMisconfigured: the database does not fit the outbox (a table, a
	// column or the lease rows missing). It matches store.ErrInvalidConfig.
	ErrMisconfigured = fmt.Errorf("pgoutbox: the database does not fit the outbox (%w)", store.ErrInvalidConfig)

	// ErrStarted: Start was called on a relay already started (a stopped
	// one cannot start again: make a new one).
	ErrStarted = errors.New("pgoutbox: relay already started")

	// ErrNotStarted: Stop was called before Start.
	ErrNotStarted = errors.New("pgoutbox: relay not started")

	// ErrStoppedUnasked: the relay stopped without Stop: Start's context
	// ended. Err returns it, wrapping context.Cause of that context,
	// logged at error level.
	ErrStoppedUnasked = errors.New("pgoutbox: relay stopped without Stop")
)
