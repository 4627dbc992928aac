package pgoutbox

// FetchSQL is the statement that reads a relay's next batch: $1 the
// buckets held, $2 the batch size, $3 the relay.
func FetchSQL(o *Outbox) string { return o.sql.fetch }
