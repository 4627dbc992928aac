package pgstore

import (
	"fmt"
	"strings"
)

// A record is one row, keyed by the receiver's key (namespace, colon, id).
// Its columns:
//
//	key          the key; COLLATE "C" so that keys sort by their bytes and a
//	             prefix is a key range (Scan)
//	state        'processing', 'completed' or 'failed'
//	token        the token of the last claim (the caller's, or one the
//	             store drew); a completed record keeps the token that
//	             completed it, so that the same Complete again succeeds
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
//	steps        the record's step records (store.StepStore), NULL while
//	             it has none: see stepsFormat. A fresh record (an absent
//	             key, or a gone row claimed afresh) starts without; every
//	             other claim, Release and Complete keep them
//
// Time is the database's: every statement reads clock_timestamp() once
// (the "now" CTE) and compares and computes with it, so the consumers'
// clocks never matter. A lease has ended once now >= lease_until, a record
// is gone once now >= expires_at, whatever its state: every statement
// treats a gone row as absent, and Cleanup deletes it.

// createSQL creates the table and its expiry index, as they are now.
const createSQL = `CREATE TABLE IF NOT EXISTS %[1]s (
	key          text COLLATE "C" PRIMARY KEY,
	state        text NOT NULL CHECK (state IN ('processing', 'completed', 'failed')),
	token        uuid NOT NULL,
	attempt      integer NOT NULL,
	fingerprint  bytea NOT NULL DEFAULT '',
	result       bytea,
	last_error   text NOT NULL DEFAULT '',
	lease_until  timestamptz,
	expires_at   timestamptz NOT NULL,
	created_at   timestamptz,
	completed_at timestamptz,
	steps        bytea
);
CREATE INDEX IF NOT EXISTS %[2]s ON %[1]s (expires_at);
`

// upgradeSQL adds to a table of an earlier version the columns it lacks
// (0.1.0 had neither created_at nor completed_at, and no version before
// step records had steps). Nullable columns without a default:
// PostgreSQL adds them to the catalog only, without rewriting the table,
// and the rows already there read them as NULL.
const upgradeSQL = `ALTER TABLE %[1]s
	ADD COLUMN IF NOT EXISTS created_at timestamptz,
	ADD COLUMN IF NOT EXISTS completed_at timestamptz,
	ADD COLUMN IF NOT EXISTS steps bytea;
`

// upgradeColumns are the columns upgradeSQL adds: a table that lacks
// some of them is upgraded by Migrate.
var upgradeColumns = []string{"created_at", "completed_at", "steps"}

// us turns a bigint of microseconds into an interval.
const us = `* interval '1 microsecond'`

// agrees is true when the fingerprints of the record r and of the claim
// (excluded) do not differ: equal, or either empty.
const agrees = `(r.fingerprint = '' OR excluded.fingerprint = '' OR r.fingerprint = excluded.fingerprint)`

// claimable is true of the record r that a claim at now conflicts with,
// as it is once the claim holds its row lock, when the claim takes it
// over: gone, or failed, or processing under an ended lease of another
// token, and the fingerprints agree (a gone record is claimed afresh,
// whatever its fingerprint). A processing record of the claim's own
// token is not taken over but granted again (own).
const claimable = `(r.expires_at <= (SELECT t FROM now)
		OR (` + agrees + `
			AND (r.state = 'failed' OR (r.state = 'processing' AND r.lease_until <= (SELECT t FROM now) AND r.token <> excluded.token))))`

// own is true of the record r that the claim already holds: processing
// under the claim's token (one of the caller's, AcquireRequest.Token,
// asked again after its answer was lost), its lease live or ended, not
// gone, and the fingerprints agree. The claim is granted again as it is,
// its attempt not counted: only its lease and expiry run from now, as an
// Extend would set them. A token the store drew never finds its own.
const own = `(r.state = 'processing' AND r.token = excluded.token AND r.expires_at > (SELECT t FROM now) AND ` + agrees + `)`

// gone is true of a record r past its expiry at now.
const gone = `r.expires_at <= (SELECT t FROM now)`

// The ON CONFLICT part of a claim. A claimable row is taken over: afresh
// when it is gone (attempt 1, no past and no step records, created now),
// else with attempt plus one, keeping its creation time and step records
// and dropping its completion time. A
// row the claim already holds (own) keeps all but its lease and expiry,
// which run from now. Any other row is written back as it is, so that the
// statement returns it, read under the row lock: a claim that waited for
// the lock of a concurrent claim always answers with the record that
// refused it, never with an older version that its snapshot saw. Such a
// row is updated only when the claim found it locked or changed after its
// snapshot (the settled check below answers every other refusal without
// writing, but one for a fingerprint), so the rewrite costs one row
// version, under contention only. Whether the claim holds the row it
// returns is acquired's to say.
const claimConflict = `ON CONFLICT (key) DO UPDATE SET
		state = CASE WHEN ` + claimable + ` THEN 'processing' ELSE r.state END,
		token = CASE WHEN ` + claimable + ` THEN excluded.token ELSE r.token END,
		attempt = CASE WHEN ` + gone + ` THEN 1 WHEN ` + claimable + ` THEN r.attempt + 1 ELSE r.attempt END,
		fingerprint = CASE WHEN ` + gone + ` OR (r.fingerprint = '' AND ` + claimable + `) THEN excluded.fingerprint ELSE r.fingerprint END,
		result = CASE WHEN ` + claimable + ` THEN NULL ELSE r.result END,
		last_error = CASE WHEN ` + gone + ` THEN '' ELSE r.last_error END,
		lease_until = CASE WHEN ` + claimable + ` OR ` + own + ` THEN excluded.lease_until ELSE r.lease_until END,
		expires_at = CASE WHEN ` + claimable + ` OR ` + own + ` THEN excluded.expires_at ELSE r.expires_at END,
		created_at = CASE WHEN ` + gone + ` THEN excluded.created_at ELSE r.created_at END,
		completed_at = CASE WHEN ` + claimable + ` THEN NULL ELSE r.completed_at END,
		steps = CASE WHEN ` + gone + ` THEN NULL ELSE r.steps END`

// settled is true of a record h, as the statement's snapshot sees it at
// n.t, that a claim of token tok need not even try: completed and not
// gone (completed records are immutable), or processing under a live
// lease of another token (the claim's own is granted again, which
// writes). A duplicate is then answered by a read alone: the INSERT
// inserts nothing and locks no row, so the statement writes nothing, not
// even the commit record that a row lock would cost (a WAL flush under
// synchronous_commit).
func settled(tok string) string {
	return `h.expires_at > n.t AND (h.state = 'completed' OR (h.state = 'processing' AND h.lease_until > n.t AND h.token <> ` + tok + `))`
}

// acquired is true of the row c that a claim of token tok and
// fingerprint fp returns when the claim holds it: taken, made, or its
// own granted again. A row written back as it was carries tok too when
// the caller's token last held it (completed since, or refused for its
// fingerprint), and is no claim.
func acquired(c, tok, fp string) string {
	return c + `.state = 'processing' AND ` + c + `.token = ` + tok +
		` AND (` + c + `.fingerprint = '' OR ` + fp + ` = '' OR ` + c + `.fingerprint = ` + fp + `)`
}

// recordCols are the columns a statement answers a record with.
const recordCols = `state, token, attempt, fingerprint, result, last_error, lease_until, expires_at, created_at, completed_at`

// fenced is true of the row r that the claim of key $1 and token $2
// holds at n.t, as Complete, Release and Extend require: processing
// under that token, not gone.
const fenced = `r.key = $1::text AND r.token = $2::uuid AND r.state = 'processing' AND r.expires_at > n.t`

// appendSteps is the steps of the row r with the encoded step records
// at param appended (stepsFormat).
func appendSteps(param string) string {
	return `coalesce(r.steps, '\x01'::bytea) || ` + param + `::bytea`
}

// completeSQL is the complete statement, setting the columns of set too.
func completeSQL(set string) string {
	return `UPDATE %[1]s r SET state = 'completed', result = $3::bytea, lease_until = NULL, expires_at = n.t + $4::bigint ` + us + `, completed_at = n.t` + set + `
FROM (SELECT clock_timestamp() AS t) n
WHERE ` + fenced
}

// qualified is recordCols of the table aliased alias.
func qualified(alias string) string {
	return alias + "." + strings.ReplaceAll(recordCols, ", ", ", "+alias+".")
}

// statements are the store's SQL for one table.
type statements struct {
	create        string
	upgrade       string
	acquire       string
	acquireBatch  string
	complete      string
	completeSteps string
	completeMany  string
	completed     string
	release       string
	extend        string
	extendMany    string
	giveBack      string
	get           string
	loadSteps     string
	holds         string
	saveStep      string
	del           string
	deleteIf      string
	scan          string
	cleanup       string
}

func newStatements(t tableName) statements {
	q := func(format string) string { return fmt.Sprintf(format, t.sql) }
	return statements{
		create:  fmt.Sprintf(createSQL, t.sql, t.index),
		upgrade: fmt.Sprintf(upgradeSQL, t.sql),

		// acquire: $1 key, $2 token, $3 fingerprint, $4 lease (µs), $5
		// abandoned (µs). One row: acquired, the record, now. A claim
		// refused by a record its snapshot saw settled answers with that
		// record; one refused under the row lock, with the record as the
		// lock found it (claimConflict).
		acquire: q(`WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
claimed AS (
	INSERT INTO %[1]s AS r (key, state, token, attempt, fingerprint, last_error, lease_until, expires_at, created_at)
	SELECT $1::text, 'processing', $2::uuid, 1, $3::bytea, '', n.t + $4::bigint ` + us + `, n.t + ($4::bigint + $5::bigint) ` + us + `, n.t FROM now n
	WHERE NOT EXISTS (SELECT FROM %[1]s h WHERE h.key = $1::text AND ` + settled("$2::uuid") + `)
	` + claimConflict + `
	RETURNING ` + acquired("r", "$2::uuid", "$3::bytea") + ` AS acquired, ` + recordCols + `
)
SELECT acquired, ` + recordCols + `, (SELECT t FROM now) FROM claimed
UNION ALL
SELECT false, ` + recordCols + `, (SELECT t FROM now) FROM %[1]s
WHERE key = $1::text AND NOT EXISTS (SELECT FROM claimed)`),

		// acquireBatch: $1 keys, $2 tokens, $3 fingerprints, $4 leases
		// (µs), all of one length and distinct keys; $5 abandoned (µs).
		// Rows are claimed in key order, so that two batches never wait
		// on each other's rows crosswise. One row per key found or
		// claimed: key, acquired, the record, now.
		acquireBatch: q(`WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
req AS (SELECT * FROM unnest($1::text[], $2::uuid[], $3::bytea[], $4::bigint[]) AS q(key, token, fingerprint, lease)),
claimed AS (
	INSERT INTO %[1]s AS r (key, state, token, attempt, fingerprint, last_error, lease_until, expires_at, created_at)
	SELECT q.key, 'processing', q.token, 1, q.fingerprint, '', n.t + q.lease ` + us + `, n.t + (q.lease + $5::bigint) ` + us + `, n.t
	FROM req q, now n WHERE NOT EXISTS (SELECT FROM %[1]s h WHERE h.key = q.key AND ` + settled("q.token") + `)
	ORDER BY q.key
	` + claimConflict + `
	RETURNING key, ` + recordCols + `
)
SELECT c.key, ` + acquired("c", "q.token", "q.fingerprint") + `, ` + qualified("c") + `, (SELECT t FROM now) FROM claimed c JOIN req q ON q.key = c.key
UNION ALL
SELECT r.key, false, ` + recordCols + `, (SELECT t FROM now) FROM %[1]s r
WHERE r.key IN (SELECT key FROM req) AND r.key NOT IN (SELECT key FROM claimed)`),

		// complete: $1 key, $2 token, $3 result, $4 retention (µs). Rows
		// affected: 1 when the token held the key.
		complete: q(completeSQL("")),

		// completeSteps: complete, and $5 the encoded step records that
		// the handler's transaction saved, appended to the row's
		// (stepsFormat).
		completeSteps: q(completeSQL(`, steps = ` + appendSteps("$5"))),

		// completeMany: $1 keys, $2 tokens, $3 results, $4 retentions (µs),
		// distinct keys and tokens. The keys and tokens completed.
		completeMany: q(`UPDATE %[1]s r SET state = 'completed', result = q.result, lease_until = NULL, expires_at = n.t + q.retention ` + us + `, completed_at = n.t
FROM (SELECT clock_timestamp() AS t) n, unnest($1::text[], $2::uuid[], $3::bytea[], $4::bigint[]) AS q(key, token, result, retention)
WHERE r.key = q.key AND r.token = q.token AND r.state = 'processing' AND r.expires_at > n.t
RETURNING r.key, r.token`),

		// completed: $1 keys, $2 tokens. The keys and tokens of the
		// records these tokens completed, not gone: a Complete that found
		// no processing row succeeds when its token completed it already.
		completed: q(`SELECT r.key, r.token FROM %[1]s r, unnest($1::text[], $2::uuid[]) AS q(key, token)
WHERE r.key = q.key AND r.token = q.token AND r.state = 'completed' AND r.expires_at > clock_timestamp()`),

		// release: $1 key, $2 token, $3 error, $4 retention (µs).
		release: q(`UPDATE %[1]s r SET state = 'failed', last_error = $3::text, lease_until = NULL, expires_at = n.t + $4::bigint ` + us + `, completed_at = n.t
FROM (SELECT clock_timestamp() AS t) n
WHERE r.key = $1::text AND r.token = $2::uuid AND r.state = 'processing' AND r.expires_at > n.t`),

		// extend: $1 key, $2 token, $3 lease (µs), $4 abandoned (µs).
		extend: q(`UPDATE %[1]s r SET lease_until = n.t + $3::bigint ` + us + `, expires_at = n.t + ($3::bigint + $4::bigint) ` + us + `
FROM (SELECT clock_timestamp() AS t) n
WHERE r.key = $1::text AND r.token = $2::uuid AND r.state = 'processing' AND r.expires_at > n.t`),

		// extendMany: $1 keys, $2 tokens, $3 leases (µs), distinct keys
		// and tokens; $4 abandoned (µs). The keys and tokens extended.
		extendMany: q(`UPDATE %[1]s r SET lease_until = n.t + q.lease ` + us + `, expires_at = n.t + (q.lease + $4::bigint) ` + us + `
FROM (SELECT clock_timestamp() AS t) n, unnest($1::text[], $2::uuid[], $3::bigint[]) AS q(key, token, lease)
WHERE r.key = q.key AND r.token = q.token AND r.state = 'processing' AND r.expires_at > n.t
RETURNING r.key, r.token`),

		// giveBack: $1 key, $2 token. The attempt of a live claim that
		// the database failed, uncounted.
		giveBack: q(`UPDATE %[1]s SET attempt = attempt - 1
WHERE key = $1::text AND token = $2::uuid AND state = 'processing' AND attempt > 0 AND expires_at > clock_timestamp()`),

		// get: $1 key. The record and its step records unless it is
		// gone.
		get: q(`SELECT ` + recordCols + `, steps FROM %[1]s WHERE key = $1::text AND expires_at > clock_timestamp()`),

		// loadSteps: $1 key, $2 token. One row when the token holds the
		// key: its step records (NULL: none).
		loadSteps: q(`SELECT r.steps FROM %[1]s r, (SELECT clock_timestamp() AS t) n WHERE ` + fenced),

		// holds: $1 key, $2 token. One row when the token holds the key.
		holds: q(`SELECT true FROM %[1]s r, (SELECT clock_timestamp() AS t) n WHERE ` + fenced),

		// saveStep: $1 key, $2 token, $3 one encoded step record,
		// appended to the row's (stepsFormat). Rows affected: 1 when the
		// token held the key.
		saveStep: q(`UPDATE %[1]s r SET steps = ` + appendSteps("$3") + `
FROM (SELECT clock_timestamp() AS t) n
WHERE ` + fenced),

		del: q(`DELETE FROM %[1]s WHERE key = $1::text`),

		// deleteIf: $1 key, $2 the states deleted, $3 whether a processing
		// record whose lease ended is deleted too. The row is locked
		// first (FOR UPDATE answers its latest version, waiting for a
		// concurrent claim to commit), the decision made on it, and the
		// locked row deleted: no claim slips between the read and the
		// delete. One row unless the record is absent or gone: deleted,
		// the record as found.
		deleteIf: q(`WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
cur AS MATERIALIZED (
	SELECT key, ` + recordCols + ` FROM %[1]s
	WHERE key = $1::text AND expires_at > (SELECT t FROM now) FOR UPDATE
),
doomed AS MATERIALIZED (
	SELECT key FROM cur c WHERE c.state = ANY($2::text[])
		OR ($3::boolean AND c.state = 'processing' AND c.lease_until <= (SELECT t FROM now))
),
deleted AS (DELETE FROM %[1]s r USING doomed d WHERE r.key = d.key RETURNING r.key)
SELECT EXISTS (SELECT FROM deleted), ` + recordCols + ` FROM cur`),

		// scan: $1 the prefix, $2 the last key seen ('' at first), $3 the
		// first key past the prefix (NULL: none), $4 the page size.
		scan: q(`SELECT key, ` + recordCols + `, steps FROM %[1]s
WHERE key >= $1::text AND key > $2::text AND ($3::text IS NULL OR key < $3::text) AND expires_at > clock_timestamp()
ORDER BY key LIMIT $4::int`),

		// cleanup: $1 the batch size. Gone rows are locked by primary key,
		// skipping those a claim holds right now, and deleted; a row
		// claimed again since (no longer gone) is not.
		cleanup: q(`WITH doomed AS (
	SELECT key FROM %[1]s WHERE expires_at <= clock_timestamp()
	ORDER BY expires_at LIMIT $1::int FOR UPDATE SKIP LOCKED
)
DELETE FROM %[1]s r USING doomed d WHERE r.key = d.key AND r.expires_at <= clock_timestamp()`),
	}
}
