package mysqlstore

import (
	"fmt"
	"slices"
	"strings"
)

// A record is one row, keyed by the receiver's key (namespace, colon, id).
// Its columns:
//
//	key          the key, VARBINARY(3072): compared and sorted byte by byte,
//	             so that Order-1 and order-1 are two keys, "a" and "a " too,
//	             and a prefix is a key range (Scan)
//	state        'processing', 'completed' or 'failed'
//	token        the token of the last claim; a completed record keeps the
//	             token that completed it, so that the same Complete again
//	             succeeds
//	attempt      claims made so far, less those whose transaction the
//	             database failed (TxHandler gives them back)
//	fingerprint  fingerprint of the first claim that had one (bytes: the
//	             store never interprets it)
//	result       the result of a completed record
//	last_error   the error text of the last failed attempt
//	lease_until  when the lease of a processing record ends
//	expires_at   when the record is gone: the lease end plus AbandonedTTL
//	             while processing, the retention once completed or failed
//	created_at   when the key's first claim was made: kept through
//	             takeovers, releases and retries, set afresh only when a
//	             gone record is claimed; NULL in a row written before the
//	             column existed (read as a zero time)
//	completed_at when the record completed, or its last attempt failed;
//	             NULL while processing
//	steps        the record's step records (store.StepStore), NULL for
//	             none: entries appended one after another (see
//	             encodeStep), a later entry of a name replacing an
//	             earlier one; cleared only when a gone record is claimed
//	             afresh
//
// Time is the database's, in UTC: every statement reads UTC_TIMESTAMP(6),
// which MySQL and MariaDB fix once per statement (at its start), and
// compares and computes with it, so neither the consumers' clocks nor the
// session's time_zone ever matter. A lease has ended once now >=
// lease_until, a record is gone once now >= expires_at, whatever its state:
// every statement treats a gone row as absent, and Cleanup deletes it.

// schemaSQL creates the table and its expiry index in one statement;
// Migrate runs it (and upgrades a table of an earlier version: see
// upgradeSQL), and teams that run their own migrations apply it
// themselves. Only what MySQL 8 and MariaDB 10.6+ both take.
const schemaSQL = "CREATE TABLE IF NOT EXISTS %[1]s (\n" +
	"\t`key`       VARBINARY(3072) NOT NULL,\n" +
	"\tstate       VARCHAR(10) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,\n" +
	"\ttoken       BINARY(16) NOT NULL,\n" +
	"\tattempt     INT NOT NULL,\n" +
	"\tfingerprint VARBINARY(1024) NOT NULL,\n" +
	"\tresult      LONGBLOB NULL,\n" +
	"\tlast_error  TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,\n" +
	"\tlease_until DATETIME(6) NULL,\n" +
	"\texpires_at  DATETIME(6) NOT NULL,\n" +
	"\tcreated_at  DATETIME(6) NULL,\n" +
	"\tcompleted_at DATETIME(6) NULL,\n" +
	"\tsteps       LONGBLOB NULL,\n" +
	"\tPRIMARY KEY (`key`),\n" +
	"\tKEY %[2]s (expires_at),\n" +
	"\tCHECK (state IN ('processing', 'completed', 'failed'))\n" +
	") ENGINE=InnoDB ROW_FORMAT=DYNAMIC"

// upgradeColumns are the columns that a table of an earlier version lacks
// (0.1.0 had none of them; steps came after the other two), with their
// definitions.
var upgradeColumns = []struct{ name, def string }{
	{"created_at", "DATETIME(6) NULL"},
	{"completed_at", "DATETIME(6) NULL"},
	{"steps", "LONGBLOB NULL"},
}

// added reports whether column is one of upgradeColumns.
func added(column string) bool {
	for _, c := range upgradeColumns {
		if c.name == column {
			return true
		}
	}
	return false
}

// upgradeSQL adds the columns missing (names of upgradeColumns) to the
// table: one ALTER TABLE, since MySQL 8 has no ADD COLUMN IF NOT EXISTS.
// Nullable columns without a default, added last: MySQL 8.0.12+ and
// MariaDB 10.3+ add them instantly (a change of the table's metadata, no
// copy), and the rows already there read them as NULL.
func upgradeSQL(table string, missing []string) string {
	var adds []string
	for _, c := range upgradeColumns {
		if slices.Contains(missing, c.name) {
			adds = append(adds, "ADD COLUMN "+c.name+" "+c.def)
		}
	}
	return "ALTER TABLE " + table + " " + strings.Join(adds, ", ")
}

// now is the statement's clock.
const now = `UTC_TIMESTAMP(6)`

// us adds a parameter of microseconds to now.
const us = now + ` + INTERVAL ? MICROSECOND`

// recordCols are the columns a statement answers a record with; reads add
// the key first and now last.
const recordCols = "state, token, attempt, fingerprint, result, last_error, lease_until, expires_at, created_at, completed_at"

// claimable is true of the row, as the claim's row lock found it, that a
// claim conflicts with and takes over: gone, or failed, or processing
// under an ended lease, and the fingerprints agree (a gone record is
// claimed afresh, whatever its fingerprint).
const claimable = `expires_at <= ` + now + `
		OR ((fingerprint = '' OR VALUES(fingerprint) = '' OR fingerprint = VALUES(fingerprint))
			AND (state = 'failed' OR (state = 'processing' AND lease_until <= ` + now + `)))`

// own is true of a row that the claim's own token holds, processing and
// not gone, with agreeing fingerprints: the claimer asks again for a claim
// whose answer it lost (store.AcquireRequest.Token), and is granted the
// same claim, its attempt uncounted and its lease from now.
const own = `(token = VALUES(token) AND state = 'processing' AND expires_at > ` + now + `
		AND (fingerprint = '' OR VALUES(fingerprint) = '' OR fingerprint = VALUES(fingerprint)))`

// takes is true of a row the claim takes: claimable, or its own.
const takes = `(` + claimable + `) OR ` + own

// claimConflict is the ON DUPLICATE KEY UPDATE part of a claim. A row the
// claim takes (takes) is taken over: afresh when it is gone (attempt 1,
// no past, no step records, created now), else with attempt plus one, keeping its creation
// time and dropping its completion time, or, when the claim's own token
// holds it, with its attempt kept; either way under the claim's token and
// lease. Any other row is left as it is.
//
// The assignments of ON DUPLICATE KEY UPDATE run in order, each seeing the
// columns that the ones before it set, so every one asks takes again, and
// the order keeps its answer: while it is false nothing changes; once it
// is true, it stays true through every change made before it is asked
// again. The attempt comes first (it tells own from a takeover on the row
// as it was), then the columns takes does not read, then the fingerprint
// (which then agrees), the token (which makes own true of the claim), the
// state (processing: own, if a failed row is no longer claimable), the
// lease (own, for a processing row whose ended lease no longer is), and
// expires_at, which gone reads, last. A token equal to the claim's cannot
// decide alone: a record that this token completed keeps it.
// VALUES(col) is the value the row of the INSERT would have had: MySQL
// 8.0.20+ warns that it is deprecated in favour of a row alias, which
// MariaDB does not have.
const claimConflict = `ON DUPLICATE KEY UPDATE
	attempt = IF(` + takes + `, IF(expires_at <= ` + now + `, 1, IF(` + own + `, attempt, attempt + 1)), attempt),
	last_error = IF((` + takes + `) AND expires_at <= ` + now + `, '', last_error),
	result = IF(` + takes + `, NULL, result),
	created_at = IF((` + takes + `) AND expires_at <= ` + now + `, VALUES(created_at), created_at),
	completed_at = IF(` + takes + `, NULL, completed_at),
	steps = IF((` + takes + `) AND expires_at <= ` + now + `, NULL, steps),
	fingerprint = IF((` + takes + `) AND (expires_at <= ` + now + ` OR fingerprint = ''), VALUES(fingerprint), fingerprint),
	token = IF(` + takes + `, VALUES(token), token),
	state = IF(` + takes + `, 'processing', state),
	lease_until = IF(` + takes + `, VALUES(lease_until), lease_until),
	expires_at = IF(` + takes + `, VALUES(expires_at), expires_at)`

// claimRow is one row of a claim's VALUES: key, token, fingerprint, lease
// (µs), lease plus AbandonedTTL (µs); created now.
const claimRow = `(?, 'processing', ?, 1, ?, NULL, '', ` + us + `, ` + us + `, ` + now + `)`

// statements are the store's SQL for one table.
type statements struct {
	table    string
	schema   string
	read     string // key: one row of read columns
	insert   string
	get      string // key: the record unless gone
	complete string
	release  string
	extend   string
	holds    string // key, token: the state the token holds, not gone
	holdsTx  string // holds, as a locking read inside a transaction
	giveBack string
	del      string
	lockRow  string // key: the row, locked, with now (DeleteIf's and a claim's read)
	cleanup  string

	loadSteps string // key, token: the steps of the row the token holds
	saveStep  string // entries, key, token: appends to the steps of the row the token holds
}

func newStatements(t tableName) statements {
	q := func(format string) string { return fmt.Sprintf(format, t.sql) }
	return statements{
		table:  t.sql,
		schema: fmt.Sprintf(schemaSQL, t.sql, t.index),

		// read: key. Always one row, with now: the record's columns are
		// NULL when there is none.
		read: q("SELECT r.`key`, r." + strings.ReplaceAll(recordCols, ", ", ", r.") + ", " + now + " FROM (SELECT 1) AS one LEFT JOIN %[1]s AS r ON r.`key` = ?"),

		// insert: key, token, fingerprint, the clock of the read that found
		// no record, lease (µs), that clock, lease plus AbandonedTTL (µs),
		// that clock. The claim of a key that has no record, created at
		// the read's clock: a duplicate-key error when another claim
		// inserted it first.
		insert: q("INSERT INTO %[1]s (`key`, state, token, attempt, fingerprint, result, last_error, lease_until, expires_at, created_at)\n" +
			"VALUES (?, 'processing', ?, 1, ?, NULL, '', CAST(? AS DATETIME(6)) + INTERVAL ? MICROSECOND, CAST(? AS DATETIME(6)) + INTERVAL ? MICROSECOND, CAST(? AS DATETIME(6)))"),

		// get: key. The record unless gone, with its steps.
		get: q("SELECT `key`, " + recordCols + ", steps FROM %[1]s WHERE `key` = ? AND expires_at > " + now),

		// complete: result, retention (µs), key, token. One row affected
		// when the token held the key.
		complete: q("UPDATE %[1]s SET state = 'completed', result = ?, lease_until = NULL, expires_at = " + us + ", completed_at = " + now + `
WHERE ` + "`key`" + ` = ? AND token = ? AND state = 'processing' AND expires_at > ` + now),

		// release: error, retention (µs), key, token.
		release: q("UPDATE %[1]s SET state = 'failed', last_error = ?, lease_until = NULL, expires_at = " + us + ", completed_at = " + now + `
WHERE ` + "`key`" + ` = ? AND token = ? AND state = 'processing' AND expires_at > ` + now),

		// extend: lease (µs), lease plus AbandonedTTL (µs), key, token.
		extend: q("UPDATE %[1]s SET lease_until = " + us + ", expires_at = " + us + `
WHERE ` + "`key`" + ` = ? AND token = ? AND state = 'processing' AND expires_at > ` + now),

		holds:   q("SELECT state FROM %[1]s WHERE `key` = ? AND token = ? AND expires_at > " + now),
		holdsTx: q("SELECT state FROM %[1]s WHERE `key` = ? AND token = ? AND expires_at > " + now + " FOR UPDATE"),

		// giveBack: key, token. The attempt of a live claim that the
		// database failed, uncounted.
		giveBack: q("UPDATE %[1]s SET attempt = attempt - 1 WHERE `key` = ? AND token = ? AND state = 'processing' AND attempt > 0 AND expires_at > " + now),

		del: q("DELETE FROM %[1]s WHERE `key` = ?"),

		lockRow: q("SELECT `key`, " + recordCols + ", " + now + " FROM %[1]s WHERE `key` = ? FOR UPDATE"),

		// cleanup: the batch size. Gone rows in expiry order, through the
		// expiry index; a row that a claim took over meanwhile (no longer
		// gone once its lock is granted) is not deleted.
		cleanup: q("DELETE FROM %[1]s WHERE expires_at <= " + now + " ORDER BY expires_at LIMIT ?"),

		// loadSteps: key, token. One row when the token holds the key,
		// processing; none otherwise. A plain read: no lock.
		loadSteps: q("SELECT steps FROM %[1]s WHERE `key` = ? AND token = ? AND state = 'processing' AND expires_at > " + now),

		// saveStep: encoded entries, key, token. One row changed when the
		// token holds the key, processing (the entries are never empty, so
		// the row always changes); none, and nothing written, otherwise.
		saveStep: q("UPDATE %[1]s SET steps = CONCAT(COALESCE(steps, ''), ?)\nWHERE `key` = ? AND token = ? AND state = 'processing' AND expires_at > " + now),
	}
}

// placeholders returns n comma-separated copies of one.
func placeholders(one string, n int) string {
	return strings.TrimSuffix(strings.Repeat(one+", ", n), ", ")
}

// readMany reads the rows of n keys, with now.
func (q statements) readMany(n int) string {
	if n == 1 {
		return q.read
	}
	return "SELECT `key`, " + recordCols + ", " + now + " FROM " + q.table + " WHERE `key` IN (" + placeholders("?", n) + ")"
}

// readLocked reads the rows of n keys, with now, as a locking read: the
// rows as the claim statement before it, in the same transaction, left
// them.
func (q statements) readLocked(n int) string {
	if n == 1 {
		return q.lockRow
	}
	return "SELECT `key`, " + recordCols + ", " + now + " FROM " + q.table + " WHERE `key` IN (" + placeholders("?", n) + ") ORDER BY `key` FOR UPDATE"
}

// claim claims n rows, given in key order.
func (q statements) claim(n int) string {
	return "INSERT INTO " + q.table + " (`key`, state, token, attempt, fingerprint, result, last_error, lease_until, expires_at, created_at)\nVALUES " +
		placeholders(claimRow, n) + "\n" + claimConflict
}

// lockMany locks the rows of n keys, in key order, inside a transaction,
// and reads each one's key, token, state and whether it is live (not
// gone).
func (q statements) lockMany(n int) string {
	return "SELECT `key`, token, state, expires_at > " + now + " FROM " + q.table +
		" WHERE `key` IN (" + placeholders("?", n) + ") ORDER BY `key` FOR UPDATE"
}

// caseOf is a CASE over the key with n branches: key, value.
func caseOf(n int) string {
	return "CASE `key` " + strings.TrimSuffix(strings.Repeat("WHEN ? THEN ? ", n), " ") + " END"
}

// completeMany completes n locked rows: n pairs (key, result), n pairs
// (key, retention µs), n keys.
func (q statements) completeMany(n int) string {
	return "UPDATE " + q.table + " SET state = 'completed', result = " + caseOf(n) +
		", lease_until = NULL, expires_at = " + now + " + INTERVAL (" + caseOf(n) + ") MICROSECOND, completed_at = " + now +
		" WHERE `key` IN (" + placeholders("?", n) + ") AND state = 'processing' AND expires_at > " + now
}

// extendMany extends n locked rows: n pairs (key, lease µs), n pairs (key,
// lease plus AbandonedTTL µs), n keys.
func (q statements) extendMany(n int) string {
	return "UPDATE " + q.table + " SET lease_until = " + now + " + INTERVAL (" + caseOf(n) + ") MICROSECOND" +
		", expires_at = " + now + " + INTERVAL (" + caseOf(n) + ") MICROSECOND" +
		" WHERE `key` IN (" + placeholders("?", n) + ") AND state = 'processing' AND expires_at > " + now
}

// scan reads a page of records, with their steps, from a lower bound (inclusive on the first
// page, exclusive after it) to an upper one (none when open): bound, [upper],
// limit.
func (q statements) scan(first, upper bool) string {
	lower := "`key` > ?"
	if first {
		lower = "`key` >= ?"
	}
	if upper {
		lower += " AND `key` < ?"
	}
	return "SELECT `key`, " + recordCols + ", steps FROM " + q.table + " WHERE " + lower +
		" AND expires_at > " + now + " ORDER BY `key` LIMIT ?"
}
