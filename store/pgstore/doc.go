// Package pgstore is a [store.Store] in a PostgreSQL table, on pgx/v5's
// [pgxpool.Pool], whose records can be completed inside the handler's own
// transaction: the business writes and the record commit together or not
// at all, so each message has its effect exactly once, with no unique
// index of the business table's own. It depends on the contract package
// store only, not on the receiver.
//
//	pool, err := pgxpool.New(ctx, "postgres://app@db/app")
//	s, err := pgstore.New(ctx, pool, &pgstore.Options{Migrate: true}) // creates the table; or apply the schema in your migrations
//	// New pings (store.ErrUnavailable when down) and checks the table and the role's rights (ErrMisconfigured)
//	handler, err := pgstore.TxHandler(s, func(ctx context.Context, tx pgx.Tx, o Order) (Receipt, error) {
//		_, err := tx.Exec(ctx, `INSERT INTO orders (id, amount) VALUES ($1, $2)`, o.ID, o.Amount)
//		return Receipt{OrderID: o.ID}, err
//	}, nil)
//	rcv, err := dedup.NewReceiver(s, key, handler, &dedup.Config{Namespace: "orders"})
//
// # The table
//
// One row per record, keyed by the receiver's key (namespace, colon, id),
// with an index on its expiry (see [Store.SchemaSQL], and the README for
// the SQL). [Options.Table] names it, schema-qualified or not.
//
// A row keeps, for an operator's [Store.Get] and [Store.Scan], the token
// of the record's last claim, when its first claim was made (created_at,
// kept through takeovers, releases and retries) and when it completed or
// its last attempt failed (completed_at), by the database's clock. A
// table made by 0.1.0 lacks the last two columns: [Store.Migrate] (and
// [Options.Migrate]) adds them in place, and [Store.SchemaSQL] holds the
// ALTER TABLE for your own migrations. Its rows keep working; their times
// read as zero until the key is claimed afresh. A table made before step
// records lacks the steps column, added the same way.
//
// # Step records
//
// The Store is a [store.StepStore]: the step records of a handler's named
// steps (dedup.Step) are kept in the record's own row, in a nullable
// steps bytea column, NULL while the record has none. It holds a log of
// the store's own: a format byte, then each saved step as its name and
// value, each prefixed with its length. [Store.SaveStep] appends one
// entry in one UPDATE fenced by the claim's token, as Complete is, without
// reading the column first; a name saved again is appended again, and its
// last entry wins (so the column grows with every save, a replaced name's
// included, until the record is gone). Names and values are kept
// as bytes: a name may hold any valid UTF-8, NUL included, which neither
// text nor jsonb could hold. [Store.LoadSteps] is one fenced SELECT.
//
// Living in the row, step records are kept, expire, are cleaned up and
// deleted with it. A claim that makes a fresh record (an absent key, or a
// gone row reused) starts without; a takeover of a failed record or of a
// claim whose lease ended, a claim granted again to its own token, a
// Release and a Complete keep them. Get and Scan return them; Acquire
// does not read them. A message whose handler runs no step costs what it
// did: the same statements and round trips, none added.
//
// Inside the transaction of [TxHandler], a step is recorded in that
// transaction: TxHandler puts the transaction on the context it gives
// the function, and SaveStep and LoadSteps of the handler's claim run in
// it. SaveStep checks the claim there at once (a fenced read, so a lost
// claim is store.ErrLeaseLost at once) and keeps the step until the
// completion, whose UPDATE writes it: the steps commit with the business
// writes and the record, or not at all, and the record's row is not
// locked from the first step to the commit, so the receiver's heartbeat
// goes on extending the lease while the function runs. LoadSteps reads in
// the transaction and adds the steps saved in it. When TxHandler rolls
// the transaction back to run the function again (a serialization
// failure or a deadlock), it first calls the claim's StepsRolledBack, so
// that the receiver forgets the steps the rolled back run recorded. A
// handler that manages its own transaction and completes it with
// [Store.CompleteTx] names it with [Store.WithTx] and passes the context
// WithTx returns to its steps and to CompleteTx; without WithTx its steps
// are recorded at once, outside the transaction, and a transaction
// committed without CompleteTx keeps none of those saved under WithTx.
// Steps within a savepoint (a nested pgx.Tx) are kept until the
// completion even when the savepoint is rolled back.
//
// # What it guarantees
//
// It passes [github.com/dedup-go/dedup/store/storetest] in pgx's default
// query exec mode and in the two that PgBouncer's transaction pooling
// needs, and keeps every rule of the contract:
//
//   - The claim is one autocommit statement, INSERT ... ON CONFLICT (key)
//     DO UPDATE, which takes the record over when it is gone, failed, or
//     processing under an ended lease (and the fingerprints agree), and
//     otherwise writes it back unchanged, RETURNING the record as its row
//     lock found it: never check-then-set, no advisory lock. Of any number
//     of processes delivering a message at once, exactly one claims it;
//     the others wait on its row lock for the moment it takes, then see
//     its claim. Contention, however heavy and however short the leases,
//     ends in a claim, a duplicate or an in-flight answer, never in an
//     error: a serialization failure or a deadlock (40001, 40P01, on a
//     server whose default isolation level is above READ COMMITTED) runs
//     the store's statement again, within Options.Timeout.
//   - A duplicate of a completed record, or a delivery of a key held under
//     a live lease, is answered by the same statement without locking or
//     writing anything (its snapshot shows the record settled, so the
//     INSERT inserts nothing): no commit record to flush to the WAL.
//   - The database's clock (clock_timestamp(), read once per statement)
//     is the only clock of leases, expiry and the records' creation and
//     completion times; a lease has ended once it reads LeaseUntil, a
//     record is gone once it reads its expiry.
//   - Every update is fenced: WHERE token = the claim's token. Complete,
//     Release and Extend with a token that no longer holds the key (taken
//     over, deleted, settled) fail with [store.ErrLeaseLost] and change
//     nothing. Until another claim takes the key over, a call with the
//     token of an ended lease still succeeds with its full effect.
//   - Complete with the token that completed the record succeeds again
//     and changes nothing: the first result and expiry stay.
//   - Keys the table cannot hold are refused with [store.ErrInvalidKey]:
//     over [MaxKeyLength] bytes, not valid UTF-8, or holding a NUL byte.
//     Results and fingerprints are bytes, kept as given; a failure's error
//     text is kept as valid UTF-8 without NUL bytes, up to 4 KiB.
//
// # Completion inside the user's transaction
//
// [TxHandler] wraps a function of a pgx.Tx into a handler: for each
// message it begins a transaction, runs the function, completes the
// record in the same transaction with one UPDATE fenced by the claim's
// token, and commits; the receiver then does not complete again. A crash
// anywhere leaves either both the business writes and the completed
// record (a redelivery is a duplicate) or neither (the redelivery takes
// the ended lease over and runs again). A stale worker, whose lease ended
// and whose key another delivery took over, gets store.ErrLeaseLost from
// the completion and its transaction is rolled back, business writes
// included. The connection breaking inside the transaction (in the
// function's own statements too) is the store being unavailable, not the
// function failing: the error matches store.ErrUnavailable and the
// claim's attempt is given back (see [TxHandler]). [Store.CompleteTx] is
// the same completion for a transaction you manage yourself.
//
// Isolation levels: under READ COMMITTED (PostgreSQL's default, and the
// recommended level), a delivery that tries to take the key over while
// the transaction holds the completed row waits on the row lock, then
// sees the record completed (or, after a rollback, takes it over). Under
// REPEATABLE READ and SERIALIZABLE, a concurrent update of the record
// after the transaction's snapshot (the receiver's heartbeat extending
// the lease of a handler that runs longer than a third of it, or a
// takeover) fails the completion with a serialization failure, SQLSTATE
// 40001; TxHandler then runs the function again in a new transaction
// ([TxOptions].Retries, 3 by default), so the function must be safe to
// rerun. Under any level, the completion runs last, so the row is locked
// only from the completion to the commit.
//
// # Failures and timeouts
//
// [New] (and [Store.Migrate]) check at start-up that the table fits the
// store: its schema and the table exist, with the store's columns and
// unique key, and the role may use the schema and SELECT, INSERT, UPDATE
// and DELETE the table's rows. Whatever does not fit is named in an error
// matching [ErrMisconfigured] (and store.ErrInvalidConfig). A table
// dropped or a privilege revoked at run time gives the same error
// (PostgreSQL's SQLSTATE class 42 and 3F000), never store.ErrUnavailable:
// the database answered, retrying will not help, and a receiver must not
// run handlers unprotected (fail-open) for it.
//
// Every other error of the database (a refused connection, a timeout, a
// server error) is a [*store.OpError], which matches
// [store.ErrUnavailable], so the receiver applies its fail-closed or
// fail-open policy; a cancelled context is reported as the context's
// error. [Options.Timeout] bounds every statement, connecting included,
// so a dead database never holds a handler longer. Behind PgBouncer in
// transaction pooling mode set [Options.QueryExecMode] to
// pgx.QueryExecModeExec.
//
// # Failover
//
// With a primary and a streaming standby, a failover doubles no effect
// when the standby is synchronous and the lease is longer than the
// failover, clients' switch-over included. A double can follow one only
// when:
//
//   - the standby is asynchronous (synchronous_standby_names empty, or
//     synchronous_commit = local or off): the primary acknowledged commits
//     that the promoted standby never received. A lost completion leaves
//     the claim processing, and a copy takes it over once the lease ends
//     and runs again; a lost claim makes its completion fail with
//     store.ErrLeaseLost, and the next copy claims the key afresh;
//   - the lease is shorter than the failover (the HA manager noticing the
//     death, the promotion) plus the clients' switch-over (reaching the
//     new primary): completions in flight give up when the lease ends
//     (result not stored), and a copy takes the claim over.
//
// A claim whose commit reached the standby but whose answer was lost with
// the primary is granted again to the receiver that asks again with its
// token (store.AcquireRequest.Token): a delay of one store retry. A copy
// delivered to another process meanwhile waits for the lease to end, then
// takes it over. A delay, never a double.
//
// The clients find the new primary when their connection string lists
// every server with target_session_attrs=read-write (pgx and libpq try
// them in order and skip a standby), or through an address the HA manager
// moves. Give it connect_timeout (2 seconds, say): without one, a new
// connection waits on a dead host for as long as the operating system
// tries (about two minutes on Linux) before it tries the next server; New
// logs a warning for a connection string that lists several servers
// without it. Give the pool room: when a statement times out against a
// server that went silent, pgx closes that connection in the background
// for up to 15 seconds while it keeps its place in the pool, so MaxConns
// should be well above the number of calls the store makes at once. A
// standby is read-only until it is promoted: its errors (SQLSTATE 25006)
// match store.ErrUnavailable, so deliveries are refused and retried, never
// dead-lettered. The failover test of this package (a synchronous standby
// 2ms away, the primary's host dying mid-stream) holds 0 doubles and 0
// lost messages.
//
// # Batches and inspection
//
// The Store is a [store.BatchStore]: a batch is claimed in one statement
// (rows locked in key order, so concurrent batches never deadlock on each
// other) and completed in one. It is a [store.Inspector]: Get, Delete,
// DeleteIf (one statement that locks the row, decides on it and deletes
// it, by the database's clock), and Scan by prefix, which reads the prefix's key range of the primary key in
// pages.
//
// # Cleanup
//
// Expired rows are invisible to every call, but stay until [Store.Cleanup]
// deletes them, in statements of at most [Options.CleanupBatchSize] rows,
// locked by primary key with FOR UPDATE SKIP LOCKED so that claims go on
// meanwhile. [Store.RunCleanup] runs it on an interval in the caller's
// goroutine and stops with its context: the store starts no goroutine.
package pgstore
