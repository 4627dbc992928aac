// Package mysqlstore is a [store.Store] in a MySQL or MariaDB (InnoDB)
// table, on database/sql with github.com/go-sql-driver/mysql, whose
// records can be completed inside the handler's own transaction: the
// business writes and the record commit together or not at all, so each
// message has its effect exactly once, with no unique index of the
// business table's own. It depends on the contract package store only,
// not on the receiver.
//
//	db, err := sql.Open("mysql", "app:secret@tcp(db:3306)/app")
//	s, err := mysqlstore.New(ctx, db, &mysqlstore.Options{Migrate: true}) // creates the table; or apply the schema in your migrations
//	// New pings (store.ErrUnavailable when down) and checks the table and the user's rights (ErrMisconfigured)
//	handler, err := mysqlstore.TxHandler(s, func(ctx context.Context, tx *sql.Tx, o Order) (Receipt, error) {
//		_, err := tx.ExecContext(ctx, `INSERT INTO orders (id, amount) VALUES (?, ?)`, o.ID, o.Amount)
//		return Receipt{OrderID: o.ID}, err
//	}, nil)
//	rcv, err := dedup.NewReceiver(s, key, handler, &dedup.Config{Namespace: "orders"})
//
// It keeps to what MySQL 8 and MariaDB (10.6 and later) both take: no
// RETURNING, no row alias in ON DUPLICATE KEY UPDATE, no SKIP LOCKED, no
// sequences. Only MariaDB 10.11 was tested here.
//
// # The table
//
// One InnoDB row per record (see [Store.SchemaSQL], and the README for the
// SQL), keyed by the receiver's key (namespace, colon, id) as a
// VARBINARY(3072) primary key, with an index on its expiry.
// [Options.Table] names it, qualified by its database or not.
//
// A row keeps, for an operator's [Store.Get] and [Store.Scan], the token
// of the record's last claim, when its first claim was made (created_at,
// kept through takeovers, releases and retries) and when it completed or
// its last attempt failed (completed_at), by the database's clock in UTC.
// A table made by 0.1.0 lacks the last two columns: [Store.Migrate] (and
// [Options.Migrate]) adds them in place; the README has the ALTER TABLE
// for your own migrations. Its rows keep working; their times read as
// zero until the key is claimed afresh. It also keeps the record's step
// records (see below), in a steps column that tables of earlier versions
// lack: Migrate adds it too.
//
// Keys are bytes, compared byte by byte: Order-1 and order-1 are two
// keys, and so are "a" and "a ". A VARCHAR key would compare them by its
// collation, and every collation merges some (a case-insensitive one
// Order-1 and order-1, an accent-insensitive one e and é, a PAD SPACE one,
// utf8mb4_bin included, "a" and "a "), so one message would be answered
// with another's result; New refuses a table whose key column is not
// VARBINARY(3072). 3,072 bytes is the most an InnoDB index holds (16 KiB
// pages, the DYNAMIC row format), whatever the characters: [MaxKeyLength].
// A longer key is refused with store.ErrInvalidKey before any round trip,
// and a receiver dead-letters its message rather than retrying it.
//
// # What it guarantees
//
// It passes [github.com/dedup-go/dedup/store/storetest] under REPEATABLE
// READ (InnoDB's default) and READ COMMITTED, with the driver's defaults
// and with interpolateParams, parseTime (any loc) and clientFoundRows, and
// keeps every rule of the contract:
//
//   - A duplicate of a completed record, or a delivery of a key held
//     under a live lease, is answered by one plain read of the row: no
//     lock, no write, and it waits for no transaction that holds the row.
//   - Otherwise the claim is one autocommit statement. A key without a
//     record is claimed by a plain INSERT, whose lease starts on the clock
//     of the read; when another delivery inserted the key first, the
//     INSERT waits on its row lock and fails on the duplicate key, and the
//     store reads the record again. A record that may be taken over is
//     claimed by INSERT ... ON DUPLICATE KEY UPDATE, which takes it over
//     when it is gone, failed, or processing under an ended lease (and the
//     fingerprints agree), and leaves it as it is otherwise: never
//     check-then-set, no advisory lock. On a duplicate key InnoDB locks the
//     row exclusively and evaluates the update on its latest committed
//     version, whatever the isolation level, so of any number of processes
//     delivering a message at once exactly one claims it; the others wait
//     on its row lock for the moment it takes, then see its claim. A
//     locking read of the row, in the same transaction as that statement,
//     then tells the caller whether its token is the row's (no RETURNING in
//     MySQL): the row lock holds until the read, so the claim and its
//     answer are one step however long the claimer stalls in between. A
//     live lease that ended by the read is claimed again, within
//     Options.Timeout. A new message costs two statements (the read, the
//     INSERT) and one commit; a takeover five round trips (the read, and
//     the transaction: begin, claim, read, commit).
//   - A claim with the caller's token (store.AcquireRequest.Token) that
//     finds its own record processing is granted again by the same
//     statement: its attempt kept, its lease from now.
//   - The database's clock is the only clock of leases, expiry and the
//     records' creation and completion times: UTC_TIMESTAMP(6), which
//     MySQL and MariaDB fix once per statement, so
//     neither the consumers' clocks nor the session's time_zone matter. A
//     lease has ended once it reads LeaseUntil, a record is gone once it
//     reads its expiry.
//   - Every update is fenced: WHERE token = the claim's token. Complete,
//     Release and Extend with a token that no longer holds the key (taken
//     over, deleted, settled) fail with [store.ErrLeaseLost] and change
//     nothing. Until another claim takes the key over, a call with the
//     token of an ended lease still succeeds with its full effect.
//   - Complete with the token that completed the record succeeds again
//     and changes nothing: the first result and expiry stay. The store is
//     a [store.CompleteReporter]: it says whether a Complete wrote the
//     record, so a tieredstore in front of it caches only its own.
//   - Results, fingerprints and keys are bytes, kept as given; a
//     failure's error text is kept as valid UTF-8, up to 4 KiB.
//
// # Gap locks and deadlocks
//
// What was measured on MariaDB 10.11 (the tests TestFirstClaimsRace,
// TestContentionNeverUnavailable, TestBatchesDoNotDeadlock and TestCleanup
// show it):
//
//   - Two deliveries of a new key claiming it at once, each statement
//     holding its claim: the second waits on the first's row lock and then
//     sees its claim (the plain INSERT by failing on the duplicate key,
//     after which the store reads the record), under REPEATABLE READ and
//     READ COMMITTED: no deadlock. The obvious alternative, a locking
//     read in a short transaction (SELECT ... FOR UPDATE, then INSERT when
//     no row was found), fails both ways: under REPEATABLE READ the locking
//     read of an absent key takes a gap lock, which does not keep the other
//     delivery from taking one on the same gap, and each INSERT then waits
//     for the other's: InnoDB rolls one back as a deadlock (1213), every
//     time; under READ COMMITTED the second INSERT fails on the duplicate
//     key (1062) as the plain INSERT does. Hence the one statement.
//   - 24 workers claiming one key ten times each, with 1-3 ms and 50-200
//     ms leases, a quarter of them in batches: every answer a claim, a
//     duplicate or in flight; no deadlock, under either level.
//   - Two batches of 200 keys claiming (and then completing) the same keys
//     in opposite orders: no deadlock. A batch is claimed with one
//     multi-row statement in key order, and completed or extended in one
//     short transaction that locks its rows in key order (SELECT ... FOR
//     UPDATE) before one UPDATE, so batches wait for each other in one
//     order only. Under REPEATABLE READ the claim of a duplicate key takes
//     a next-key lock (the row and the gap before it), which can hold up
//     the insert of a new key into that gap by another batch for the
//     moment the statement takes, never crosswise.
//   - Cleanup deleting 30,000 gone rows in statements of 1,000 through the
//     expiry index while 8 workers claimed keys, gone ones included: no
//     deadlock measured. One is possible (the DELETE locks the expiry
//     index before the row, a claim that takes a gone record over the row
//     before the index), so every statement of the store's own runs again
//     after a deadlock (1213) or a lock wait timeout (1205), within
//     Options.Timeout; in a user's transaction, [TxHandler] runs the whole
//     function again.
//
// # Completion inside the user's transaction
//
// [TxHandler] wraps a function of a *sql.Tx into a handler: for each
// message it begins a transaction, runs the function, completes the
// record in the same transaction with one UPDATE fenced by the claim's
// token, and commits; the receiver then does not complete again. A crash
// anywhere leaves either both the business writes and the completed
// record (a redelivery is a duplicate) or neither (the redelivery takes
// the ended lease over and runs again). A stale worker, whose lease ended
// and whose key another delivery took over, gets store.ErrLeaseLost from
// the completion and its transaction is rolled back, business writes
// included. A deadlock or a lock wait timeout, in the function's
// statements or the completion, is the database's contention, not the
// function failing: TxHandler runs it again in a new transaction
// ([TxOptions].Retries, 3 by default), so the function must be safe to
// rerun; past its retries, and when the connection breaks inside the
// transaction, the error matches store.ErrUnavailable and the claim's
// attempt is given back. [Store.CompleteTx] is the same completion for a
// transaction you manage yourself.
//
// Isolation levels: REPEATABLE READ and READ COMMITTED both work. The
// completion is an UPDATE, which InnoDB runs on the latest committed
// version of the row at any level, so a heartbeat that extended the lease
// while the function ran does not fail it (unlike PostgreSQL's REPEATABLE
// READ), and a takeover that got there first makes it fail with
// ErrLeaseLost. A delivery that tries to take the key over while the
// transaction holds the completed row waits on the row lock, then sees
// the record completed (or, after a rollback, takes it over). The
// completion runs last, so the row is locked only from the completion (and
// the write of the function's steps just before it, if any) to the commit.
//
// # Step records
//
// The Store is a [store.StepStore]: it keeps the records of a handler's
// named steps (dedup.Step) in the record's own row, in a nullable LONGBLOB
// column, steps, of entries appended one after the other (a tag byte, the
// name and the value, each after its length as an unsigned varint); a
// later entry of a name replaces an earlier one when they are read.
// [Store.SaveStep] is one UPDATE fenced by the claim's token, as Complete
// is, which appends its entry (CONCAT: no read of the column, no
// transaction); [Store.LoadSteps] one plain read, fenced the same way. A
// token that does not hold the key, processing, gets store.ErrLeaseLost,
// and nothing is written. A step saved again appends again: the column
// grows with each save, not only with each name.
//
// The steps live and die with the row: a new key is inserted without
// them, and the claim statement clears them when it claims a gone record
// afresh (reusing its row); a takeover of a failed record or of an ended
// lease, a claim granted again to its own token, Release, Complete and
// Extend keep them. They expire with the record, Cleanup deletes them with
// the row, and so do Delete and DeleteIf. Get and Scan read them (in
// store.Record.Steps); Acquire's reads do not read the column. A message
// whose handler records no step runs the statements it ran before the
// column existed, and no other (TestHotPathStatements pins them).
//
// A process of an earlier version running beside ones of this version
// (a rolling upgrade) knows nothing of the column: when it claims a gone
// record afresh, reusing its row, it leaves the previous record's steps in
// place. Finish the upgrade before handlers record steps.
//
// # Steps inside the user's transaction
//
// A step run by a [TxHandler]'s function is recorded in the function's
// transaction, so that it commits with the business writes or not at all:
// SaveStep, given the context TxHandler passes to the function (or one
// derived from it) and the key of its claim, checks with a plain read in
// the transaction (no lock) that the claim's token holds the key, and
// keeps the step with the run; TxHandler then writes the run's steps in
// the transaction, in one fenced UPDATE just before the completion. The
// record's row is therefore locked only from that UPDATE to the commit,
// as without steps: the receiver's heartbeat, which updates the row to
// extend the lease, does not wait for the transaction while the function
// runs. (Writing each step in the transaction as it runs would lock the
// row from the first step to the commit: the heartbeat would wait, and
// the receiver would cancel a handler that ran a lease past its first
// step.) LoadSteps under that context reads in the transaction too, and
// returns the committed steps and the run's own. Neither needs a second
// connection of the pool while the transaction holds one. Under
// REPEATABLE READ their reads see the transaction's snapshot, which may
// predate the loss of the claim: the write before the completion then
// fails with store.ErrLeaseLost, and the transaction rolls back, its
// steps with it. A rolled back transaction leaves none of its steps;
// before it runs the function again after a deadlock or a lock wait
// timeout, TxHandler calls store.HeldClaim.StepsRolledBack, so that the
// receiver forgets the steps of the run rolled back. Since the
// transaction commits only with the completion, the steps of a TxHandler
// run are kept only when it completes the record: a run that fails keeps
// none (nor its business writes).
//
// A handler that manages its own transaction and calls
// [Store.CompleteTx] runs its steps under [Store.WithTx](ctx, tx) and
// gives CompleteTx that context: the steps are then recorded in the
// transaction as above, and written by CompleteTx before its completion.
// A transaction committed without CompleteTx keeps none of them. Without
// WithTx, each SaveStep commits at once, outside the transaction: a step
// whose effect is written in the transaction would be recorded even when
// the transaction rolls back, and skipped on the next attempt.
//
// # Failures and timeouts
//
// [New] (and [Store.Migrate]) check at start-up that the table fits the
// store: its database and the table exist, on InnoDB, with the store's
// columns and types, a unique key on the whole of key and no other, and
// the user may SELECT, INSERT, UPDATE and DELETE its rows. Whatever does
// not fit is named in an error matching [ErrMisconfigured] (and
// store.ErrInvalidConfig), with the GRANT to run. A table dropped, a
// column changed or a privilege revoked at run time gives the same error
// (the server's errors 1146, 1054, 1142 and their kin), never
// store.ErrUnavailable: the database answered, retrying will not help, and
// a receiver must not run handlers unprotected (fail-open) for it.
//
// Every other error of the database (a refused connection, a timeout, a
// server error) is a [*store.OpError], which matches
// [store.ErrUnavailable], so the receiver applies its fail-closed or
// fail-open policy; a cancelled context is reported as the context's
// error. [Options.Timeout] bounds every statement of the store, a lock
// wait in it included (innodb_lock_wait_timeout is 50 s by default), so a
// dead or stuck database never holds a handler longer; the driver closes
// a connection whose statement it gave up on. database/sql's Commit takes
// no context: COMMIT is bounded by the DSN's readTimeout and writeTimeout.
//
// # Batches and inspection
//
// The Store is a [store.BatchStore] (see above) and a [store.Inspector]:
// Get, Delete, DeleteIf (one short transaction that locks the row,
// decides on it by the database's clock and deletes it), and Scan by
// prefix, which reads the prefix's key range of the primary key in pages
// of 500.
//
// # Cleanup
//
// Expired rows are invisible to every call, but stay until [Store.Cleanup]
// deletes them, in statements of at most [Options.CleanupBatchSize] rows
// (DELETE ... ORDER BY expires_at LIMIT), so that claims go on meanwhile.
// [Store.RunCleanup] runs it on an interval in the caller's goroutine and
// stops with its context: the store starts no goroutine.
package mysqlstore
