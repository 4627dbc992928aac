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
//	// In the same process or another, as many as wanted:
//	pub, err := dedupnats.NewOutboxPublisher(js, nil)
//	relay, err := pgoutbox.NewRelay(ob, pub, nil)
//	err = relay.Start(context.Background())
//	defer relay.Stop(stopCtx) // marks what was acknowledged, gives its buckets back
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
// The outbox table holds one row per message still to send (see
// SchemaSQL): its id (unique), the claim's key and the message's name,
// destination, ordering key, body and headers, the bucket its ordering
// key hashes into, and when it was written. Marking a message sent
// deletes its row. Beside it, Table_ids keeps the id of every message
// written, for RelayOptions.Retention after it was written and at least
// until it was sent, so that a handler that runs again does not write a
// sent message again; Table_dead holds the messages the broker refused
// for good, with their error; Table_leases holds one row per bucket (the
// relay that holds it, and until when) and Table_relays one per running
// relay. New with Options.Migrate creates them, and upgrades the tables
// of an earlier version in place (the ids of its messages copied, its
// sent rows kept until the retention, skipped by the relays).
//
// # Writing
//
// Writer.Add inserts a message in the handler's transaction, after
// claiming its id in Table_ids (a message whose id is there is not written
// again): it is sent once the transaction commits, and never if it rolls
// back. Its id is
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
//
// # Relaying
//
// A relay reads committed, unsent messages, hands them to its publisher
// and marks sent only those the broker acknowledged. A crash between the
// acknowledgement and the mark publishes them again, with the same ids: a
// duplicate, never a loss. Every step guarantees this much:
//
//	handler's transaction  the business rows, the record's completion and the messages commit together or not at all
//	relay                  each committed message is published until the broker acknowledges it; copies carry the same id
//	broker                 JetStream drops a copy within the stream's duplicate window (Nats-Msg-Id)
//	next consumer          its receiver, keyed on the message id (idstrategy.MessageID), has its effect once
//
// # Order
//
// The relays publish the messages of one ordering key in the order of
// their seq, the order of writing: a message written after the
// transaction of another committed goes out after it (within one
// transaction, in the order of Add). Two transactions that wrote
// messages of one key at the same time have no order of their own, and
// may go out either way (a handler that needs one takes a lock of the
// key's row first, which orders the transactions). The first copy of
// each message reaches the broker in this order; a copy published again
// may come later, which deduplication absorbs.
//
// Several relays keep this order because each bucket of keys (the
// ordering key's FNV-1a hash, modulo Options.Buckets) is published by
// the one relay that holds its lease. Taking rows with FOR UPDATE SKIP
// LOCKED alone would not: a relay that locked a key's first messages
// would be skipped by the next, which takes the key's later messages and
// may publish them first.
//
// Within a relay, a message is handed to the publisher only once every
// earlier message of its key was acknowledged (or refused for good), and
// never in one call with another of its key; a key's next message goes
// out as soon as its predecessor was acknowledged, while the other keys'
// messages flow: up to 16 calls and 1024 messages in flight. With a
// publisher that is an outbox.AckPublisher (dedupnats.OutboxPublisher,
// dedupkafka.NewAsyncOutboxPublisher), the relay calls PublishEach and
// takes each message's acknowledgement as it is reported, so that a
// key's next message does not wait for the rest of the call that carried
// its predecessor (up to 256 calls, still 1024 messages); with a
// Publisher only, for the call to return. A message the broker did not acknowledge holds back the later
// messages of its key (only of its key) until a later pump, after a
// backoff.
//
// A relay pumps: it reads a batch, publishes it, and reads the next one
// while the tail of the current one is still being published, in one
// statement batch with the mark of what was acknowledged so far (in one
// transaction: the fetch never reads what was just marked), leaving out
// what it holds and has not settled. Marks are committed without waiting
// for the disk (synchronous_commit off for that transaction): a database
// crash may lose the last ones, whose messages are published again, the
// copies a relay crash leaves; so does a mark that fails.
//
// A lease that runs out (a relay paused or cut off from the database for
// longer than RelayOptions.Lease) lets another relay take the bucket
// while the first may still publish what it read: both publish the key's
// messages from its first unsent one, in order, so the worst is a copy.
// A relay reads nothing once its lease ran out, stops reading at each
// renewal, and finds the lease lost at its next renewal.
//
// # Leases
//
// Each relay says it is alive (Table_relays) and, every third of its
// lease, renews the leases it holds and takes or gives back buckets to
// hold its share: the bucket count divided by the relays alive, rounded
// up. A relay that joins gets its share from the others within a lease;
// one that stops (Stop) gives its buckets back at once; one that was
// killed leaves them to the others once its leases end. Options.Buckets
// bounds how many relays can publish at once.
//
// # Waking, batches, backoff
//
// A relay LISTENs on the outbox's channel, on a connection of its own:
// the NOTIFY of a commit that wrote a message of one of its buckets
// wakes it at once. It polls every RelayOptions.PollInterval as well, so
// that a notification lost (its connection down, notifications off) costs
// at most that long. A fetch reads at most RelayOptions.BatchSize
// messages; a relay pumps until a fetch finds less than that. A pump that
// failed (the broker or the database down, a message refused) is
// followed by a wait that doubles from MinBackoff to MaxBackoff with
// each failure in a row, and the relay keeps renewing its leases
// meanwhile.
//
// # Refused for good
//
// A message the publisher says the broker refuses for good (an error
// matching outbox.ErrPermanent: a destination that can never be valid, a
// body over the broker's limit) is moved to Table_dead with its error,
// reported (outbox.EventDead with its id, RelayStats.Dead, an error log),
// and the later messages of its key go on: holding them back for ever
// would stop the key behind a message no retry can send. A team that
// prefers the order to the progress sets RelayOptions.HoldRefused. An
// operator sends a dead message again by moving it back (it goes out
// after the key's later messages):
//
//	WITH d AS (DELETE FROM dedup_outbox_dead WHERE id = $1 RETURNING *)
//	INSERT INTO dedup_outbox (id, claim_key, name, destination, ordering_key, key_hash, body, headers)
//	SELECT id, claim_key, name, destination, ordering_key, key_hash, body, headers FROM d;
//
// # Stopping, observing, cleanup
//
// Stop lets the calls in flight finish and marks what they acknowledged,
// gives the buckets back and returns once the relay's goroutines are
// gone; at its context's end it abandons them (what was published but
// not marked goes out again).
// Start's context ending without Stop is a stop nobody asked for,
// reported by Err (ErrStoppedUnasked). RelayOptions.Observer hears each
// mark (messages, duration, lag since the oldest was written), each
// message set aside as dead, each failure with the wait that follows,
// each change of the buckets held (acquired, released, lost) and each
// cleanup, as an outbox.Event; Stats counts the same. The ids of sent
// messages are deleted once they are older than RelayOptions.Retention,
// in bounded statements, every CleanupInterval; unsent messages and their
// ids never are, nor dead ones.
package pgoutbox
