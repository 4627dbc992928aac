package mysqlstore

import (
	"database/sql"
	"fmt"
	"time"

	"github.com/dedup-go/dedup/store"
)

// row is a record as a read answers it, with its token and the database's
// clock.
type row struct {
	rec     store.Record
	token   store.Token
	expires time.Time // expires_at, which a processing record has too
	now     time.Time // zero when the read did not return it
}

// scanner is what rows are read from: *sql.Row and *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

// scanRow reads the key, the record's columns and, withNow, the
// database's clock. A row whose columns are all NULL (the read of a single
// key found none: see statements.read) is a zero record with its key
// empty.
func scanRow(r scanner, withNow bool) (row, error) {
	return scanRowSteps(r, withNow, false)
}

// scanRecord reads the key, the record's columns and its steps (an
// Inspector's Get and Scan).
func scanRecord(r scanner) (row, error) {
	return scanRowSteps(r, false, true)
}

// scanRowSteps is scanRow, reading the steps column after the record's
// columns withSteps.
func scanRowSteps(r scanner, withNow, withSteps bool) (row, error) {
	var (
		out              row
		key, tok, fp     []byte
		state, lastError sql.NullString
		attempt          sql.NullInt64
		lease, exp       dbTime
		created, settled dbTime
		clock            dbTime
		steps            *[]byte // allocated only withSteps: the hot path's reads do not pay for it
	)
	dest := []any{&key, &state, &tok, &attempt, &fp, &out.rec.Result, &lastError, &lease, &exp, &created, &settled}
	if withSteps {
		steps = new([]byte)
		dest = append(dest, steps)
	}
	if withNow {
		dest = append(dest, &clock)
	}
	if err := r.Scan(dest...); err != nil {
		return row{}, err
	}
	out.rec.Key = string(key)
	out.rec.State = stateOf(state.String)
	out.rec.Attempt = int(attempt.Int64)
	out.rec.Fingerprint = string(fp)
	out.rec.LastError = lastError.String
	copy(out.token[:], tok)
	out.rec.Token, out.rec.CreatedAt = out.token, created.t
	out.expires, out.now = exp.t, clock.t
	if withSteps {
		var err error
		if out.rec.Steps, err = decodeSteps(*steps); err != nil {
			return row{}, fmt.Errorf("mysqlstore: record %q: %w", out.rec.Key, err)
		}
	}
	switch out.rec.State {
	case store.StateProcessing:
		// A claim is kept until its lease plus AbandonedTTL; what the
		// contract calls its expiry is that of a settled record only.
		// A processing row may keep a completion time (a failed record
		// taken over by a store of an earlier version, which did not
		// clear it): a claim has none.
		out.rec.LeaseUntil, out.rec.Result = lease.t, nil
	case store.StateCompleted:
		out.rec.ExpiresAt, out.rec.CompletedAt = exp.t, settled.t
	default:
		out.rec.ExpiresAt, out.rec.CompletedAt, out.rec.Result = exp.t, settled.t, nil
	}
	return out, nil
}

// verdict is what a claim makes of a row it read.
type verdict uint8

const (
	// claim: absent, gone, failed, or processing under an ended lease,
	// with agreeing fingerprints: the claim statement takes it.
	claim verdict = iota
	// refused: completed, or processing under a live lease: the answer.
	refused
	// reusedKey: another fingerprint, in any state: ErrKeyReused.
	reusedKey
)

// judge decides what a claim with fingerprint fp does about r, read at
// r.now; found is false when there was no row.
func judge(r row, found bool, fp string) verdict {
	switch {
	case !found || !r.now.Before(r.expires):
		return claim
	case reused(r.rec.Fingerprint, fp):
		return reusedKey
	case r.rec.State == store.StateCompleted,
		r.rec.State == store.StateProcessing && r.now.Before(r.rec.LeaseUntil):
		return refused
	}
	return claim
}

// reused reports whether a request's fingerprint differs from the
// record's; an empty one on either side is not checked.
func reused(stored, requested string) bool {
	return stored != "" && requested != "" && stored != requested
}

func errReused(key string, state store.State) error {
	return fmt.Errorf("mysqlstore: acquire %q: %w: the %s record has another fingerprint", key, store.ErrKeyReused, state)
}

func stateOf(s string) store.State {
	switch s {
	case "processing":
		return store.StateProcessing
	case "completed":
		return store.StateCompleted
	case "failed":
		return store.StateFailed
	}
	return 0
}

// dbTime reads a DATETIME(6) of the table, which holds UTC: as a
// time.Time when the DSN has parseTime=true (whatever its loc: the wall
// clock is what the column holds), as text otherwise. NULL is the zero
// time.
type dbTime struct{ t time.Time }

// dbTimeLayout is how MySQL writes a DATETIME(6) as text;
// dbTimeLayoutFixed how the store sends one.
const (
	dbTimeLayout      = "2006-01-02 15:04:05.999999"
	dbTimeLayoutFixed = "2006-01-02 15:04:05.000000"
)

// Scan implements sql.Scanner.
func (d *dbTime) Scan(v any) error {
	switch x := v.(type) {
	case nil:
		d.t = time.Time{}
	case time.Time:
		d.t = time.Date(x.Year(), x.Month(), x.Day(), x.Hour(), x.Minute(), x.Second(), x.Nanosecond(), time.UTC)
	case []byte:
		return d.parse(string(x))
	case string:
		return d.parse(x)
	default:
		return fmt.Errorf("mysqlstore: a DATETIME read as %T", v)
	}
	return nil
}

func (d *dbTime) parse(s string) error {
	t, err := time.Parse(dbTimeLayout, s)
	if err != nil {
		return fmt.Errorf("mysqlstore: a DATETIME read as %q: %w", s, err)
	}
	d.t = t
	return nil
}
