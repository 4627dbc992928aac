package pgstore_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/store/pgstore"
)

// The benchmarks run on the shared PostgreSQL, each beside its baseline:
//
//	go test -run '^$' -bench . -benchtime 2000x ./store/pgstore
//
// BenchmarkInsert is one bare INSERT round trip (autocommit), the floor of
// anything that writes; BenchmarkHandleNew a new message through Handle
// (claim, then complete: two statements); BenchmarkHandleBatch100 a batch
// of 100 new messages (one claim statement, one completion statement);
// BenchmarkTxInsert a bare transaction of one INSERT (BEGIN, INSERT,
// COMMIT) beside BenchmarkTxHandler, the same INSERT through TxHandler
// (claim, then BEGIN, INSERT, completion, COMMIT).

func benchDB(b *testing.B) (*testDB, string) {
	db := newDB(b, 4)
	table := db.table("rows")
	db.exec(b, "CREATE TABLE "+table+" (id text NOT NULL)")
	return db, table
}

func BenchmarkInsert(b *testing.B) {
	db, table := benchDB(b)
	ctx := context.Background()
	sql := "INSERT INTO " + table + " (id) VALUES ($1)"
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := db.pool.Exec(ctx, sql, strconv.Itoa(i)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkHandleNew(b *testing.B) {
	db, _ := benchDB(b)
	rcv, err := dedup.NewReceiver(db.store(b, nil), func(id string) (string, error) { return id, nil },
		func(context.Context, string) (struct{}, error) { return struct{}{}, nil }, &dedup.Config{Namespace: "bench"})
	require.NoError(b, err)
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if res, err := rcv.Handle(ctx, strconv.Itoa(i)); err != nil || res.Status != delivery.StatusProcessed {
			b.Fatal(res.Status, err)
		}
	}
}

func BenchmarkHandleDuplicate(b *testing.B) {
	db, _ := benchDB(b)
	rcv, err := dedup.NewReceiver(db.store(b, nil), func(id string) (string, error) { return id, nil },
		func(context.Context, string) (struct{}, error) { return struct{}{}, nil }, &dedup.Config{Namespace: "bench"})
	require.NoError(b, err)
	ctx := context.Background()
	_, err = rcv.Handle(ctx, "dup")
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		if res, err := rcv.Handle(ctx, "dup"); err != nil || res.Status != delivery.StatusDuplicate {
			b.Fatal(res.Status, err)
		}
	}
}

func BenchmarkHandleBatch100(b *testing.B) {
	db, _ := benchDB(b)
	rcv, err := dedup.NewReceiver(db.store(b, nil), func(id string) (string, error) { return id, nil },
		func(context.Context, string) (struct{}, error) { return struct{}{}, nil }, &dedup.Config{Namespace: "bench"})
	require.NoError(b, err)
	ctx := context.Background()
	msgs := make([]string, 100)
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		for j := range msgs {
			msgs[j] = strconv.Itoa(n)
			n++
		}
		for _, o := range rcv.HandleBatch(ctx, msgs) {
			if o.Err != nil || o.Result.Status != delivery.StatusProcessed {
				b.Fatal(o.Result.Status, o.Err)
			}
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "msgs/s")
}

func BenchmarkTxInsert(b *testing.B) {
	db, table := benchDB(b)
	ctx := context.Background()
	sql := "INSERT INTO " + table + " (id) VALUES ($1)"
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, sql, strconv.Itoa(i))
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTxHandler(b *testing.B) {
	db, table := benchDB(b)
	s := db.store(b, nil)
	sql := "INSERT INTO " + table + " (id) VALUES ($1)"
	h, err := pgstoreTxHandler(s, func(ctx context.Context, tx pgx.Tx, id string) (struct{}, error) {
		_, err := tx.Exec(ctx, sql, id)
		return struct{}{}, err
	})
	require.NoError(b, err)
	rcv, err := dedup.NewReceiver(s, func(id string) (string, error) { return id, nil }, h, &dedup.Config{Namespace: "bench"})
	require.NoError(b, err)
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if res, err := rcv.Handle(ctx, strconv.Itoa(i)); err != nil || res.Status != delivery.StatusProcessed {
			b.Fatal(res.Status, err)
		}
	}
}

func pgstoreTxHandler(s *pgstore.Store, fn pgstore.TxFunc[string, struct{}]) (dedup.Handler[string, struct{}], error) {
	return pgstore.TxHandler(s, fn, nil)
}

// BenchmarkStandby is what a standby costs, on a primary of the
// benchmark's own: a new message through Handle (claim and completion, two
// commits), one at a time (new) and eight at once (new-parallel), and a
// duplicate (a read, which commits nothing). async: the primary waits for no standby, as
// without one; sync: synchronous_standby_names = '*', each commit waits
// until the standby has flushed it; rtt: the round trip to the standby (0:
// loopback; 2ms: another zone).
//
//	go test -run '^$' -bench Standby -benchtime 2000x ./store/pgstore
func BenchmarkStandby(b *testing.B) {
	for _, rtt := range []time.Duration{0, 2 * time.Millisecond} {
		pair := startPair(b, asynchronous, rtt)
		pool := connect(b, pair.primary.DSN(), 8)
		rcv, err := dedup.NewReceiver(newStore(b, pool, "dedup_records", nil), func(id string) (string, error) { return id, nil },
			func(context.Context, string) (struct{}, error) { return struct{}{}, nil }, &dedup.Config{Namespace: "bench"})
		require.NoError(b, err)
		ctx := context.Background()
		_, err = rcv.Handle(ctx, "dup")
		require.NoError(b, err)
		var n atomic.Int64
		for _, mode := range []replication{asynchronous, synchronous} {
			pair.SetMode(b, mode)
			name := fmt.Sprintf("%s-rtt%v", mode, rtt)
			b.Run(name+"/new", func(b *testing.B) {
				for b.Loop() {
					if res, err := rcv.Handle(ctx, strconv.FormatInt(n.Add(1), 10)); err != nil || res.Status != delivery.StatusProcessed {
						b.Fatal(res.Status, err)
					}
				}
			})
			b.Run(name+"/new-parallel", func(b *testing.B) {
				b.SetParallelism(max(1, 8/runtime.GOMAXPROCS(0)))
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if res, err := rcv.Handle(ctx, strconv.FormatInt(n.Add(1), 10)); err != nil || res.Status != delivery.StatusProcessed {
							b.Error(res.Status, err)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			})
			b.Run(name+"/duplicate", func(b *testing.B) {
				for b.Loop() {
					if res, err := rcv.Handle(ctx, "dup"); err != nil || res.Status != delivery.StatusDuplicate {
						b.Fatal(res.Status, err)
					}
				}
			})
		}
	}
}
