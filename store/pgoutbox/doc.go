// Package pgoutbox is a transactional outbox in PostgreSQL: a handler
// writes the messages its effect consists of into an outbox table in its
// own transaction, beside its business rows and the completion of its
// dedup record (pgstore.TxHandler), and relays publish what committed,
// through an outbox.Publisher (dedupnats.OutboxPublisher on JetStream).
// Each message's id is derived from the incoming message's key and the
// message's name or position within the handler, and travels in the
// broker's producer id, so the copies a crash can cause are absorbed by
// the broker's duplicate window or the next consumer's receiver.
//
//	ob, err := pgoutbox.New(ctx, pool, &pgoutbox.Options{Migrate: true})
//	handler, err := pgstore.TxHandler(s, func(ctx context.Context, tx pgx.Tx, p Payment) (Receipt, error) {
//		if _, err := tx.Exec(ctx, `INSERT INTO payments (id, amount) VALUES ($1, $2)`, p.ID, p.Amount); err != nil {
//			return Receipt{}, err
//		}
//		w, err := ob.Writer(ctx, tx)
//		if err != nil {
//			return Receipt{}, err
//		}
//		_, err = w.Add(ctx, pgoutbox.Message{Name: "captured", Destination: "payments.captured", OrderingKey: p.Account, Body: event})
//		return Receipt{ID: p.ID}, err
//	}, nil)
//
// # A module of its own
//
// The outbox is a module beside store/pgstore, not part of it: the writer
// needs nothing of the store but the claim in the handler's context (the
// root module's store.ClaimFromContext) and a pgx.Tx, so it works inside
// TxHandler's transaction and inside one the user manages with
// Store.CompleteTx alike; and the relay is a long-running component with
// a lifecycle, options and tables of its own. A user of pgstore who has
// no outbox gets none of it, and the outbox can change and be released
// without the store. Its module requires the JetStream adapter and
// pgstore for its tests only: a program importing it builds pgx and the
// root module, no broker client.
//
// # The tables
//
// The outbox table holds one row per message (see SchemaSQL): its id
// (unique), the claim's key and the message's name, destination, ordering
// key, body and headers, the bucket its ordering key hashes into, when it
// was written and when it was sent. Beside it, Table_leases holds one row
// per bucket (the relay that holds it, and until when) and Table_relays
// one per running relay. New with Options.Migrate creates them.
//
// # Writing
//
// Writer.Add inserts a message in the handler's transaction: it is sent
// once the transaction commits, and never if it rolls back. Its id is
// outbox.MessageID(claim key, name), the name being Message.Name or the
// message's position among the writer's ("1", "2", ...), so a handler
// that runs again after a rollback or a crash writes the same ids. What
// the outbox cannot hold or a broker would refuse (no destination, a
// body over Options.MaxBodySize, headers over MaxHeaderSize or with names
// no broker takes, text that is not valid UTF-8, a name used twice in one
// transaction) is refused inside the handler, with an error matching
// ErrInvalidMessage and marked permanent: the transaction rolls back, and
// the incoming message is dead-lettered instead of being retried. With
// notifications on (the default), each Add also sends a NOTIFY with the
// message's bucket, delivered at commit, which wakes the relay that holds
// it.
package pgoutbox
