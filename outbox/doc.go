// Package outbox is the broker-neutral contract of the transactional
// outbox: what a handler's outgoing message is ([Message]), how its id is
// derived from the claim the handler holds ([MessageID]), how a relay hands
// committed messages to a broker ([Publisher]), and what a relay reports
// ([Observer], [Event]).
//
// A handler whose effect is a database write and a message for the next
// service writes both in one transaction: the business rows, and the
// message in an outbox table (store/pgoutbox on PostgreSQL). A relay reads
// the committed messages and publishes them; only the broker's
// acknowledgement marks one sent. A crash anywhere costs a duplicate,
// never a loss, and every copy carries the same id, so that the broker's
// duplicate window or the next consumer's receiver (keyed on the
// producer's id: idstrategy.MessageID, or MessageHeader) absorbs it.
//
// # Ids
//
// A message's id is derived from the incoming message's key (the claim of
// the handler that wrote it, namespace included) and the message's name
// or position within that handler: a handler that runs again (after a
// rollback, a crash, a lease taken over) writes the same ids, and two
// receivers (two namespaces) handling the same incoming message write
// different ones. See [MessageID]; dedup.OutgoingID gives a handler the id
// of a message it publishes itself, without an outbox.
//
// # Publishers
//
// The package imports no broker client, nor anything of the adapters:
// each adapter module implements [Publisher] (dedupnats.OutboxPublisher
// on JetStream), and a relay depends on the interface only. A publisher
// that can report each message's acknowledgement as it arrives also
// implements [AckPublisher], which a relay finds by type assertion.
// Package outboxtest checks an implementation against a real broker.
package outbox
