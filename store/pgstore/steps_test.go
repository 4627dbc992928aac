package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/pgstore"
)

// saveStep records name = value for the claim of key and token, outside
// any transaction.
func saveStep(t *testing.T, s *pgstore.Store, key string, tok store.Token, name, value string) {
	t.Helper()
	require.NoError(t, s.SaveStep(t.Context(), store.SaveStepRequest{Key: key, Token: tok, Name: name, Value: []byte(value), Retention: time.Hour}), "SaveStep(%q, %q)", key, name)
}

// stepMap is steps by name, their values as strings.
func stepMap(steps []store.StepRecord) map[string]string {
	out := make(map[string]string, len(steps))
	for _, st := range steps {
		if _, dup := out[st.Name]; dup {
			out[st.Name+" (again)"] = string(st.Value)
			continue
		}
		out[st.Name] = string(st.Value)
	}
	return out
}

// loadSteps reads the step records of the claim of key and token, under
// ctx (which may carry a handler's transaction).
func loadSteps(ctx context.Context, t *testing.T, s *pgstore.Store, key string, tok store.Token) map[string]string {
	t.Helper()
	steps, err := s.LoadSteps(ctx, store.StepsRequest{Key: key, Token: tok})
	require.NoError(t, err, "LoadSteps(%q)", key)
	return stepMap(steps)
}

// acquire claims key, which must be granted.
func acquire(t *testing.T, s *pgstore.Store, key string) store.Claim {
	t.Helper()
	c, err := s.Acquire(t.Context(), store.AcquireRequest{Key: key, Lease: time.Minute})
	require.NoError(t, err)
	require.True(t, c.Acquired, "Acquire(%q): %+v", key, c.Record)
	return c
}

// TestStepsFreshAfterExpiry: a claim that reuses the row of a gone record
// (completed or failed past its retention, a claim past its lease plus
// AbandonedTTL) starts without step records, through Acquire and
// AcquireBatch; a takeover of a failed record, or of a claim whose lease
// ended, keeps them. Cleanup deletes them with the row.
func TestStepsFreshAfterExpiry(t *testing.T) {
	t.Parallel()
	db := newDB(t, 4)
	s := db.store(t, nil)
	ctx := t.Context()
	table := db.table("dedup_records")
	gone := func(key string) {
		t.Helper()
		db.exec(t, "UPDATE "+table+" SET expires_at = clock_timestamp() - interval '1 second', lease_until = least(lease_until, clock_timestamp() - interval '2 seconds') WHERE key = $1", key)
		require.Equal(t, 1, db.count(t, "SELECT count(*) FROM "+table+" WHERE key = $1 AND expires_at <= clock_timestamp() AND steps IS NOT NULL", key),
			"the gone row of %s is still there, with its steps: the claim reuses it", key)
	}
	settle := map[string]func(key string, tok store.Token){
		"completed": func(key string, tok store.Token) {
			require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: key, Token: tok, Result: []byte("r"), Retention: time.Hour}))
		},
		"failed": func(key string, tok store.Token) {
			require.NoError(t, s.Release(ctx, store.ReleaseRequest{Key: key, Token: tok, Error: "boom", Retention: time.Hour}))
		},
		"processing": func(string, store.Token) {},
	}
	for state, settleIt := range settle {
		for _, batch := range []bool{false, true} {
			key := fmt.Sprintf("ns:%s-%v", state, batch)
			c := acquire(t, s, key)
			saveStep(t, s, key, c.Token, "charge", "ch_1")
			settleIt(key, c.Token)
			gone(key)
			var again store.Claim
			if batch {
				out := s.AcquireBatch(ctx, []store.AcquireRequest{{Key: key, Lease: time.Minute}})
				require.NoError(t, out[0].Err)
				again = out[0].Claim
			} else {
				again = acquire(t, s, key)
			}
			require.True(t, again.Acquired, "%s: the gone record is claimed", key)
			require.Equal(t, 1, again.Record.Attempt, "%s: claimed afresh", key)
			require.Empty(t, loadSteps(ctx, t, s, key, again.Token), "%s: a fresh record has no step records", key)
			require.Empty(t, get(t, s, key).Steps, "%s: Get of a fresh record", key)
		}
	}

	// A failed record taken over, and a claim whose lease ended taken
	// over, keep theirs.
	c := acquire(t, s, "ns:retried")
	saveStep(t, s, "ns:retried", c.Token, "charge", "ch_2")
	require.NoError(t, s.Release(ctx, store.ReleaseRequest{Key: "ns:retried", Token: c.Token, Error: "boom", Retention: time.Hour}))
	c = acquire(t, s, "ns:retried")
	require.Equal(t, 2, c.Record.Attempt)
	require.Equal(t, map[string]string{"charge": "ch_2"}, loadSteps(ctx, t, s, "ns:retried", c.Token))

	c = acquire(t, s, "ns:ended")
	saveStep(t, s, "ns:ended", c.Token, "charge", "ch_3")
	db.exec(t, "UPDATE "+table+" SET lease_until = clock_timestamp() - interval '1 second' WHERE key = 'ns:ended'")
	c2 := acquire(t, s, "ns:ended")
	require.Equal(t, 2, c2.Record.Attempt)
	require.Equal(t, map[string]string{"charge": "ch_3"}, loadSteps(ctx, t, s, "ns:ended", c2.Token))
	require.ErrorIs(t, s.SaveStep(ctx, store.SaveStepRequest{Key: "ns:ended", Token: c.Token, Name: "late", Retention: time.Hour}), store.ErrLeaseLost,
		"the token whose lease was taken over")

	// Cleanup deletes a gone record's row, its steps in it.
	gone("ns:ended")
	n, err := s.Cleanup(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Zero(t, db.count(t, "SELECT count(*) FROM "+table+" WHERE key = 'ns:ended'"))
}

// TestStepsLog: the steps column's log as the store reads it back: a name
// saved again is replaced (the last save wins), through Get, Scan and
// LoadSteps, with many names; names of any valid UTF-8 (NUL, the longest)
// and empty values are kept as they are; bad names are refused before any
// round trip; a column the store did not write is an error, not a panic.
func TestStepsLog(t *testing.T) {
	t.Parallel()
	db := newDB(t, 4)
	s := db.store(t, nil)
	ctx := t.Context()
	c := acquire(t, s, "ns:k")
	want := map[string]string{}
	for i := range 40 {
		name := fmt.Sprintf("step-%02d", i)
		saveStep(t, s, "ns:k", c.Token, name, "first")
		want[name] = "first"
	}
	for i := 0; i < 40; i += 3 {
		name := fmt.Sprintf("step-%02d", i)
		saveStep(t, s, "ns:k", c.Token, name, "second "+name)
		want[name] = "second " + name
	}
	odd := []string{"a\x00b", strings.Repeat("é", store.MaxStepNameLen/2), "日本"}
	for _, name := range odd {
		saveStep(t, s, "ns:k", c.Token, name, name)
		want[name] = name
	}
	require.NoError(t, s.SaveStep(ctx, store.SaveStepRequest{Key: "ns:k", Token: c.Token, Name: "nil", Retention: time.Hour}))
	want["nil"] = ""
	require.Equal(t, want, loadSteps(ctx, t, s, "ns:k", c.Token))
	require.Equal(t, want, stepMap(get(t, s, "ns:k").Steps))
	n := 0
	for rec, err := range s.Scan(ctx, "ns:") {
		require.NoError(t, err)
		require.Equal(t, want, stepMap(rec.Steps))
		n++
	}
	require.Equal(t, 1, n)
	steps, err := s.LoadSteps(ctx, store.StepsRequest{Key: "ns:k", Token: c.Token})
	require.NoError(t, err)
	for _, st := range steps {
		require.NotNil(t, st.Value, "step %q: an empty value is kept as empty, not nil", st.Name)
	}
	// The values are the caller's: appending to one leaves the others
	// as they are.
	for i := range steps {
		steps[i].Value = append(steps[i].Value, strings.Repeat("Z", 600)...)
	}
	for _, st := range steps {
		require.Equal(t, want[st.Name]+strings.Repeat("Z", 600), string(st.Value), "step %q after appending to the others", st.Name)
	}

	for _, name := range []string{"", strings.Repeat("x", store.MaxStepNameLen+1), "bad\xff"} {
		err := s.SaveStep(ctx, store.SaveStepRequest{Key: "ns:k", Token: c.Token, Name: name, Retention: time.Hour})
		require.ErrorIs(t, err, store.ErrInvalidConfig, "name %q", name)
	}
	require.ErrorIs(t, s.SaveStep(ctx, store.SaveStepRequest{Key: "ns:k", Name: "x", Retention: time.Hour}), store.ErrLeaseLost, "the zero token")
	_, err = s.LoadSteps(ctx, store.StepsRequest{Key: "ns:k"})
	require.ErrorIs(t, err, store.ErrLeaseLost, "the zero token")
	require.Equal(t, want, loadSteps(ctx, t, s, "ns:k", c.Token), "refused saves changed nothing")

	table := db.table("dedup_records")
	for _, bad := range []string{`\x02`, `\x0105616263`, `\x01ff`} {
		db.exec(t, "UPDATE "+table+" SET steps = $1::text::bytea WHERE key = 'ns:k'", bad)
		_, err := s.LoadSteps(ctx, store.StepsRequest{Key: "ns:k", Token: c.Token})
		require.ErrorContains(t, err, "steps column", "column %s", bad)
		_, err = s.Get(ctx, "ns:k")
		require.ErrorContains(t, err, "steps column", "column %s", bad)
	}
}

// TestStepsInTxHandler: a step that a TxHandler's function saves is kept
// in its transaction: invisible outside it until the commit, visible to
// LoadSteps inside it (beside the steps recorded before it), without
// locking the record's row (the heartbeat's Extend goes on), and written
// with the completion, so that it commits with it.
func TestStepsInTxHandler(t *testing.T) {
	t.Parallel()
	db := newDB(t, 4)
	s := db.store(t, nil)
	table := db.payments(t)
	h := txHandler(t, s, func(ctx context.Context, tx pgx.Tx, p payment) (receipt, error) {
		held, ok := store.ClaimFromContext(ctx)
		require.True(t, ok)
		// A step recorded outside the transaction, on its own connection.
		saveStep(t, s, held.Key, held.Token, "before", "outside")
		if err := insertPayment(ctx, tx, table, p, ""); err != nil {
			return receipt{}, err
		}
		for _, st := range []store.StepRecord{{Name: "charge", Value: []byte("ch_1")}, {Name: "before", Value: []byte("inside")}} {
			if err := s.SaveStep(ctx, store.SaveStepRequest{Key: held.Key, Token: held.Token, Name: st.Name, Value: st.Value, Retention: held.Retention}); err != nil {
				return receipt{}, err
			}
		}
		require.Equal(t, map[string]string{"before": "inside", "charge": "ch_1"}, loadSteps(ctx, t, s, held.Key, held.Token), "inside the transaction")
		require.Equal(t, map[string]string{"before": "outside"}, loadSteps(t.Context(), t, s, held.Key, held.Token), "outside the transaction, before its commit")
		// The heartbeat, on another connection: the row is not locked.
		bctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		require.NoError(t, s.Extend(bctx, store.ExtendRequest{Key: held.Key, Token: held.Token, Lease: time.Minute}),
			"the heartbeat waited for the row the handler's transaction locked")
		return receipt{PaymentID: p.ID}, nil
	}, nil)
	rcv, err := dedup.NewReceiver(s, paymentID, h, &dedup.Config{Namespace: "pay"})
	require.NoError(t, err)
	res, err := rcv.Handle(t.Context(), payment{ID: "p1", Amount: 1})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, res.Status)
	rec := get(t, s, "pay:p1")
	require.Equal(t, store.StateCompleted, rec.State)
	require.Equal(t, map[string]string{"before": "inside", "charge": "ch_1"}, stepMap(rec.Steps), "the transaction's steps committed with it")
	require.Equal(t, 1, db.count(t, "SELECT count(*) FROM "+table))
}

// TestStepsRolledBackWithTx: the steps a TxHandler's function saved are
// gone with its transaction when it rolls back (fn failed: the claim is
// released without them; the steps recorded outside it stay).
func TestStepsRolledBackWithTx(t *testing.T) {
	t.Parallel()
	db := newDB(t, 4)
	s := db.store(t, nil)
	h := txHandler(t, s, func(ctx context.Context, tx pgx.Tx, p payment) (receipt, error) {
		held, _ := store.ClaimFromContext(ctx)
		saveStep(t, s, held.Key, held.Token, "outside", "kept")
		if err := s.SaveStep(ctx, store.SaveStepRequest{Key: held.Key, Token: held.Token, Name: "charge", Value: []byte("ch_1"), Retention: held.Retention}); err != nil {
			return receipt{}, err
		}
		return receipt{}, errors.New("gateway timeout")
	}, nil)
	rcv, err := dedup.NewReceiver(s, paymentID, h, &dedup.Config{Namespace: "pay"})
	require.NoError(t, err)
	_, err = rcv.Handle(t.Context(), payment{ID: "p1", Amount: 1})
	require.ErrorContains(t, err, "gateway timeout")
	rec := get(t, s, "pay:p1")
	require.Equal(t, store.StateFailed, rec.State)
	require.Equal(t, map[string]string{"outside": "kept"}, stepMap(rec.Steps), "the rolled back transaction's step is gone")
}

// TestStepsRerunAfterSerializationFailure: when TxHandler reruns the
// function after a serialization failure, it tells the claim first
// (StepsRolledBack), and the rerun finds none of the rolled back run's
// steps; what the second run saved is what commits.
func TestStepsRerunAfterSerializationFailure(t *testing.T) {
	t.Parallel()
	db := newDB(t, 4)
	s := db.store(t, nil)
	var runs atomic.Int64
	gens := make([]uint64, 0, 2)
	h := txHandler(t, s, func(ctx context.Context, tx pgx.Tx, p payment) (receipt, error) {
		held, _ := store.ClaimFromContext(ctx)
		gens = append(gens, held.StepsGeneration())
		run := runs.Add(1)
		if run == 2 {
			require.Empty(t, loadSteps(ctx, t, s, held.Key, held.Token), "the rerun finds the first run's steps")
		}
		if err := s.SaveStep(ctx, store.SaveStepRequest{Key: held.Key, Token: held.Token, Name: "charge", Value: fmt.Appendf(nil, "run %d", run), Retention: held.Retention}); err != nil {
			return receipt{}, err
		}
		if run == 1 {
			// The heartbeat extends the lease after this transaction's
			// snapshot: its completion fails with 40001.
			if err := s.Extend(t.Context(), store.ExtendRequest{Key: held.Key, Token: held.Token, Lease: time.Minute}); err != nil {
				return receipt{}, err
			}
		}
		return receipt{PaymentID: p.ID}, nil
	}, &pgstore.TxOptions{Tx: pgx.TxOptions{IsoLevel: pgx.RepeatableRead}})
	rcv, err := dedup.NewReceiver(s, paymentID, h, &dedup.Config{Namespace: "pay"})
	require.NoError(t, err)
	res, err := rcv.Handle(t.Context(), payment{ID: "p1", Amount: 1})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, res.Status)
	require.EqualValues(t, 2, runs.Load())
	require.Equal(t, []uint64{0, 1}, gens, "StepsRolledBack is called once, before the rerun")
	require.Equal(t, map[string]string{"charge": "run 2"}, stepMap(get(t, s, "pay:p1").Steps))
}

// TestStepsInTxLeaseLost: inside the transaction, a step of a claim that
// was lost (its record deleted) fails at once with ErrLeaseLost, as
// outside it.
func TestStepsInTxLeaseLost(t *testing.T) {
	t.Parallel()
	db := newDB(t, 4)
	s := db.store(t, nil)
	var saveErr, loadErr error
	h := txHandler(t, s, func(ctx context.Context, tx pgx.Tx, p payment) (receipt, error) {
		held, _ := store.ClaimFromContext(ctx)
		require.NoError(t, s.Delete(t.Context(), held.Key))
		saveErr = s.SaveStep(ctx, store.SaveStepRequest{Key: held.Key, Token: held.Token, Name: "charge", Retention: held.Retention})
		_, loadErr = s.LoadSteps(ctx, store.StepsRequest{Key: held.Key, Token: held.Token})
		return receipt{}, saveErr
	}, nil)
	rcv, err := dedup.NewReceiver(s, paymentID, h, &dedup.Config{Namespace: "pay"})
	require.NoError(t, err)
	_, err = rcv.Handle(t.Context(), payment{ID: "p1", Amount: 1})
	require.ErrorIs(t, err, store.ErrLeaseLost)
	require.ErrorIs(t, saveErr, store.ErrLeaseLost)
	require.ErrorIs(t, loadErr, store.ErrLeaseLost)
	_, err = s.Get(t.Context(), "pay:p1")
	require.ErrorIs(t, err, store.ErrNotFound, "nothing was recorded")
}

// TestStepsWithTx: a handler that manages its own transaction names it
// with WithTx; CompleteTx, given that context, writes the steps saved
// under it, and they commit with the transaction. A transaction committed
// without CompleteTx keeps none of them (the receiver completes the
// record itself); without WithTx they are recorded at once.
func TestStepsWithTx(t *testing.T) {
	t.Parallel()
	db := newDB(t, 4)
	s := db.store(t, nil)
	var mode atomic.Value
	rcv, err := dedup.NewReceiver(s, paymentID, func(ctx context.Context, p payment) (receipt, error) {
		tx, err := db.pool.Begin(ctx)
		if err != nil {
			return receipt{}, err
		}
		defer func() { _ = tx.Rollback(context.Background()) }()
		held, _ := store.ClaimFromContext(ctx)
		m := mode.Load().(string)
		if m != "without WithTx" {
			ctx = s.WithTx(ctx, tx)
		}
		if err := s.SaveStep(ctx, store.SaveStepRequest{Key: held.Key, Token: held.Token, Name: "charge", Value: []byte(m), Retention: held.Retention}); err != nil {
			return receipt{}, err
		}
		if m == "without WithTx" {
			require.Equal(t, map[string]string{"charge": m}, loadSteps(t.Context(), t, s, held.Key, held.Token), "recorded at once")
		}
		if m != "no CompleteTx" {
			if err := s.CompleteTx(ctx, tx, []byte(`{}`)); err != nil {
				return receipt{}, err
			}
		}
		return receipt{}, tx.Commit(ctx)
	}, &dedup.Config{Namespace: "pay"})
	require.NoError(t, err)
	for i, m := range []string{"CompleteTx", "no CompleteTx", "without WithTx"} {
		mode.Store(m)
		id := fmt.Sprint("p", i)
		res, err := rcv.Handle(t.Context(), payment{ID: id})
		require.NoError(t, err, m)
		require.Equal(t, delivery.StatusProcessed, res.Status, m)
		rec := get(t, s, "pay:"+id)
		require.Equal(t, store.StateCompleted, rec.State, m)
		if m == "no CompleteTx" {
			require.Empty(t, rec.Steps, m)
			continue
		}
		require.Equal(t, map[string]string{"charge": m}, stepMap(rec.Steps), m)
	}
	require.Equal(t, context.Background(), s.WithTx(context.Background(), nil), "outside a handler, the context as it is")
}

// schemaBeforeSteps is the table as pgstore created it before step
// records: without the steps column.
const schemaBeforeSteps = `CREATE TABLE %s (
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
	completed_at timestamptz
)`

// TestUpgradeForSteps: a table of the version before step records, with
// records in it, is refused by New without Migrate (naming the column
// and the ALTER TABLE), and upgraded in place by Migrate: its records
// have no step records and keep working; a claim it holds records steps.
func TestUpgradeForSteps(t *testing.T) {
	t.Parallel()
	db := newDB(t, 4)
	ctx := t.Context()
	table := db.table("prior_records")
	db.exec(t, fmt.Sprintf(schemaBeforeSteps, table))
	db.exec(t, "CREATE INDEX prior_records_expires_at_idx ON "+table+" (expires_at)")
	tok := store.NewToken()
	db.exec(t, `INSERT INTO `+table+` (key, state, token, attempt, result, lease_until, expires_at, created_at, completed_at) VALUES
	('ns:done', 'completed', $1, 1, '"r"', NULL, clock_timestamp() + interval '1 hour', clock_timestamp(), clock_timestamp()),
	('ns:failed', 'failed', $1, 1, NULL, NULL, clock_timestamp() + interval '1 hour', clock_timestamp(), clock_timestamp()),
	('ns:held', 'processing', $1, 1, NULL, clock_timestamp() + interval '1 hour', clock_timestamp() + interval '2 hours', clock_timestamp(), NULL)`, tok)

	_, err := pgstore.New(ctx, db.pool, &pgstore.Options{Table: table})
	requireMisconfigured(t, err, "lacks column(s) steps", "earlier version", "Options.Migrate", "ADD COLUMN IF NOT EXISTS steps bytea")

	s, err := pgstore.New(ctx, db.pool, &pgstore.Options{Table: table, Migrate: true})
	require.NoError(t, err)
	require.Equal(t, 1, db.count(t, "SELECT count(*) FROM pg_attribute WHERE attrelid = $1::regclass AND attname = 'steps' AND NOT attisdropped", table))
	done := get(t, s, "ns:done")
	require.Equal(t, store.StateCompleted, done.State)
	require.Nil(t, done.Steps)
	require.Empty(t, loadSteps(ctx, t, s, "ns:held", tok), "a claim of the earlier version has no step records")
	saveStep(t, s, "ns:held", tok, "charge", "ch_1")
	require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: "ns:held", Token: tok, Result: []byte("ok"), Retention: time.Hour}))
	require.Equal(t, map[string]string{"charge": "ch_1"}, stepMap(get(t, s, "ns:held").Steps))
	c := acquire(t, s, "ns:failed")
	require.Equal(t, 2, c.Record.Attempt)
	require.Empty(t, loadSteps(ctx, t, s, "ns:failed", c.Token))
	require.NoError(t, s.Migrate(ctx), "migrating again changes nothing")
}

// TestNoStepsNoColumn: a message whose handler runs no step leaves the
// steps column NULL, through Handle and through TxHandler: its completion
// is the statement it was before step records.
func TestNoStepsNoColumn(t *testing.T) {
	t.Parallel()
	db := newDB(t, 4)
	s := db.store(t, nil)
	plain, err := dedup.NewReceiver(s, paymentID, func(context.Context, payment) (receipt, error) { return receipt{}, nil }, &dedup.Config{Namespace: "plain"})
	require.NoError(t, err)
	tx, err := dedup.NewReceiver(s, paymentID, txHandler(t, s, func(context.Context, pgx.Tx, payment) (receipt, error) { return receipt{}, nil }, nil), &dedup.Config{Namespace: "tx"})
	require.NoError(t, err)
	for _, h := range []func(context.Context, payment) (dedup.Result[receipt], error){plain.Handle, tx.Handle} {
		res, err := h(t.Context(), payment{ID: "p1"})
		require.NoError(t, err)
		require.Equal(t, delivery.StatusProcessed, res.Status)
	}
	require.Equal(t, 2, db.count(t, "SELECT count(*) FROM "+db.table("dedup_records")+" WHERE state = 'completed' AND steps IS NULL"))
}

// TestDedupStepInTxHandler: dedup.Step inside a TxHandler's function,
// end to end. A step whose transaction rolled back is not recorded, so
// the next delivery runs it again; when TxHandler reruns the function
// after a serialization failure, the receiver forgets the rolled back
// step (StepsRolledBack) and runs it again, instead of replaying it or
// refusing its name as repeated. (Inside a TxHandler, a step's record
// commits only with the completion, so no later delivery replays it.)
func TestDedupStepInTxHandler(t *testing.T) {
	t.Parallel()
	db := newDB(t, 4)
	s := db.store(t, nil)
	table := db.payments(t)
	var charges, runs atomic.Int64
	var failOnce, conflictOnce atomic.Bool
	h := txHandler(t, s, func(ctx context.Context, tx pgx.Tx, p payment) (receipt, error) {
		runs.Add(1)
		charge, err := dedup.Step(ctx, "charge", func(context.Context) (string, error) {
			return fmt.Sprint("ch_", charges.Add(1)), nil
		})
		if err != nil {
			return receipt{}, err
		}
		if err := insertPayment(ctx, tx, table, p, charge); err != nil {
			return receipt{}, err
		}
		if failOnce.CompareAndSwap(true, false) {
			return receipt{}, errors.New("warehouse down")
		}
		if conflictOnce.CompareAndSwap(true, false) {
			held, _ := store.ClaimFromContext(ctx)
			if err := s.Extend(t.Context(), store.ExtendRequest{Key: held.Key, Token: held.Token, Lease: time.Minute}); err != nil {
				return receipt{}, err
			}
		}
		return receipt{PaymentID: p.ID, Worker: charge}, nil
	}, &pgstore.TxOptions{Tx: pgx.TxOptions{IsoLevel: pgx.RepeatableRead}})
	rcv, err := dedup.NewReceiver(s, paymentID, h, &dedup.Config{Namespace: "pay", Steps: true})
	require.NoError(t, err)

	// The first delivery fails after its step: rolled back with it.
	failOnce.Store(true)
	_, err = rcv.Handle(t.Context(), payment{ID: "p1"})
	require.ErrorContains(t, err, "warehouse down")
	require.Empty(t, get(t, s, "pay:p1").Steps)
	// The redelivery runs the step again; its completion meets a
	// serialization failure, and the rerun runs the step once more.
	conflictOnce.Store(true)
	res, err := rcv.Handle(t.Context(), payment{ID: "p1"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, res.Status)
	require.EqualValues(t, 3, charges.Load(), "the step ran in each of the three transactions")
	require.EqualValues(t, 3, runs.Load())
	require.Equal(t, "ch_3", res.Value.Worker)
	rec := get(t, s, "pay:p1")
	require.Len(t, rec.Steps, 1)
	require.Equal(t, "charge", rec.Steps[0].Name)
	require.Equal(t, 1, db.count(t, "SELECT count(*) FROM "+table+" WHERE worker = 'ch_3'"))
	require.Equal(t, 1, db.count(t, "SELECT count(*) FROM "+table))
}
