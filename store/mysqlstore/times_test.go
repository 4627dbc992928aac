package mysqlstore_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/mysqlstore"
)

// schema010 is the table as mysqlstore 0.1.0 created it, without
// created_at, completed_at and steps.
const schema010 = "CREATE TABLE old_records (\n" +
	"\t`key`       VARBINARY(3072) NOT NULL,\n" +
	"\tstate       VARCHAR(10) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,\n" +
	"\ttoken       BINARY(16) NOT NULL,\n" +
	"\tattempt     INT NOT NULL,\n" +
	"\tfingerprint VARBINARY(1024) NOT NULL,\n" +
	"\tresult      LONGBLOB NULL,\n" +
	"\tlast_error  TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,\n" +
	"\tlease_until DATETIME(6) NULL,\n" +
	"\texpires_at  DATETIME(6) NOT NULL,\n" +
	"\tPRIMARY KEY (`key`),\n" +
	"\tKEY old_records_expires_at_idx (expires_at),\n" +
	"\tCHECK (state IN ('processing', 'completed', 'failed'))\n" +
	") ENGINE=InnoDB ROW_FORMAT=DYNAMIC"

// between checks that got lies in [from, to], readings of the database's
// clock taken before and after the call that stamped it.
func between(t *testing.T, from, got, to time.Time, what string) {
	t.Helper()
	require.False(t, got.IsZero(), "%s is zero", what)
	require.False(t, got.Before(from), "%s %v is before the call began (%v)", what, got, from)
	require.False(t, got.After(to), "%s %v is after the call returned (%v)", what, got, to)
}

// get reads key's record, which must exist.
func get(t *testing.T, s *mysqlstore.Store, key string) store.Record {
	t.Helper()
	rec, err := s.Get(t.Context(), key)
	require.NoError(t, err, "Get(%q)", key)
	return rec
}

// TestRecordTimes: a record carries the token of its last claim, when its
// first claim was made (kept through a release, a retry and a takeover)
// and when it completed or failed (none while processing), by the
// database's clock in UTC, in the answers of Get, Scan and DeleteIf; a
// claim's answer carries its creation time, and its token only when
// acquired. A gone record claimed again is created afresh. With the
// driver's defaults, and with times parsed in another loc and a session
// in another time zone.
func TestRecordTimes(t *testing.T) {
	t.Parallel()
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	for name, cfg := range map[string]struct {
		params map[string]string
		edit   func(*mysql.Config)
	}{
		"Default": {},
		"ParseTimeElsewhere": {
			params: map[string]string{"time_zone": "'+05:00'"},
			edit:   func(c *mysql.Config) { c.InterpolateParams, c.ParseTime, c.Loc = true, true, paris },
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := newDB(t, 4)
			s := newStore(t, open(t, d.with(cfg.params, cfg.edit), 4), nil)
			testRecordTimes(t, s, d.db)
		})
	}
}

func testRecordTimes(t *testing.T, s *mysqlstore.Store, db *sql.DB) {
	ctx := t.Context()
	now := func() time.Time { return dbNow(t, db) }
	const key = "ns:times"

	// A key without a record: claimed by a plain INSERT on the read's
	// clock.
	t0 := now()
	// A lease that outlasts the refusal below, however slow the machine.
	c, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
	require.NoError(t, err)
	require.True(t, c.Acquired)
	t1 := now()
	created := c.Record.CreatedAt
	between(t, t0, created, t1, "the claim's CreatedAt")
	require.Equal(t, c.Token, c.Record.Token, "an acquired claim's record carries its token")
	rec := get(t, s, key)
	require.Equal(t, c.Token, rec.Token)
	require.True(t, rec.CreatedAt.Equal(created), "Get's CreatedAt %v, the claim's %v", rec.CreatedAt, created)
	require.True(t, rec.CompletedAt.IsZero(), "a processing record has no CompletedAt")

	refused, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Second})
	require.NoError(t, err)
	require.False(t, refused.Acquired)
	require.True(t, refused.Record.Token.IsZero(), "a refused claim is not handed the holder's token")
	require.True(t, refused.Record.CreatedAt.Equal(created))

	t0 = now()
	require.NoError(t, s.Release(ctx, store.ReleaseRequest{Key: key, Token: c.Token, Error: "boom", Retention: time.Hour}))
	t1 = now()
	rec = get(t, s, key)
	require.Equal(t, store.StateFailed, rec.State)
	require.Equal(t, c.Token, rec.Token, "a failed record keeps the token that released it")
	require.True(t, rec.CreatedAt.Equal(created), "Release changed CreatedAt to %v", rec.CreatedAt)
	between(t, t0, rec.CompletedAt, t1, "a failed record's CompletedAt")

	// A retry of the failed record (the claim statement): created when
	// the first claim was.
	retry, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: 100 * time.Millisecond})
	require.NoError(t, err)
	require.True(t, retry.Acquired)
	require.Equal(t, 2, retry.Record.Attempt)
	require.True(t, retry.Record.CreatedAt.Equal(created), "a retry changed CreatedAt to %v", retry.Record.CreatedAt)
	rec = get(t, s, key)
	require.Equal(t, retry.Token, rec.Token)
	require.True(t, rec.CreatedAt.Equal(created))
	require.True(t, rec.CompletedAt.IsZero(), "a retried record is processing: no CompletedAt")

	// A takeover of the ended lease: the same.
	waitDBTime(t, db, retry.Record.LeaseUntil)
	taken, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
	require.NoError(t, err)
	require.True(t, taken.Acquired)
	require.Equal(t, 3, taken.Record.Attempt)
	require.True(t, taken.Record.CreatedAt.Equal(created), "a takeover changed CreatedAt to %v", taken.Record.CreatedAt)
	require.True(t, get(t, s, key).CreatedAt.Equal(created))

	t0 = now()
	require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: key, Token: taken.Token, Result: []byte("ok"), Retention: time.Hour}))
	t1 = now()
	rec = get(t, s, key)
	require.Equal(t, store.StateCompleted, rec.State)
	require.Equal(t, taken.Token, rec.Token, "a completed record keeps the token that completed it")
	require.True(t, rec.CreatedAt.Equal(created))
	between(t, t0, rec.CompletedAt, t1, "a completed record's CompletedAt")
	completedAt := rec.CompletedAt

	require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: key, Token: taken.Token, Result: []byte("again"), Retention: time.Hour}))
	require.True(t, get(t, s, key).CompletedAt.Equal(completedAt), "completing again changed CompletedAt")

	dup, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
	require.NoError(t, err)
	require.False(t, dup.Acquired)
	require.True(t, dup.Record.Token.IsZero(), "a duplicate is not handed the token that completed the record")
	require.True(t, dup.Record.CompletedAt.Equal(completedAt))

	var scanned []store.Record
	for r, err := range s.Scan(ctx, "ns:") {
		require.NoError(t, err)
		scanned = append(scanned, r)
	}
	require.Len(t, scanned, 1)
	require.Equal(t, taken.Token, scanned[0].Token)
	require.True(t, scanned[0].CreatedAt.Equal(created))
	require.True(t, scanned[0].CompletedAt.Equal(completedAt))

	// Gone past its retention: claimed afresh (the claim statement),
	// created now. The retention is ended in the table rather than waited
	// out: a short one could end before the duplicate above on a busy
	// machine.
	_, err = db.ExecContext(ctx, "UPDATE dedup_records SET expires_at = UTC_TIMESTAMP(6) WHERE `key` = ?", key)
	require.NoError(t, err)
	t0 = now()
	fresh, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
	require.NoError(t, err)
	t1 = now()
	require.True(t, fresh.Acquired)
	require.Equal(t, 1, fresh.Record.Attempt)
	between(t, t0, fresh.Record.CreatedAt, t1, "a gone record claimed again: CreatedAt")
	require.True(t, get(t, s, key).CreatedAt.Equal(fresh.Record.CreatedAt))
	require.True(t, get(t, s, key).CompletedAt.IsZero())

	require.NoError(t, s.Release(ctx, store.ReleaseRequest{Key: key, Token: fresh.Token, Error: "boom", Retention: time.Hour}))
	deleted, found, err := s.DeleteIf(ctx, store.DeleteRequest{Key: key})
	require.NoError(t, err)
	require.True(t, deleted)
	require.Equal(t, fresh.Token, found.Token)
	require.True(t, found.CreatedAt.Equal(fresh.Record.CreatedAt))
	require.False(t, found.CompletedAt.IsZero(), "DeleteIf's record: CompletedAt")
}

// TestRecordTimesBatch: AcquireBatch stamps the creation time of the
// claims it makes (the claim statement over many rows), CompleteBatch the
// completion time of the records it completes.
func TestRecordTimesBatch(t *testing.T) {
	t.Parallel()
	d := newDB(t, 4)
	s := d.store(t, nil)
	ctx := t.Context()
	keys := []string{"ns:b1", "ns:b2", "ns:b3"}
	reqs := make([]store.AcquireRequest, len(keys))
	for i, k := range keys {
		reqs[i] = store.AcquireRequest{Key: k, Lease: time.Minute}
	}
	t0 := dbNow(t, d.db)
	out := s.AcquireBatch(ctx, reqs)
	t1 := dbNow(t, d.db)
	done := make([]store.CompleteRequest, len(keys))
	for i, o := range out {
		require.NoError(t, o.Err)
		require.True(t, o.Claim.Acquired)
		require.Equal(t, o.Claim.Token, o.Claim.Record.Token)
		between(t, t0, o.Claim.Record.CreatedAt, t1, "AcquireBatch's CreatedAt")
		done[i] = store.CompleteRequest{Key: keys[i], Token: o.Claim.Token, Result: []byte("ok"), Retention: time.Hour}
	}
	t0 = dbNow(t, d.db)
	for i, err := range s.CompleteBatch(ctx, done) {
		require.NoError(t, err, keys[i])
	}
	t1 = dbNow(t, d.db)
	for i, k := range keys {
		rec := get(t, s, k)
		require.True(t, rec.CreatedAt.Equal(out[i].Claim.Record.CreatedAt))
		require.Equal(t, out[i].Claim.Token, rec.Token)
		between(t, t0, rec.CompletedAt, t1, "CompleteBatch's CompletedAt")
	}
}

// TestTxHandlerStampsCompletion: the completion inside the handler's
// transaction sets the completion time as Complete does.
func TestTxHandlerStampsCompletion(t *testing.T) {
	t.Parallel()
	d := newDB(t, 4)
	s := d.store(t, nil)
	table := d.payments(t)
	rcv, err := dedup.NewReceiver(s, paymentID, txHandler(t, s, func(ctx context.Context, tx *sql.Tx, p payment) (receipt, error) {
		return receipt{PaymentID: p.ID}, insertPayment(ctx, tx, table, p, "w1")
	}, nil), &dedup.Config{Namespace: "pay"})
	require.NoError(t, err)

	t0 := dbNow(t, d.db)
	res, err := rcv.Handle(t.Context(), payment{ID: "p1", Amount: 10})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, res.Status)
	t1 := dbNow(t, d.db)
	rec := get(t, s, "pay:p1")
	require.Equal(t, store.StateCompleted, rec.State)
	between(t, t0, rec.CreatedAt, t1, "CreatedAt")
	between(t, rec.CreatedAt, rec.CompletedAt, t1, "CompletedAt of a completion in the handler's transaction")
	require.False(t, rec.Token.IsZero())
}

// TestUpgradeFrom010: a table of mysqlstore 0.1.0, with records in it, is
// refused by New without Migrate (naming the columns and the ALTER
// TABLE), and upgraded in place by Migrate: the records it held read with
// zero times and the rest of their fields as they were, keep working
// (retried, completed), and new claims are stamped. Migrate then changes
// nothing.
func TestUpgradeFrom010(t *testing.T) {
	t.Parallel()
	d := newDB(t, 4)
	ctx := t.Context()
	d.exec(t, schema010)
	tok := store.NewToken()
	d.exec(t, "INSERT INTO old_records (`key`, state, token, attempt, fingerprint, result, last_error, lease_until, expires_at) VALUES "+
		"('ns:done', 'completed', ?, 2, 'fp', '\"r\"', 'boom', NULL, UTC_TIMESTAMP(6) + INTERVAL 1 HOUR), "+
		"('ns:failed', 'failed', ?, 1, '', NULL, 'boom', NULL, UTC_TIMESTAMP(6) + INTERVAL 1 HOUR), "+
		"('ns:held', 'processing', ?, 1, '', NULL, '', UTC_TIMESTAMP(6) + INTERVAL 1 HOUR, UTC_TIMESTAMP(6) + INTERVAL 2 HOUR)",
		tok[:], tok[:], tok[:])

	_, err := mysqlstore.New(ctx, d.db, &mysqlstore.Options{Table: "old_records"})
	requireMisconfigured(t, err, "created_at, completed_at, steps", "earlier version", "Options.Migrate",
		"ALTER TABLE `old_records` ADD COLUMN created_at DATETIME(6) NULL, ADD COLUMN completed_at DATETIME(6) NULL, ADD COLUMN steps LONGBLOB NULL")

	// Half upgraded (one column added by hand): Migrate adds the others.
	d.exec(t, "ALTER TABLE old_records ADD COLUMN created_at DATETIME(6) NULL")
	_, err = mysqlstore.New(ctx, d.db, &mysqlstore.Options{Table: "old_records"})
	requireMisconfigured(t, err, "lacks column(s) completed_at, steps", "ALTER TABLE `old_records` ADD COLUMN completed_at DATETIME(6) NULL, ADD COLUMN steps LONGBLOB NULL")

	s := newStore(t, d.db, &mysqlstore.Options{Table: "old_records"}) // Migrate: true

	done := get(t, s, "ns:done")
	require.Equal(t, store.StateCompleted, done.State)
	require.Equal(t, 2, done.Attempt)
	require.Equal(t, "fp", done.Fingerprint)
	require.Equal(t, []byte(`"r"`), done.Result)
	require.Equal(t, "boom", done.LastError)
	require.Equal(t, tok, done.Token)
	require.True(t, done.CreatedAt.IsZero(), "a record of 0.1.0 has no CreatedAt")
	require.True(t, done.CompletedAt.IsZero(), "a record of 0.1.0 has no CompletedAt")
	held := get(t, s, "ns:held")
	require.Equal(t, store.StateProcessing, held.State)
	require.False(t, held.LeaseUntil.IsZero())
	require.True(t, held.CreatedAt.IsZero())
	n := 0
	for rec, err := range s.Scan(ctx, "ns:") {
		require.NoError(t, err)
		require.True(t, rec.CreatedAt.IsZero() && rec.CompletedAt.IsZero(), "Scan of a record of 0.1.0: %+v", rec)
		n++
	}
	require.Equal(t, 3, n)

	retry, err := s.Acquire(ctx, store.AcquireRequest{Key: "ns:failed", Lease: time.Minute})
	require.NoError(t, err)
	require.True(t, retry.Acquired)
	require.Equal(t, 2, retry.Record.Attempt)
	require.True(t, retry.Record.CreatedAt.IsZero())
	t0 := dbNow(t, d.db)
	require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: "ns:failed", Token: retry.Token, Result: []byte("ok"), Retention: time.Hour}))
	t1 := dbNow(t, d.db)
	rec := get(t, s, "ns:failed")
	require.True(t, rec.CreatedAt.IsZero())
	between(t, t0, rec.CompletedAt, t1, "CompletedAt after the upgrade")

	t0 = dbNow(t, d.db)
	c, err := s.Acquire(ctx, store.AcquireRequest{Key: "ns:new", Lease: time.Minute})
	require.NoError(t, err)
	t1 = dbNow(t, d.db)
	between(t, t0, get(t, s, "ns:new").CreatedAt, t1, "CreatedAt of a claim after the upgrade")

	// A failed record that a 0.1.0 process took over keeps its completion
	// time in the row while processing: it is not shown.
	require.NoError(t, s.Release(ctx, store.ReleaseRequest{Key: "ns:new", Token: c.Token, Error: "boom", Retention: time.Hour}))
	d.exec(t, "UPDATE old_records SET state = 'processing', lease_until = UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE WHERE `key` = 'ns:new'")
	require.True(t, get(t, s, "ns:new").CompletedAt.IsZero(), "a processing record shows no CompletedAt")

	require.NoError(t, s.Migrate(ctx), "Migrate of an up-to-date table")
}
