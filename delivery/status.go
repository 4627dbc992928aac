package delivery

// Status is what the receiver did with a message.
type Status uint8

const (
	// StatusNone: nothing was done for this delivery; the error says why.
	StatusNone Status = iota
	// StatusProcessed: the handler ran and succeeded; Value is its result.
	StatusProcessed
	// StatusDuplicate: the message was processed before; Value is the first
	// result, replayed.
	StatusDuplicate
	// StatusInFlight: another delivery holds the key right now; retry after
	// RetryAfter.
	StatusInFlight
	// StatusBypassed: the store was unavailable and the receiver is
	// fail-open, so the handler ran without protection.
	StatusBypassed
)

// String returns the status's name.
func (s Status) String() string {
	switch s {
	case StatusProcessed:
		return "processed"
	case StatusDuplicate:
		return "duplicate"
	case StatusInFlight:
		return "in-flight"
	case StatusBypassed:
		return "bypassed"
	default:
		return "none"
	}
}

// Done reports whether the message's effect has happened (processed,
// duplicate or bypassed): such a delivery is acknowledged. Handle never
// returns an error with a done status.
func (s Status) Done() bool {
	return s == StatusProcessed || s == StatusDuplicate || s == StatusBypassed
}
