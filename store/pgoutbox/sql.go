package pgoutbox

import (
	"fmt"
	"strings"
)

// The outbox is five tables. The outbox itself, one row per message still
// to send (a message marked sent is deleted from it):
//
//	seq           the order of writing: an identity, so a message written
//	              after another's transaction committed has a larger one
//	id            the message's id (outbox.MessageID), unique
//	claim_key     the key of the claim whose handler wrote it
//	name          its name, or position, within that handler
//	destination   where it goes, ordering_key what keeps it in order
//	key_hash      FNV-1a of the ordering key (of the id when there is
//	              none), 31 bits
//	bucket        key_hash modulo the bucket count, a generated column:
//	              the count is fixed in the schema, so no writer can
//	              disagree with another about it
//	body, headers the message (headers a JSON object of strings, or NULL)
//	created_at    when it was written, by the database's clock
//	sent_at       NULL; set only by relays of version 1 of the schema,
//	              which marked a message sent by setting it (such rows are
//	              skipped, and deleted past the retention)
//
// The ids, one row per message written (id, created_at): what keeps a
// handler that runs again from writing a sent message again, kept for
// the retention after the message was written and at least until it was
// sent, and much cheaper to keep than the message (marking a message
// sent deletes its outbox row, a fraction of the cost of updating it).
// The dead, one row per message the broker refused for good: the
// message, when it was set aside and why. The leases, one row per
// bucket: the relay that holds it (owner) and until when. The relays,
// one row per running relay, with the time its presence lasts until:
// what a relay divides the buckets by.
//
// The schema upgrades version 1 in place: the ids table is filled from
// the outbox's rows (sent or not) when it is created, the index of unsent
// rows by bucket gives way to one by seq.
const schemaSQL = `CREATE TABLE IF NOT EXISTS {table} (
	seq          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	id           text COLLATE "C" NOT NULL,
	claim_key    text NOT NULL,
	name         text NOT NULL,
	destination  text NOT NULL,
	ordering_key text NOT NULL,
	key_hash     integer NOT NULL CHECK (key_hash >= 0),
	bucket       integer GENERATED ALWAYS AS (key_hash % {buckets}) STORED,
	body         bytea NOT NULL,
	headers      jsonb,
	created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
	sent_at      timestamptz,
	CONSTRAINT {idKey} UNIQUE (id)
);
CREATE INDEX IF NOT EXISTS {unsent} ON {table} (seq) WHERE sent_at IS NULL;
DROP INDEX IF EXISTS {pending};
CREATE INDEX IF NOT EXISTS {sent} ON {table} (sent_at) WHERE sent_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS {ids} (
	id         text COLLATE "C" PRIMARY KEY,
	created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS {idsCreated} ON {ids} (created_at);
INSERT INTO {ids} (id, created_at) SELECT id, created_at FROM {table}
WHERE NOT EXISTS (SELECT FROM {ids}) ON CONFLICT (id) DO NOTHING;
CREATE TABLE IF NOT EXISTS {dead} (
	seq          bigint PRIMARY KEY,
	id           text COLLATE "C" NOT NULL,
	claim_key    text NOT NULL,
	name         text NOT NULL,
	destination  text NOT NULL,
	ordering_key text NOT NULL,
	key_hash     integer NOT NULL,
	body         bytea NOT NULL,
	headers      jsonb,
	created_at   timestamptz NOT NULL,
	dead_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
	error        text NOT NULL
);
CREATE TABLE IF NOT EXISTS {leases} (
	bucket      integer PRIMARY KEY,
	owner       uuid,
	lease_until timestamptz NOT NULL DEFAULT '-infinity'
);
INSERT INTO {leases} (bucket) SELECT b FROM generate_series(0, {buckets} - 1) b
WHERE NOT EXISTS (SELECT FROM {leases});
CREATE TABLE IF NOT EXISTS {relays} (
	relay       uuid PRIMARY KEY,
	alive_until timestamptz NOT NULL
);
`

// us turns a bigint of microseconds into an interval.
const us = `* interval '1 microsecond'`

// statements are the outbox's SQL for one set of tables.
type statements struct {
	schema  string
	check   string
	buckets string
	add     string

	fetch   string
	mark    string
	bury    string
	alive   string
	renew   string
	acquire string
	release string
	leave   string
	cleanup string
	cleanV1 string
	prune   string
}

func newStatements(n names, buckets int, notify bool) statements {
	r := strings.NewReplacer("{table}", n.table, "{leases}", n.leases, "{relays}", n.relays, "{ids}", n.ids, "{dead}", n.dead,
		"{idKey}", n.idKey, "{pending}", n.pending, "{unsent}", n.unsent, "{sent}", n.sent, "{idsCreated}", n.idsCreated,
		"{buckets}", fmt.Sprint(buckets))
	q := r.Replace
	// The id is claimed in the ids table first: a message whose id is
	// there (unsent, or sent within the retention) is not written again.
	// A concurrent Add of the same id waits for the first's transaction,
	// then writes nothing (or writes, if it rolled back).
	add := `WITH i AS (
	INSERT INTO {ids} (id) VALUES ($1::text) ON CONFLICT (id) DO NOTHING RETURNING id
), ins AS (
	INSERT INTO {table} (id, claim_key, name, destination, ordering_key, key_hash, body, headers)
	SELECT i.id, $2::text, $3::text, $4::text, $5::text, $6::integer, $7::bytea, $8::jsonb FROM i
	ON CONFLICT (id) DO NOTHING
	RETURNING bucket
)
SELECT bucket FROM ins`
	if notify {
		// The channel's payload is the bucket, so that a relay that does
		// not hold it need not look. NOTIFY is delivered at commit, and
		// not at all after a rollback.
		add = strings.Replace(add, "SELECT bucket FROM ins", "SELECT pg_notify($9::text, bucket::text) FROM ins", 1)
	}
	return statements{
		schema: q(schemaSQL),

		// check: the columns every statement uses, and the bucket count.
		check: q(`SELECT (SELECT count(*) FROM {leases}),
	(SELECT count(*) FROM (SELECT seq, id, claim_key, name, destination, ordering_key, key_hash, bucket, body, headers, created_at, sent_at FROM {table} LIMIT 0) t),
	(SELECT count(*) FROM (SELECT relay, alive_until FROM {relays} LIMIT 0) r),
	(SELECT count(*) FROM (SELECT bucket, owner, lease_until FROM {leases} LIMIT 0) l),
	(SELECT count(*) FROM (SELECT id, created_at FROM {ids} LIMIT 0) i),
	(SELECT count(*) FROM (SELECT seq, id, claim_key, name, destination, ordering_key, key_hash, body, headers, created_at, dead_at, error FROM {dead} LIMIT 0) d)`),
		buckets: q(`SELECT count(*) FROM {leases}`),

		// add: $1 id .. $8 headers, $9 the channel. One row when the
		// message was written (none when a message of its id exists).
		add: q(add),

		// fetch: $1 the buckets the relay holds, $2 the batch size, $3
		// the relay. The first unsent messages of those buckets, by seq:
		// for each bucket, a prefix of its unsent messages in the order
		// of writing, so a message never goes out before an earlier one
		// of its key that is still to send. Nothing when the relay holds
		// no live lease (it was paused past it): another relay may be
		// publishing them. The age is an interval (days and microseconds):
		// an interval costs the database about a quarter of a microsecond
		// less per row than its microseconds as a bigint, which go
		// through numeric.
		//
		// The plan is an index scan of the unsent rows by seq that stops
		// at the batch, whatever the statistics: the buckets come as an
		// array of values, and the limit from a subquery, whose value
		// the planner does not use (with it, on a table filled since its
		// last ANALYZE, it expects a handful of rows and sorts them all).
		// The scan reads about BatchSize x (buckets / buckets held)
		// rows: the share of another relay's buckets among the unsent.
		fetch: q(`SELECT seq, id, destination, ordering_key, body, headers, clock_timestamp() - created_at
FROM {table}
WHERE sent_at IS NULL AND bucket = ANY($1::int[])
	AND EXISTS (SELECT FROM {leases} WHERE owner = $3::uuid AND lease_until > clock_timestamp())
ORDER BY seq LIMIT (SELECT $2::int)`),

		// mark: $1 seqs. Only what the broker acknowledged: the rows are
		// deleted (their ids stay in the ids table).
		mark: q(`DELETE FROM {table} WHERE seq = ANY($1::bigint[])`),

		// bury: $1 seqs, $2 the error of each. Messages the broker
		// refused for good, moved to the dead table with their error.
		bury: q(`WITH d AS (
	DELETE FROM {table} o USING unnest($1::bigint[], $2::text[]) AS x(seq, error)
	WHERE o.seq = x.seq
	RETURNING o.seq, o.id, o.claim_key, o.name, o.destination, o.ordering_key, o.key_hash, o.body, o.headers, o.created_at, x.error
)
INSERT INTO {dead} (seq, id, claim_key, name, destination, ordering_key, key_hash, body, headers, created_at, error)
SELECT * FROM d ON CONFLICT (seq) DO NOTHING`),

		// alive: $1 the relay, $2 how long its presence lasts (µs). The
		// relays present, this one included.
		alive: q(`WITH me AS (
	INSERT INTO {relays} (relay, alive_until) VALUES ($1::uuid, clock_timestamp() + $2::bigint ` + us + `)
	ON CONFLICT (relay) DO UPDATE SET alive_until = excluded.alive_until
	RETURNING relay
)
SELECT 1 + count(*) FROM {relays} WHERE alive_until > clock_timestamp() AND relay <> $1::uuid`),

		// renew: $1 the relay, $2 the lease (µs). The buckets it still
		// holds: those no other relay took (a lease that ran out but
		// that nobody took is still the relay's, as nobody else
		// published its messages meanwhile).
		renew: q(`UPDATE {leases} SET lease_until = clock_timestamp() + $2::bigint ` + us + `
WHERE owner = $1::uuid RETURNING bucket`),

		// acquire: $1 the relay, $2 the lease (µs), $3 how many. Free
		// buckets, or buckets whose lease ran out, skipping those
		// another relay is taking right now; FOR UPDATE rechecks the
		// lease on the row's latest version.
		acquire: q(`UPDATE {leases} l SET owner = $1::uuid, lease_until = clock_timestamp() + $2::bigint ` + us + `
WHERE l.bucket IN (
	SELECT bucket FROM {leases}
	WHERE owner IS NULL OR lease_until <= clock_timestamp()
	ORDER BY random() LIMIT $3::int FOR UPDATE SKIP LOCKED
)
RETURNING l.bucket`),

		// release: $1 the relay, $2 buckets. Given back, free at once.
		release: q(`UPDATE {leases} SET owner = NULL, lease_until = '-infinity' WHERE owner = $1::uuid AND bucket = ANY($2::int[])`),

		// leave: $1 the relay. Its presence ends.
		leave: q(`DELETE FROM {relays} WHERE relay = $1::uuid`),

		// cleanup: $1 retention (µs), $2 batch size. Ids past the
		// retention whose message is no longer in the outbox (sent, or
		// dead), locked by key, skipping locked ones.
		cleanup: q(`DELETE FROM {ids} WHERE id IN (
	SELECT i.id FROM {ids} i
	WHERE i.created_at < clock_timestamp() - $1::bigint ` + us + `
		AND NOT EXISTS (SELECT FROM {table} o WHERE o.id = i.id)
	ORDER BY i.created_at LIMIT $2::int FOR UPDATE OF i SKIP LOCKED
)`),

		// cleanV1: $1 retention (µs), $2 batch size. Rows that a relay of
		// version 1 marked sent, past the retention.
		cleanV1: q(`DELETE FROM {table} WHERE seq IN (
	SELECT seq FROM {table} WHERE sent_at < clock_timestamp() - $1::bigint ` + us + `
	ORDER BY sent_at LIMIT $2::int FOR UPDATE SKIP LOCKED
)`),

		// prune: relays gone for an hour (killed: a stopped relay
		// removes its own row).
		prune: q(`DELETE FROM {relays} WHERE alive_until < clock_timestamp() - interval '1 hour'`),
	}
}
