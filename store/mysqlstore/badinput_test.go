package mysqlstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/adapter"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/mysqlstore"
)

// TestKeysAreBytes: keys are compared byte by byte, as the receiver's ids
// are: keys that a case-insensitive collation would merge (Order-1 and
// order-1), or a PAD SPACE one ("a" and "a "), or an accent-insensitive one
// (e and é), are distinct records; and any bytes are a key.
func TestKeysAreBytes(t *testing.T) {
	t.Parallel()
	d := newDB(t, 2)
	s := d.store(t, nil)
	ctx := t.Context()
	keys := []string{"pay:Order-1", "pay:order-1", "pay:ORDER-1", "pay:a", "pay:a ", "pay:e", "pay:é", "pay:\xff\x00\xfe"}
	tokens := map[string]store.Token{}
	for _, k := range keys {
		c, err := s.Acquire(ctx, store.AcquireRequest{Key: k, Lease: time.Minute})
		require.NoError(t, err, "%q", k)
		require.True(t, c.Acquired, "%q is a key of its own: it must not find another's record", k)
		tokens[k] = c.Token
	}
	for _, k := range keys {
		require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: k, Token: tokens[k], Result: []byte(k), Retention: time.Hour}))
	}
	for _, k := range keys {
		rec, err := s.Get(ctx, k)
		require.NoError(t, err)
		require.Equal(t, k, rec.Key)
		require.Equal(t, k, string(rec.Result), "each key keeps its own result")
	}
	require.Equal(t, len(keys), d.count(t, "SELECT COUNT(*) FROM dedup_records"))

	// Through a receiver: two orders whose ids differ in case only are
	// both processed.
	runs := 0
	rcv, err := dedup.NewReceiver(s, paymentID, func(context.Context, payment) (int, error) { runs++; return runs, nil },
		&dedup.Config{Namespace: "orders"})
	require.NoError(t, err)
	for _, id := range []string{"Order-1", "order-1", "Order-1"} {
		_, err := rcv.Handle(ctx, payment{ID: id})
		require.NoError(t, err)
	}
	require.Equal(t, 2, runs, "Order-1 and order-1 are two messages; the second Order-1 is a duplicate")
}

// TestKeyLength: a key of MaxKeyLength bytes, the most an InnoDB index
// holds, is a key whatever its characters (768 four-byte ones: a utf8mb4
// VARCHAR could not index more); one byte more is refused with
// ErrInvalidKey by every call, without a round trip, and through a
// receiver such a message is dead-lettered as an invalid key, never
// retried forever. Empty keys are refused too.
func TestKeyLength(t *testing.T) {
	t.Parallel()
	d := newDB(t, 2)
	s := d.store(t, nil)
	ctx := t.Context()
	longest := strings.Repeat("\U0001F600", mysqlstore.MaxKeyLength/4)
	require.Len(t, longest, mysqlstore.MaxKeyLength)
	c, err := s.Acquire(ctx, store.AcquireRequest{Key: longest, Lease: time.Minute})
	require.NoError(t, err)
	require.True(t, c.Acquired)
	other := strings.Repeat("\U0001F600", mysqlstore.MaxKeyLength/4-1) + "\U0001F601"
	c2, err := s.Acquire(ctx, store.AcquireRequest{Key: other, Lease: time.Minute})
	require.NoError(t, err)
	require.True(t, c2.Acquired, "keys that differ in their last byte only are two keys: the index holds them whole")
	require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: longest, Token: c.Token, Retention: time.Hour}))
	rec, err := s.Get(ctx, longest)
	require.NoError(t, err)
	require.Equal(t, longest, rec.Key)

	token := store.NewToken()
	for name, key := range map[string]string{
		"TooLong":  strings.Repeat("k", mysqlstore.MaxKeyLength+1),
		"LongUTF8": longest + "x",
		"Empty":    "",
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

	rcv, err := dedup.NewReceiver(s, paymentID, func(context.Context, payment) (int, error) { return 1, nil },
		&dedup.Config{Namespace: "pay", MaxIDLength: 10 * mysqlstore.MaxKeyLength})
	require.NoError(t, err)
	res, err := rcv.Handle(ctx, payment{ID: strings.Repeat("x", mysqlstore.MaxKeyLength)})
	dec := adapter.Bind(rcv).Decide(res, err)
	require.Equal(t, delivery.DeadLetter, dec.Action)
	require.Equal(t, delivery.ReasonInvalidKey, dec.Reason)
}

// TestOpaqueBytes: results and fingerprints are kept as given, whatever
// their bytes; a failure's text is kept as valid UTF-8, cut to 4 KiB; a
// fingerprint over MaxFingerprintLength is refused.
func TestOpaqueBytes(t *testing.T) {
	t.Parallel()
	d := newDB(t, 2)
	s := d.store(t, nil)
	ctx := t.Context()
	fp := "\x00\xff fingerprint \xfe"
	result := []byte("\x00\x01\xff result")

	c, err := s.Acquire(ctx, store.AcquireRequest{Key: "k", Lease: time.Minute, Fingerprint: fp})
	require.NoError(t, err)
	require.Equal(t, fp, c.Record.Fingerprint)
	_, err = s.Acquire(ctx, store.AcquireRequest{Key: "k", Lease: time.Minute, Fingerprint: fp + "x"})
	require.ErrorIs(t, err, store.ErrKeyReused)
	_, err = s.Acquire(ctx, store.AcquireRequest{Key: "k2", Lease: time.Minute, Fingerprint: strings.Repeat("f", mysqlstore.MaxFingerprintLength+1)})
	require.ErrorIs(t, err, store.ErrInvalidConfig)

	bad := "boom \x00 \xff" + strings.Repeat("é", 5000)
	require.NoError(t, s.Release(ctx, store.ReleaseRequest{Key: "k", Token: c.Token, Error: bad, Retention: time.Hour}))
	rec, err := s.Get(ctx, "k")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(rec.LastError, "boom \x00 \uFFFD"), rec.LastError[:20])
	require.LessOrEqual(t, len(rec.LastError), 4096)

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
// name may be qualified by its database or left to the connection's;
// Migrate runs twice without harm.
func TestOptions(t *testing.T) {
	t.Parallel()
	d := newDB(t, 2)
	ctx := t.Context()
	for name, o := range map[string]*mysqlstore.Options{
		"NegativeTimeout":   {Timeout: -time.Second},
		"NegativeAbandoned": {AbandonedTTL: -time.Second},
		"NegativeBatch":     {CleanupBatchSize: -1},
		"Quote":             {Table: "dedup`; DROP TABLE x; --"},
		"ThreeParts":        {Table: "a.b.c"},
		"Digit":             {Table: "1table"},
		"Empty":             {Table: "db."},
		"TooLong":           {Table: strings.Repeat("t", 49)},
	} {
		_, err := mysqlstore.New(ctx, d.db, o)
		require.ErrorIs(t, err, store.ErrInvalidConfig, name)
	}
	_, err := mysqlstore.New(ctx, nil, nil)
	require.ErrorIs(t, err, store.ErrInvalidConfig)

	s := d.store(t, nil)
	require.Equal(t, mysqlstore.DefaultTable, s.Table())
	require.NoError(t, s.Migrate(ctx), "Migrate again")
	require.Contains(t, s.SchemaSQL(), "CREATE TABLE IF NOT EXISTS `dedup_records`")

	// Qualified by its database, from a connection to another one.
	q := newStore(t, d.db, &mysqlstore.Options{Table: d.name + ".other"})
	_, err = q.Acquire(ctx, store.AcquireRequest{Key: "k", Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, 1, d.count(t, "SELECT COUNT(*) FROM "+d.name+".other"))
	require.Zero(t, d.count(t, "SELECT COUNT(*) FROM dedup_records"))
}

// TestScanPrefixRange: Scan reads the prefix's key range in byte order,
// whatever bytes the prefix ends with.
func TestScanPrefixRange(t *testing.T) {
	t.Parallel()
	d := newDB(t, 2)
	s := d.store(t, nil)
	ctx := t.Context()
	keys := []string{"é", "éa", "é\U0010FFFF", "ê", "e", "E", "\U0010FFFF", "\U0010FFFFa", "zz", "a\xff", "a\xff\xff", "b"}
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
	require.Equal(t, []string{"e"}, scan("e"), "E and é are other keys")
	require.Equal(t, []string{"\U0010FFFF", "\U0010FFFFa"}, scan("\U0010FFFF"))
	require.Equal(t, []string{"a\xff", "a\xff\xff"}, scan("a\xff"))
	require.Equal(t, []string{"E", "a\xff", "a\xff\xff", "b", "e", "zz", "é", "éa", "é\U0010FFFF", "ê", "\U0010FFFF", "\U0010FFFFa"}, scan(""))

	for prefix, want := range map[string]string{"a": "b", "a\xff": "b", "\xff\xff": "", "": ""} {
		got, ok := mysqlstore.Successor(prefix)
		require.Equal(t, want != "", ok, "%q", prefix)
		require.Equal(t, want, got, "%q", prefix)
	}
}

// TestScanPages: Scan reads pages of 500 records and stops when the loop
// breaks.
func TestScanPages(t *testing.T) {
	t.Parallel()
	d := newDB(t, 2)
	s := d.store(t, nil)
	d.exec(t, `INSERT INTO dedup_records (`+"`key`"+`, state, token, attempt, fingerprint, last_error, expires_at)
SELECT CONCAT('page:', LPAD(seq, 5, '0')), 'failed', UNHEX(MD5(seq)), 1, '', '', UTC_TIMESTAMP(6) + INTERVAL 1 HOUR FROM seq_1_to_1234`)
	n, last := 0, ""
	for rec, err := range s.Scan(t.Context(), "page:") {
		require.NoError(t, err)
		require.Greater(t, rec.Key, last, "key order")
		require.Equal(t, store.StateFailed, rec.State)
		last = rec.Key
		n++
	}
	require.Equal(t, 1234, n)
	n = 0
	for range s.Scan(t.Context(), "page:") {
		if n++; n == 700 {
			break
		}
	}
	require.Equal(t, 700, n)
}

// TestDuplicateTakesNoLock: a duplicate of a completed record, and a
// delivery of a key held under a live lease, are answered by a plain read:
// they wait for no lock, even while another transaction holds the row.
func TestDuplicateTakesNoLock(t *testing.T) {
	t.Parallel()
	d := newDB(t, 4)
	s := d.store(t, &mysqlstore.Options{Timeout: 500 * time.Millisecond})
	ctx := t.Context()
	done, err := s.Acquire(ctx, store.AcquireRequest{Key: "done", Lease: time.Minute})
	require.NoError(t, err)
	require.NoError(t, s.Complete(ctx, store.CompleteRequest{Key: "done", Token: done.Token, Result: []byte("r"), Retention: time.Hour}))
	held, err := s.Acquire(ctx, store.AcquireRequest{Key: "held", Lease: time.Minute})
	require.NoError(t, err)
	require.True(t, held.Acquired)

	tx, err := d.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	_, err = tx.Exec("SELECT `key` FROM dedup_records WHERE `key` IN ('done', 'held') FOR UPDATE")
	require.NoError(t, err)

	c, err := s.Acquire(ctx, store.AcquireRequest{Key: "done", Lease: time.Minute})
	require.NoError(t, err, "a duplicate must not wait for the row's lock")
	require.Equal(t, store.StateCompleted, c.Record.State)
	require.Equal(t, "r", string(c.Record.Result))
	c, err = s.Acquire(ctx, store.AcquireRequest{Key: "held", Lease: time.Minute})
	require.NoError(t, err)
	require.False(t, c.Acquired)
	out := s.AcquireBatch(ctx, []store.AcquireRequest{{Key: "done", Lease: time.Minute}, {Key: "held", Lease: time.Minute}})
	require.NoError(t, out[0].Err)
	require.NoError(t, out[1].Err)
	require.Equal(t, store.StateCompleted, out[0].Claim.Record.State)
	require.Equal(t, store.StateProcessing, out[1].Claim.Record.State)
}
