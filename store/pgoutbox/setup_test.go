package pgoutbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/store/pgoutbox/internal/relaytest"
	"github.com/dedup-go/dedup/store/pgstore"
)

// order is the incoming message of the tests.
type order struct {
	ID       string `json:"id"`
	Customer string `json:"customer"`
}

func orderID(o order) (string, error) { return o.ID, nil }

// txReceiver returns a receiver whose handler runs fn in a transaction
// that completes the record (pgstore.TxHandler).
func txReceiver(t testing.TB, s *pgstore.Store, ns string, fn pgstore.TxFunc[order, string]) *dedup.Receiver[order, string] {
	t.Helper()
	h, err := pgstore.TxHandler(s, fn, nil)
	require.NoError(t, err)
	rcv, err := dedup.NewReceiver(s, orderID, h, &dedup.Config{Namespace: ns, Lease: 5 * time.Second,
		Backoff: dedup.BackoffFunc(func(int) time.Duration { return 0 })})
	require.NoError(t, err)
	return rcv
}

// row is a message as the outbox table holds it.
type row struct {
	Seq         int64
	ID          string
	ClaimKey    string
	Name        string
	Destination string
	OrderingKey string
	Bucket      int
	Body        []byte
	Header      map[string]string
	Sent        bool
}

// outboxRows returns the rows of db's outbox table, by seq.
func outboxRows(t testing.TB, db *relaytest.DB, table string) []row {
	t.Helper()
	rs, err := db.Pool.Query(context.Background(), `SELECT seq, id, claim_key, name, destination, ordering_key, bucket, body, headers, sent_at IS NOT NULL FROM `+table+` ORDER BY seq`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rs, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.Seq, &x.ID, &x.ClaimKey, &x.Name, &x.Destination, &x.OrderingKey, &x.Bucket, &x.Body, &x.Header, &x.Sent)
		return x, err
	})
	require.NoError(t, err)
	return out
}
