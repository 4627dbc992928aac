package pgoutbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/internal/testenv"
	"github.com/dedup-go/dedup/outbox"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/pgoutbox"
	"github.com/dedup-go/dedup/store/pgoutbox/internal/relaytest"
)

// TestWriterCommits: a handler's business row and its two messages (one
// named, one by position) commit together; each message's id derives from
// the claim's key and its name or position, and its bucket from its
// ordering key.
func TestWriterCommits(t *testing.T) {
	t.Parallel()
	db := relaytest.NewDB(t, 4)
	ob := db.Outbox(t, nil)
	s := db.Store(t)
	db.Exec(t, "CREATE TABLE "+db.Table("orders")+" (id text NOT NULL)")
	var ids []string
	rcv := txReceiver(t, s, "shop", func(ctx context.Context, tx pgx.Tx, o order) (string, error) {
		if _, err := tx.Exec(ctx, "INSERT INTO "+db.Table("orders")+" (id) VALUES ($1)", o.ID); err != nil {
			return "", err
		}
		w, err := ob.Writer(ctx, tx)
		if err != nil {
			return "", err
		}
		a, err := w.Add(ctx, pgoutbox.Message{Name: "created", Destination: "orders.created", OrderingKey: o.Customer,
			Body: []byte(`{"id":"` + o.ID + `"}`), Header: map[string]string{"Event-Type": "order.created"}})
		if err != nil {
			return "", err
		}
		b, err := w.Add(ctx, pgoutbox.Message{Destination: "orders.audit", Body: []byte("audit")})
		ids = append(ids, a, b)
		return "ok", err
	})
	res, err := rcv.Handle(t.Context(), order{ID: "o-1", Customer: "c-7"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, res.Status)

	require.Equal(t, []string{outbox.MessageID("shop:o-1", "created"), outbox.MessageID("shop:o-1", "2")}, ids)
	rows := outboxRows(t, db, db.Table("dedup_outbox"))
	require.Len(t, rows, 2)
	require.Equal(t, ids[0], rows[0].ID)
	require.Equal(t, "shop:o-1", rows[0].ClaimKey)
	require.Equal(t, "created", rows[0].Name)
	require.Equal(t, "orders.created", rows[0].Destination)
	require.Equal(t, "c-7", rows[0].OrderingKey)
	require.Equal(t, `{"id":"o-1"}`, string(rows[0].Body))
	require.Equal(t, map[string]string{"Event-Type": "order.created"}, rows[0].Header)
	require.Equal(t, int(relaytest.FNV32a("c-7")%uint32(pgoutbox.DefaultBuckets)), rows[0].Bucket, "the bucket of the ordering key")
	require.Equal(t, ids[1], rows[1].ID)
	require.Equal(t, "2", rows[1].Name)
	require.Nil(t, rows[1].Header)
	require.Equal(t, int(relaytest.FNV32a(ids[1])%uint32(pgoutbox.DefaultBuckets)), rows[1].Bucket, "no ordering key: the bucket of the id")
	require.False(t, rows[0].Sent)
	require.Equal(t, 1, db.Count(t, "SELECT count(*) FROM "+db.Table("orders")))
}

// TestWriterRollbackThenRerun: a handler that fails after adding its
// messages leaves nothing; when it runs again (attempt 2, a new claim) it
// writes the same ids, once.
func TestWriterRollbackThenRerun(t *testing.T) {
	t.Parallel()
	db := relaytest.NewDB(t, 4)
	ob := db.Outbox(t, nil)
	s := db.Store(t)
	var runs [][]string
	rcv := txReceiver(t, s, "shop", func(ctx context.Context, tx pgx.Tx, o order) (string, error) {
		held, _ := store.ClaimFromContext(ctx)
		w, err := ob.Writer(ctx, tx)
		if err != nil {
			return "", err
		}
		var ids []string
		for _, name := range []string{"", "shipped", ""} {
			id, err := w.Add(ctx, pgoutbox.Message{Name: name, Destination: "orders.events", OrderingKey: o.ID, Body: []byte(name)})
			if err != nil {
				return "", err
			}
			ids = append(ids, id)
		}
		runs = append(runs, ids)
		if held.Attempt == 1 {
			return "", errors.New("the payment provider timed out")
		}
		return "ok", nil
	})
	_, err := rcv.Handle(t.Context(), order{ID: "o-2"})
	require.Error(t, err)
	require.Zero(t, db.Count(t, "SELECT count(*) FROM "+db.Table("dedup_outbox")), "a rolled-back handler's messages")
	res, err := rcv.Handle(t.Context(), order{ID: "o-2"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, res.Status)

	require.Len(t, runs, 2)
	require.Equal(t, runs[0], runs[1], "the run after the rollback wrote other ids")
	require.Equal(t, []string{outbox.MessageID("shop:o-2", "1"), outbox.MessageID("shop:o-2", "shipped"), outbox.MessageID("shop:o-2", "3")}, runs[1])
	var got []string
	for _, r := range outboxRows(t, db, db.Table("dedup_outbox")) {
		got = append(got, r.ID)
	}
	require.Equal(t, runs[1], got, "written once, in the order of Add")
}

// TestWriterExistingID: a handler that runs again for a message whose
// record is gone (Forget, or past its retention) gets the same ids, and
// the messages are not written twice.
func TestWriterExistingID(t *testing.T) {
	t.Parallel()
	db := relaytest.NewDB(t, 4)
	ob := db.Outbox(t, nil)
	s := db.Store(t)
	var ids []string
	rcv := txReceiver(t, s, "shop", func(ctx context.Context, tx pgx.Tx, o order) (string, error) {
		w, err := ob.Writer(ctx, tx)
		if err != nil {
			return "", err
		}
		id, err := w.Add(ctx, pgoutbox.Message{Destination: "orders.events", Body: []byte("x")})
		ids = append(ids, id)
		return "ok", err
	})
	_, err := rcv.Handle(t.Context(), order{ID: "o-3"})
	require.NoError(t, err)
	require.NoError(t, rcv.Forget(t.Context(), "o-3"))
	res, err := rcv.Handle(t.Context(), order{ID: "o-3"})
	require.NoError(t, err)
	require.Equal(t, delivery.StatusProcessed, res.Status, "the record was forgotten: the handler ran again")
	require.Len(t, ids, 2)
	require.Equal(t, ids[0], ids[1])
	require.Equal(t, 1, db.Count(t, "SELECT count(*) FROM "+db.Table("dedup_outbox")))
}

// TestWriterRefuses: bad input is an error inside the handler, matching
// ErrInvalidMessage and permanent: the transaction rolls back (the
// business row too), and the incoming message is dead-lettered at once.
func TestWriterRefuses(t *testing.T) {
	t.Parallel()
	db := relaytest.NewDB(t, 4)
	ob := db.Outbox(t, &pgoutbox.Options{MaxBodySize: 64, MaxHeaderSize: 128})
	s := db.Store(t)
	db.Exec(t, "CREATE TABLE "+db.Table("orders")+" (id text NOT NULL)")
	ok := pgoutbox.Message{Destination: "orders.created", Body: []byte("x")}
	with := func(f func(*pgoutbox.Message)) []pgoutbox.Message {
		m := ok
		f(&m)
		return []pgoutbox.Message{m}
	}
	cases := map[string][]pgoutbox.Message{
		"no destination":          with(func(m *pgoutbox.Message) { m.Destination = "" }),
		"destination with space":  with(func(m *pgoutbox.Message) { m.Destination = "orders created" }),
		"destination too long":    with(func(m *pgoutbox.Message) { m.Destination = strings.Repeat("d", 256) }),
		"destination not UTF-8":   with(func(m *pgoutbox.Message) { m.Destination = "orders.\xff" }),
		"body over the limit":     with(func(m *pgoutbox.Message) { m.Body = make([]byte, 65) }),
		"headers over the limit":  with(func(m *pgoutbox.Message) { m.Header = map[string]string{"A": strings.Repeat("v", 128)} }),
		"header name not a token": with(func(m *pgoutbox.Message) { m.Header = map[string]string{"Event Type": "x"} }),
		"header name empty":       with(func(m *pgoutbox.Message) { m.Header = map[string]string{"": "x"} }),
		"header value with CRLF":  with(func(m *pgoutbox.Message) { m.Header = map[string]string{"A": "x\r\nB: y"} }),
		"ordering key with NUL":   with(func(m *pgoutbox.Message) { m.OrderingKey = "c\x00" }),
		"ordering key too long":   with(func(m *pgoutbox.Message) { m.OrderingKey = strings.Repeat("k", 1025) }),
		"name not UTF-8":          with(func(m *pgoutbox.Message) { m.Name = "\xfe" }),
		"name used twice":         {{Name: "a", Destination: "d", Body: []byte("1")}, {Name: "a", Destination: "d", Body: []byte("2")}},
		"name of a position":      {{Name: "2", Destination: "d", Body: []byte("1")}, {Destination: "d", Body: []byte("2")}},
	}
	i := 0
	for name, msgs := range cases {
		i++
		id := fmt.Sprintf("o-%d", i)
		var addErr error
		rcv := txReceiver(t, s, "refuse", func(ctx context.Context, tx pgx.Tx, o order) (string, error) {
			if _, err := tx.Exec(ctx, "INSERT INTO "+db.Table("orders")+" (id) VALUES ($1)", o.ID); err != nil {
				return "", err
			}
			w, err := ob.Writer(ctx, tx)
			if err != nil {
				return "", err
			}
			for _, m := range msgs {
				if _, addErr = w.Add(ctx, m); addErr != nil {
					return "", addErr
				}
			}
			return "ok", nil
		})
		res, err := rcv.Handle(t.Context(), order{ID: id})
		require.ErrorIs(t, addErr, pgoutbox.ErrInvalidMessage, name)
		require.True(t, dedup.IsPermanent(addErr), name)
		require.Equal(t, delivery.DeadLetter, adapter.Bind(rcv).Decide(res, err).Action, name)
		require.Zero(t, db.Count(t, "SELECT count(*) FROM "+db.Table("orders")+" WHERE id = $1", id), "%s: the business row rolled back", name)
	}
	require.Zero(t, db.Count(t, "SELECT count(*) FROM "+db.Table("dedup_outbox")))

	// Right at the limits is fine.
	rcv := txReceiver(t, s, "limits", func(ctx context.Context, tx pgx.Tx, o order) (string, error) {
		w, err := ob.Writer(ctx, tx)
		if err != nil {
			return "", err
		}
		_, err = w.Add(ctx, pgoutbox.Message{Destination: strings.Repeat("d", 255), OrderingKey: strings.Repeat("k", 1024),
			Body: make([]byte, 64), Header: map[string]string{"A": strings.Repeat("v", 127)}})
		return "ok", err
	})
	_, err := rcv.Handle(t.Context(), order{ID: "limits"})
	require.NoError(t, err)
}

// TestWriterOutsideHandler: no claim, no writer.
func TestWriterOutsideHandler(t *testing.T) {
	t.Parallel()
	db := relaytest.NewDB(t, 2)
	ob := db.Outbox(t, nil)
	tx, err := db.Pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = ob.Writer(t.Context(), tx)
	require.ErrorIs(t, err, dedup.ErrNoClaim)
}

// TestWriterNotifies: a LISTEN on the outbox's channel hears the bucket of
// each committed message, at commit, and nothing of a rollback.
func TestWriterNotifies(t *testing.T) {
	t.Parallel()
	db := relaytest.NewDB(t, 4)
	table := db.Table("dedup_outbox")
	ob := db.Outbox(t, nil)
	s := db.Store(t)
	conn, err := pgx.Connect(t.Context(), db.DSN)
	require.NoError(t, err)
	defer func() { _ = conn.Close(context.Background()) }()
	_, err = conn.Exec(t.Context(), "LISTEN "+pgx.Identifier{table}.Sanitize())
	require.NoError(t, err)

	var mu sync.Mutex
	fail := true
	rcv := txReceiver(t, s, "shop", func(ctx context.Context, tx pgx.Tx, o order) (string, error) {
		w, err := ob.Writer(ctx, tx)
		if err != nil {
			return "", err
		}
		if _, err := w.Add(ctx, pgoutbox.Message{Destination: "orders.created", OrderingKey: o.Customer, Body: []byte("x")}); err != nil {
			return "", err
		}
		mu.Lock()
		defer mu.Unlock()
		if fail {
			return "", errors.New("rolled back")
		}
		return "ok", nil
	})
	_, err = rcv.Handle(t.Context(), order{ID: "o-1", Customer: "c-1"})
	require.Error(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	_, err = conn.WaitForNotification(ctx)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "a rolled-back message notified")
	// The connection is closed by a cancelled wait: listen again.
	conn, err = pgx.Connect(t.Context(), db.DSN)
	require.NoError(t, err)
	defer func() { _ = conn.Close(context.Background()) }()
	_, err = conn.Exec(t.Context(), "LISTEN "+pgx.Identifier{table}.Sanitize())
	require.NoError(t, err)

	mu.Lock()
	fail = false
	mu.Unlock()
	_, err = rcv.Handle(t.Context(), order{ID: "o-1", Customer: "c-1"})
	require.NoError(t, err)
	ctx, cancel = context.WithTimeout(t.Context(), testenv.WaitTimeout)
	defer cancel()
	n, err := conn.WaitForNotification(ctx)
	require.NoError(t, err)
	require.Equal(t, fmt.Sprint(relaytest.FNV32a("c-1")%uint32(ob.Buckets())), n.Payload)
}

// TestNewChecks: the outbox refuses a database without its tables, and
// the bucket count is the table's, fixed when it was made.
func TestNewChecks(t *testing.T) {
	t.Parallel()
	db := relaytest.NewDB(t, 2)
	_, err := pgoutbox.New(t.Context(), db.Pool, &pgoutbox.Options{Table: db.Table("missing")})
	require.ErrorIs(t, err, pgoutbox.ErrMisconfigured)
	require.ErrorIs(t, err, dedup.ErrInvalidConfig)

	ob := db.Outbox(t, &pgoutbox.Options{Buckets: 8})
	require.Equal(t, 8, ob.Buckets())
	again := db.Outbox(t, &pgoutbox.Options{Buckets: 16})
	require.Equal(t, 8, again.Buckets(), "the table's count wins")
	require.Equal(t, 8, db.Count(t, "SELECT count(*) FROM "+db.Table("dedup_outbox_leases")))

	for _, bad := range []*pgoutbox.Options{{Table: "a.b.c"}, {Table: "bad-name"}, {Buckets: -1}, {Buckets: 5000}, {MaxBodySize: -1}} {
		_, err := pgoutbox.New(t.Context(), db.Pool, bad)
		require.ErrorIs(t, err, dedup.ErrInvalidConfig, "%+v", bad)
	}
	_, err = pgoutbox.New(t.Context(), nil, nil)
	require.ErrorIs(t, err, dedup.ErrInvalidConfig)
}
