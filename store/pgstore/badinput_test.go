package pgstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/pgstore"
)

// TestKeysTheTableCannotHold: a key over MaxKeyLength, not valid UTF-8 or
// holding a NUL byte is refused with ErrInvalidKey by every call, without
// a round trip; through a receiver, such a message is dead-lettered as an
// invalid key, never retried forever.
func TestKeysTheTableCannotHold(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	s := db.store(t, nil)
	ctx := t.Context()
	token := store.NewToken()
	for name, key := range map[string]string{
		"TooLong":  strings.Repeat("k", pgstore.MaxKeyLength+1),
		"NotUTF8":  "ns:\xff\xfe",
		"NULByte":  "ns:a\x00b",
		"Empty":    "",
		"LongUTF8": strings.Repeat("é", pgstore.MaxKeyLength/2+1),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
			require.ErrorIs(t, err, store.ErrInvalidKey)
			require.ErrorIs(t, s.Complete(ctx, store.CompleteRequest{Key: key, Token: token, Retention: time.Hour}), store.ErrInvalidKey)
			require.ErrorIs(t, s.Release(ctx, store.ReleaseRequest{Key: key, Token: token, Retention: time.Hour}), store.ErrInvalidKey)
			require.ErrorIs(t, s.Extend(ctx, store.ExtendRequest{Key: key, Token: token, Lease: time.Minute}), store.ErrInvalidKey)
			_, err = s.Get(ctx, key)
			require.ErrorIs(t, err, store.ErrInvalidKey)
			require.ErrorIs(t, s.Delete(ctx, key), store.ErrInvalidKey)
			out := s.AcquireBatch(ctx, []store.AcquireRequest{{Key: key, Lease: time.Minute}, {Key: "ok:" + name, Lease: time.Minute}})
			require.ErrorIs(t, out[0].Err, store.ErrInvalidKey)
			require.True(t, out[1].Claim.Acquired, "a bad request of a batch fails alone")
		})
	}
	// The longest key the table holds, of characters that do not compress.
	longest := strings.Repeat("\U0001F600", pgstore.MaxKeyLength/4)
	c, err := s.Acquire(ctx, store.AcquireRequest{Key: longest, Lease: time.Minute})
	require.NoError(t, err)
	require.True(t, c.Acquired)

	rcv, err := dedup.NewReceiver(s, paymentID, func(context.Context, payment) (int, error) { return 1, nil },
		&dedup.Config{Namespace: "pay", MaxIDLength: 10 * pgstore.MaxKeyLength})
	require.NoError(t, err)
	res, err := rcv.Handle(ctx, payment{ID: strings.Repeat("x", pgstore.MaxKeyLength)})
	d := adapter.Bind(rcv).Decide(res, err)
	require.Equal(t, delivery.DeadLetter, d.Action)
	require.Equal(t, delivery.ReasonInvalidKey, d.Reason)
}

// TestOpaqueBytes: results and fingerprints are kept as given, whatever
// their bytes; a failure's text, which PostgreSQL text cannot hold as is,
// is kept as valid UTF-8 without NUL bytes, cut to 4 KiB.
func TestOpaqueBytes(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	s := db.store(t, nil)
	ctx := t.Context()
	fp := "\x00\xff fingerprint \xfe"
	result := []byte("\x00\x01\xff result")

	c, err := s.Acquire(ctx, store.AcquireRequest{Key: "k", Lease: time.Minute, Fingerprint: fp})
	require.NoError(t, err)
	require.Equal(t, fp, c.Record.Fingerprint)
	_, err = s.Acquire(ctx, store.AcquireRequest{Key: "k", Lease: time.Minute, Fingerprint: fp + "x"})
	require.ErrorIs(t, err, store.ErrKeyReused)

	bad := "boom \x00 \xff" + strings.Repeat("é", 5000)
	require.NoError(t, s.Release(ctx, store.ReleaseRequest{Key: "k", Token: c.Token, Error: bad, Retention: time.Hour}))
	rec, err := s.Get(ctx, "k")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(rec.LastError, "boom \uFFFD \uFFFD"), rec.LastError[:20])
	require.LessOrEqual(t, len(rec.LastError), 4096)
	require.NotContains(t, rec.LastError, "\x00")

	c, err = s.Acquire(ctx, store.AcquireRequest{Key: "k", Lease: time.Minute, Fingerprint: fp})
	require.NoError(t, err)
	require.True(t, c.Acquired)
	require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: "k", Token: c.Token, Result: result, Retention: time.Hour}))
	again, err := s.Acquire(ctx, store.AcquireRequest{Key: "k", Lease: time.Minute, Fingerprint: fp})
	require.NoError(t, err)
	require.Equal(t, result, again.Record.Result)
	require.Equal(t, fp, again.Record.Fingerprint)
}

// TestOptions: invalid options are ErrInvalidConfig from New; the table
// name may be schema-qualified or left to the search_path; Migrate runs
// twice without harm.
func TestOptions(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	ctx := t.Context()
	for name, o := range map[string]*pgstore.Options{
		"NegativeTimeout":   {Timeout: -time.Second},
		"NegativeAbandoned": {AbandonedTTL: -time.Second},
		"NegativeBatch":     {CleanupBatchSize: -1},
		"BadMode":           {QueryExecMode: pgx.QueryExecModeSimpleProtocol + 1},
		"Quote":             {Table: `dedup"; DROP TABLE x; --`},
		"ThreeParts":        {Table: "a.b.c"},
		"Digit":             {Table: "1table"},
		"Empty":             {Table: "public."},
		"TooLong":           {Table: strings.Repeat("t", 49)},
	} {
		_, err := pgstore.New(ctx, db.pool, o)
		require.ErrorIs(t, err, store.ErrInvalidConfig, name)
	}
	_, err := pgstore.New(ctx, nil, nil)
	require.ErrorIs(t, err, store.ErrInvalidConfig)

	s := db.store(t, nil)
	require.NoError(t, s.Migrate(ctx), "Migrate again")
	require.Contains(t, s.SchemaSQL(), `CREATE TABLE IF NOT EXISTS "`+db.schema+`"."dedup_records"`)

	// The default table, in the connection's search_path.
	cfg := db.pool.Config()
	cfg.ConnConfig.RuntimeParams["search_path"] = db.schema
	pool, err := pgxPool(cfg)
	require.NoError(t, err)
	defer pool.Close()
	def, err := pgstore.New(ctx, pool, &pgstore.Options{Migrate: true})
	require.NoError(t, err)
	require.Equal(t, pgstore.DefaultTable, def.Table())
	_, err = def.Acquire(ctx, store.AcquireRequest{Key: "k", Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, 1, db.count(t, "SELECT count(*) FROM "+db.table(pgstore.DefaultTable)))
}

// TestScanPrefixRange: Scan reads the prefix's key range in byte order,
// whatever characters the prefix ends with.
func TestScanPrefixRange(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	s := db.store(t, nil)
	ctx := t.Context()
	keys := []string{"é", "éa", "é\U0010FFFF", "ê", "e", "\U0010FFFF", "\U0010FFFFa", "zz"}
	for _, k := range keys {
		_, err := s.Acquire(ctx, store.AcquireRequest{Key: k, Lease: time.Minute})
		require.NoError(t, err)
	}
	scan := func(prefix string) []string {
		var got []string
		for rec, err := range s.Scan(ctx, prefix) {
			require.NoError(t, err)
			got = append(got, rec.Key)
		}
		return got
	}
	require.Equal(t, []string{"é", "éa", "é\U0010FFFF"}, scan("é"))
	require.Equal(t, []string{"\U0010FFFF", "\U0010FFFFa"}, scan("\U0010FFFF"))
	require.Equal(t, []string{"e", "zz", "é", "éa", "é\U0010FFFF", "ê", "\U0010FFFF", "\U0010FFFFa"}, scan(""))
	for _, err := range s.Scan(ctx, "\xff") {
		require.ErrorIs(t, err, store.ErrInvalidKey)
	}

	// Past the last code point there is no successor: the range is open.
	for prefix, want := range map[string]string{"a": "b", "a\U0010FFFF": "b", "\uD7FF": "\uE000", "": ""} {
		got, ok := pgstore.Successor(prefix)
		require.Equal(t, want != "", ok, prefix)
		require.Equal(t, want, got, prefix)
	}
	_, ok := pgstore.Successor("\U0010FFFF\U0010FFFF")
	require.False(t, ok)
}

// TestScanPages: Scan reads pages of 500 records and stops when the loop
// breaks.
func TestScanPages(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	s := db.store(t, nil)
	db.exec(t, `INSERT INTO `+db.table("dedup_records")+` (key, state, token, attempt, expires_at)
SELECT 'page:' || lpad(g::text, 5, '0'), 'failed', gen_random_uuid(), 1, clock_timestamp() + interval '1 hour' FROM generate_series(1, 1234) g`)
	n, last := 0, ""
	for rec, err := range s.Scan(t.Context(), "page:") {
		require.NoError(t, err)
		require.Greater(t, rec.Key, last, "key order")
		require.Equal(t, store.StateFailed, rec.State)
		last = rec.Key
		n++
	}
	require.Equal(t, 1234, n)
}

// TestDuplicateLocksNothing: a duplicate of a completed record, and a
// delivery of a key held under a live lease, are answered by a read: the
// claim statement locks no row (a lock would mark the row's xmax and cost
// a commit record, flushed to the WAL), so duplicates cost no write.
func TestDuplicateLocksNothing(t *testing.T) {
	t.Parallel()
	db := newDB(t, 2)
	s := db.store(t, nil)
	ctx := t.Context()
	xmax := func(key string) string {
		var x string
		require.NoError(t, db.pool.QueryRow(ctx, "SELECT xmax::text FROM "+db.table("dedup_records")+" WHERE key = $1", key).Scan(&x))
		return x
	}
	done, err := s.Acquire(ctx, store.AcquireRequest{Key: "done", Lease: time.Minute})
	require.NoError(t, err)
	require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: "done", Token: done.Token, Result: []byte("r"), Retention: time.Hour}))
	held, err := s.Acquire(ctx, store.AcquireRequest{Key: "held", Lease: time.Minute})
	require.NoError(t, err)
	require.True(t, held.Acquired)
	require.Equal(t, "0", xmax("done"))
	require.Equal(t, "0", xmax("held"))

	c, err := s.Acquire(ctx, store.AcquireRequest{Key: "done", Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, store.StateCompleted, c.Record.State)
	out := s.AcquireBatch(ctx, []store.AcquireRequest{{Key: "done", Lease: time.Minute}, {Key: "held", Lease: time.Minute}})
	require.Equal(t, store.StateCompleted, out[0].Claim.Record.State)
	require.Equal(t, store.StateProcessing, out[1].Claim.Record.State)
	require.False(t, out[1].Claim.Acquired)
	c, err = s.Acquire(ctx, store.AcquireRequest{Key: "held", Lease: time.Minute})
	require.NoError(t, err)
	require.False(t, c.Acquired)
	require.Equal(t, "0", xmax("done"), "a duplicate locked the completed row")
	require.Equal(t, "0", xmax("held"), "a refused claim locked the held row")
}
