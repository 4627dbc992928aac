package redrive

import "time"

// Marking says how a dead letter tells where it came from.
type Marking int

const (
	// Unmarked: neither the adapters' Dedup-* headers nor the broker's own
	// dead-lettering headers. Never republished.
	Unmarked Marking = iota
	// ByAdapter: a dead letter a dedup adapter published, with Dedup-Reason
	// and the headers naming its origin.
	ByAdapter
	// ByBroker: a dead letter of RabbitMQ's own dead-lettering (a queue's
	// x-dead-letter-exchange, where the adapter's DropPoison rejects to):
	// only x-death says where it came from; no key, no dedup reason.
	ByBroker
)

// Letter is one dead letter as a Source read it.
type Letter struct {
	// ID names the letter in its dead-letter destination: a stream
	// sequence, a delivery of the pass, a partition and offset.
	ID string
	// Marking says what the letter's headers tell.
	Marking Marking
	// Key is the record's store key (Dedup-Key: namespace, ':', id), or ""
	// when the letter has none.
	Key string
	// Reason is the dedup reason of an adapter's letter (Dedup-Reason), or
	// the broker's (x-death's reason) of a broker's one.
	Reason string
	// Error is the failure's text (Dedup-Error), when the adapter gave it.
	Error string
	// To names the original destination for people: "subject orders.new",
	// "queue orders", "topic orders partition 2". Empty when the letter does
	// not say (then it is never republished).
	To string
	// Time is when the letter was dead-lettered, zero when the broker does
	// not say.
	Time time.Time
	// Truncated, when not empty, says how the adapter cut the letter's
	// body to fit its destination: the original is lost, and a cut copy is
	// never republished.
	Truncated string

	// MessageID is the original's message id, when it had one: its
	// Nats-Msg-Id, AMQP message-id property or Kafka Message-Id header.
	MessageID string
	// Header reads a header of the letter, and Body is its body: with
	// MessageID, what Options.KeyFrom derives a broker's letter's key from.
	Header func(name string) (string, bool)
	Body   []byte

	// handle is the Source's own.
	handle any
}
