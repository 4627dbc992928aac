package mysqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup/store"
	"github.com/dedup-go/dedup/store/mysqlstore"
)

// The hot path of a message that uses no step: what each kind of call
// costs in statements (TestHotPathStatements) and in time (the
// benchmarks), sequentially on one connection.

// hotPath is a store on a pool of one connection, so that the session's
// counters count the store's statements.
type hotPath struct {
	d    *testDB
	db   *sql.DB
	s    *mysqlstore.Store
	fn   func(ctx context.Context, key string) error // TxHandler's handler, no business write
	keys int
}

func newHotPath(tb testing.TB) *hotPath {
	d := newDB(tb, 2)
	db := open(tb, d.cfg, 1)
	h := &hotPath{d: d, db: db, s: newStore(tb, db, nil)}
	handler, err := mysqlstore.TxHandler(h.s, func(context.Context, *sql.Tx, string) (struct{}, error) {
		return struct{}{}, nil
	}, nil)
	require.NoError(tb, err)
	h.fn = func(ctx context.Context, key string) error { _, err := handler(ctx, key); return err }
	return h
}

func (h *hotPath) key() string {
	h.keys++
	return fmt.Sprintf("hot:%d", h.keys)
}

// status returns a counter of the pool's one session: Questions counts
// the statements it ran (COM_QUERY, COM_STMT_EXECUTE, ...; this read
// included), Com_stmt_prepare the statements it prepared.
func (h *hotPath) status(tb testing.TB, name string) int {
	var n int
	require.NoError(tb, h.db.QueryRow("SHOW SESSION STATUS LIKE '"+name+"'").Scan(&name, &n))
	return n
}

// newMessage claims a new key and completes it.
func (h *hotPath) newMessage(tb testing.TB, ctx context.Context) string {
	key := h.key()
	c, err := h.s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
	require.NoError(tb, err)
	require.True(tb, c.Acquired)
	require.NoError(tb, h.s.Complete(ctx, store.CompleteRequest{Key: key, Token: c.Token, Result: []byte("r"), Retention: time.Hour}))
	return key
}

// duplicate asks for a completed key.
func (h *hotPath) duplicate(tb testing.TB, ctx context.Context, key string) {
	c, err := h.s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
	require.NoError(tb, err)
	require.False(tb, c.Acquired)
	require.Equal(tb, store.StateCompleted, c.Record.State)
}

// failed returns a key whose record failed.
func (h *hotPath) failed(tb testing.TB, ctx context.Context) string {
	key := h.key()
	c, err := h.s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
	require.NoError(tb, err)
	require.NoError(tb, h.s.Release(ctx, store.ReleaseRequest{Key: key, Token: c.Token, Error: "e", Retention: time.Hour}))
	return key
}

// takeover takes the failed key over and releases it again.
func (h *hotPath) takeover(tb testing.TB, ctx context.Context, key string) {
	c, err := h.s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
	require.NoError(tb, err)
	require.True(tb, c.Acquired)
	require.NoError(tb, h.s.Release(ctx, store.ReleaseRequest{Key: key, Token: c.Token, Error: "e", Retention: time.Hour}))
}

// txMessage claims a new key and runs TxHandler's handler under it.
func (h *hotPath) txMessage(tb testing.TB, ctx context.Context) {
	key := h.key()
	c, err := h.s.Acquire(ctx, store.AcquireRequest{Key: key, Lease: time.Minute})
	require.NoError(tb, err)
	held := &store.HeldClaim{Key: key, Token: c.Token, Attempt: 1, Retention: time.Hour}
	require.NoError(tb, h.fn(store.ContextWithClaim(ctx, held), key))
	require.True(tb, held.Completed())
}

// TestHotPathStatements pins what a message that uses no step costs:
// the statements of the package documentation, and no more.
func TestHotPathStatements(t *testing.T) {
	ctx := context.Background()
	h := newHotPath(t)
	// Once each, so that every statement is prepared.
	done := h.newMessage(t, ctx)
	h.duplicate(t, ctx, done)
	h.takeover(t, ctx, h.failed(t, ctx))
	h.txMessage(t, ctx)
	_, err := h.s.Get(ctx, done)
	require.NoError(t, err)
	// And the statements of steps, which a message without steps must not
	// run: a test that counts them, not one that hangs on them.
	stranger := store.NewToken()
	_, err = h.s.LoadSteps(ctx, store.StepsRequest{Key: done, Token: stranger})
	require.ErrorIs(t, err, store.ErrLeaseLost)
	require.ErrorIs(t, h.s.SaveStep(ctx, store.SaveStepRequest{Key: done, Token: stranger, Name: "n"}), store.ErrLeaseLost)
	require.ErrorIs(t, h.s.Complete(ctx, store.CompleteRequest{Key: done, Token: stranger, Retention: time.Hour}), store.ErrLeaseLost)

	failed := h.failed(t, ctx)
	for _, c := range []struct {
		name string
		want int
		call func()
	}{
		{"new message: read, INSERT, complete", 3, func() { h.newMessage(t, ctx) }},
		{"duplicate: read", 1, func() { h.duplicate(t, ctx, done) }},
		{"takeover: read, BEGIN, claim, locking read, COMMIT, release", 6, func() { h.takeover(t, ctx, failed) }},
		{"TxHandler: read, INSERT, BEGIN, complete, COMMIT", 5, func() { h.txMessage(t, ctx) }},
		{"Get: read", 1, func() {
			_, err := h.s.Get(ctx, done)
			require.NoError(t, err)
		}},
	} {
		prepared, before := h.status(t, "Com_stmt_prepare"), h.status(t, "Questions")
		c.call()
		require.Equal(t, c.want, h.status(t, "Questions")-before-1, c.name)
		require.Equal(t, prepared, h.status(t, "Com_stmt_prepare"), "%s: statements prepared again", c.name)
	}
}

func BenchmarkNewMessage(b *testing.B) {
	ctx := context.Background()
	h := newHotPath(b)
	b.ReportAllocs()
	for b.Loop() {
		h.newMessage(b, ctx)
	}
}

func BenchmarkDuplicate(b *testing.B) {
	ctx := context.Background()
	h := newHotPath(b)
	key := h.newMessage(b, ctx)
	b.ReportAllocs()
	for b.Loop() {
		h.duplicate(b, ctx, key)
	}
}

func BenchmarkTakeover(b *testing.B) {
	ctx := context.Background()
	h := newHotPath(b)
	key := h.failed(b, ctx)
	b.ReportAllocs()
	for b.Loop() {
		h.takeover(b, ctx, key)
	}
}

func BenchmarkTxHandler(b *testing.B) {
	ctx := context.Background()
	h := newHotPath(b)
	// The completion's statement is prepared on the pool, whose one
	// connection the handler's transaction holds: prepare it first.
	h.newMessage(b, ctx)
	b.ReportAllocs()
	for b.Loop() {
		h.txMessage(b, ctx)
	}
}

func BenchmarkGet(b *testing.B) {
	ctx := context.Background()
	h := newHotPath(b)
	key := h.newMessage(b, ctx)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := h.s.Get(ctx, key); err != nil {
			b.Fatal(err)
		}
	}
}
