package bench

import (
	"context"
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/bench/internal/perf"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/store"
)

// The scale harness: how pgstore and mysqlstore answer with a table of
// DEDUP_SQL_SCALE records (ten million, say) beside the same at
// scaleSmall records, in the same run. It is not a row of the table, and
// it skips unless DEDUP_SQL_SCALE is set, since loading takes minutes
// (docs/stores.md, "At scale"):
//
//	DEDUP_SQL_SCALE=10000000 go -C bench test -run '^TestSQLScale$' -v -count=1 -timeout 2h
//
// Each store gets two tables in a schema (PostgreSQL: dedup_scale) or a
// database (MariaDB: dedup_test_scale) of the harness's own on the shared
// servers: made by the store's own Migrate, then loaded server-side in key
// order, a statement per scaleChunk records (generate_series on
// PostgreSQL, the SEQUENCE engine on MariaDB), then analyzed. Every loaded
// record is what the store writes for a message of id scaleID(i, n) whose
// handler returned scaleReply: completed, attempt 1, a token, the result
// {"ok":true}, no fingerprint (the receiver keeps none for a plain message
// type), created one every scaleEvery up to the load's start, completed
// 2 ms later and kept for a year. Some are read back through the store
// (Get, and Handle answering a duplicate with the result) before anything
// is measured. Loaded in key order, a table is as compact as a B-tree gets
// (full pages, as after a bulk load or a rebuild); one grown by random ids
// over time has its primary key's pages less full, and is that much bigger.
//
// Then, like a row of the table, each operation runs on both tables in
// interleaved rounds (BENCH_ROUNDS, default 7; the sides take turns every
// fifth of a round): a duplicate through Handle, its id drawn at random
// from the loaded ones (so the primary key is read at random pages, not
// at its hot tail); a new message through Handle; a new message through
// the store's TxHandler (the claim, then BEGIN, an INSERT into a business
// table of the side's own, the completion, COMMIT); and HandleBatch of
// scaleBatch new messages. New ids are random too. The report, a markdown
// table on standard output (and in DEDUP_SQL_SCALE_OUT, as JSON when the
// name ends in .json), has each side's median per operation with its
// spread over the rounds, the p99 of every operation of every round, the
// median of the per-round ratios big over small, each table's size on
// disk and the load's time.
//
// Both tables are dropped at the end, unless DEDUP_SQL_SCALE_KEEP=1: then
// the big one stays, less the records the run wrote, and the next run
// with the same DEDUP_SQL_SCALE reuses it without loading. The small one
// is loaded afresh every run; it grows by the run's new records (about
// 13,000 in 7 rounds).

// scaleSmall is the number of records of the table the big one is
// compared with.
const scaleSmall = 10_000

// scaleChunk is how many records one loading statement inserts: each is a
// transaction of its own, so that no undo log or lock table grows with
// the whole load, and its end is a line of progress.
const scaleChunk = 250_000

// scaleEvery is the time between two loaded records' creation.
const scaleEvery = 10 * time.Millisecond

// scaleBatch is the number of messages of one HandleBatch.
const scaleBatch = 100

// scaleResult is what every loaded record holds: scaleReply{OK: true}
// encoded by the receiver's codec, JSON.
const scaleResult = `{"ok":true}`

// scaleReply is the value the harness's handlers return, and duplicates
// replay.
type scaleReply struct {
	OK bool `json:"ok"`
}

// scaleDone is the handlers' answer.
func scaleDone(ctx context.Context, _ order) (scaleReply, error) {
	if err := ctx.Err(); err != nil {
		return scaleReply{}, err
	}
	return scaleReply{OK: true}, nil
}

// scaleID is the id of the i-th (from 1) of n loaded records, in the
// format of a UUID: its first 8 hex digits are (i-1)·2³²/n, so that the
// ids rise with i and spread evenly over the space of random UUIDs (a
// new message's random id falls between two loaded ones anywhere in the
// table, not past its end), and the rest is the MD5 of i in decimal.
// Both databases compute it in the loading statement, which inserts in
// key order: the table and its indexes are written at their ends, once,
// however many records there are.
func scaleID(i, n int) string {
	var b [16]byte
	binary.BigEndian.PutUint32(b[:4], uint32((uint64(i-1)<<32)/uint64(n)))
	sum := md5.Sum([]byte(strconv.Itoa(i)))
	copy(b[4:], sum[4:])
	return scaleUUID(b)
}

// scaleNewID is the id of a new message: random, in the loaded ids'
// format.
func scaleNewID() string {
	var b [16]byte
	for i := range b {
		b[i] = byte(rand.Uint32())
	}
	return scaleUUID(b)
}

// scaleUUID formats b as a UUID in lower case.
func scaleUUID(b [16]byte) string {
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// scaleKey is the store's key of a message of id: the receiver's default
// namespace, a colon, the id.
func scaleKey(id string) string { return "default:" + id }

// scaleOrders is the business table of the side of table.
func scaleOrders(table string) string { return table + "_orders" }

// scaleBackend is one store's side of the harness on its database. Its
// methods fail tb on an error.
type scaleBackend interface {
	// server names the database server and the size of its cache.
	server(tb testing.TB) string
	// rows is how many rows table holds, or -1 when there is no such
	// table.
	rows(tb testing.TB, table string) int64
	// drop drops the tables that exist of those named.
	drop(tb testing.TB, tables ...string)
	// open makes the store on table (its own Migrate creates the table
	// when it is missing), a business table for TxHandler
	// (scaleOrders(table), made afresh), and the receivers; the store and
	// its pool are closed when tb ends.
	open(tb testing.TB, table string) scaleReceivers
	// load inserts the loaded records lo to hi of n (scaleID) in one
	// statement, in key order, the first created at t0.
	load(tb testing.TB, table string, lo, hi, n int, t0 time.Time)
	// analyze updates the table's statistics for the planner.
	analyze(tb testing.TB, table string)
	// warm reads the table's primary key whole, so that as much of it as
	// the server's cache holds is there before anything is measured
	// (DEDUP_SQL_SCALE_WARM=1).
	warm(tb testing.TB, table string)
	// sizes measures the table on disk.
	sizes(tb testing.TB, table string) scaleSizes
	// forget deletes the records of ids from table.
	forget(tb testing.TB, table string, ids []string)
	// done drops the harness's schema or database, unless a table kept
	// is in it.
	done(tb testing.TB)
}

// scaleReceivers are one table's receivers.
type scaleReceivers struct {
	// plain runs scaleDone; tx runs it through the store's TxHandler,
	// which inserts an order into the side's business table first.
	plain, tx *dedup.Receiver[order, scaleReply]
	// get reads a record through the store (its store.Inspector).
	get func(ctx context.Context, key string) (store.Record, error)
}

// scaleTable is one table of a store, ready to measure.
type scaleTable struct {
	name    string
	records int
	rcv     scaleReceivers
	report  scaleTableReport
	// written are the ids of the records the run wrote.
	written []string
}

// TestSQLScale loads the SQL stores' tables to DEDUP_SQL_SCALE records and
// measures them beside tables of scaleSmall records. See the comment
// above for what it does and how to run it.
func TestSQLScale(t *testing.T) {
	v := os.Getenv("DEDUP_SQL_SCALE")
	if v == "" {
		t.Skip("the SQL stores' scale harness loads tables of DEDUP_SQL_SCALE records, which takes minutes: " +
			"DEDUP_SQL_SCALE=10000000 go -C bench test -run '^TestSQLScale$' -v -count=1 -timeout 2h " +
			"(docs/stores.md, \"At scale\")")
	}
	n, err := strconv.Atoi(strings.ReplaceAll(v, "_", ""))
	if err != nil || n <= scaleSmall {
		t.Fatalf("DEDUP_SQL_SCALE=%q: want a number of records above %d", v, scaleSmall)
	}
	rounds := benchRounds()
	keep := os.Getenv("DEDUP_SQL_SCALE_KEEP") == "1"
	report := scaleReport{Go: runtime.Version(), Procs: runtime.GOMAXPROCS(0), Rounds: rounds, Records: n, Small: scaleSmall}
	for _, b := range []struct {
		name string
		open func(testing.TB) scaleBackend
	}{
		{"pgstore", openScalePostgres},
		{"mysqlstore", openScaleMariaDB},
	} {
		t.Run(b.name, func(t *testing.T) {
			sr := scaleStore(t, b.name, b.open(t), n, rounds, keep)
			report.Stores = append(report.Stores, sr)
		})
	}
	if len(report.Stores) == 0 {
		return
	}
	report.Date = time.Now().UTC().Format(time.RFC3339)
	md := report.markdown()
	fmt.Println()
	fmt.Print(md)
	if path := os.Getenv("DEDUP_SQL_SCALE_OUT"); path != "" {
		out := []byte(md)
		if strings.HasSuffix(path, ".json") {
			if out, err = report.marshal(); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Errorf("write %s: %v", path, err)
		}
	}
}

// scaleStore readies the small and the big table of one store, checks
// what was loaded, measures every operation on both, and cleans up.
func scaleStore(t *testing.T, name string, b scaleBackend, n, rounds int, keep bool) scaleStoreReport {
	sr := scaleStoreReport{Store: name, Server: b.server(t)}
	t.Cleanup(func() { b.done(t) })
	small := scaleReady(t, name, b, scaleSmall, false, func(tb *scaleTable) { b.drop(t, tb.name, scaleOrders(tb.name)) })
	big := scaleReady(t, name, b, n, true, func(tb *scaleTable) {
		b.drop(t, scaleOrders(tb.name))
		if !keep {
			b.drop(t, tb.name)
			return
		}
		b.forget(t, tb.name, tb.written)
		t.Logf("%s: kept %s (%d rows) for the next run with DEDUP_SQL_SCALE=%d", name, tb.name, n, n)
	})
	tables := []*scaleTable{small, big}
	for _, tb := range tables {
		scaleCheck(t, tb)
		sr.Tables = append(sr.Tables, tb.report)
	}
	for _, op := range scaleOps {
		r := row{name: op.name, unit: "ns/op", n: op.n, chunk: op.n / 5}
		lat := make([]scaleLatencies, len(tables))
		sides := make([]side, len(tables))
		for i, tb := range tables {
			sides[i] = side{name: tb.name, run: func(t testing.TB, n int) sample {
				return op.run(t, tb, n, &lat[i])
			}}
		}
		results, _ := measure(t, r, sides, rounds, false)
		or := scaleOpReport{Name: op.name, Unit: op.unit, PerOp: op.perOp, N: op.n, Ratios: results[1].ratios}
		for i := range tables {
			or.Values = append(or.Values, results[i].values)
			or.P99 = append(or.P99, lat[i].p99())
		}
		t.Logf("%s: %s, ns/op per round: %s: %s; %s: %s; p99 %s, %s ns", name, op.name,
			small.name, formatAll(or.Values[0]), big.name, formatAll(or.Values[1]), perf.Format(or.P99[0]), perf.Format(or.P99[1]))
		sr.Ops = append(sr.Ops, or)
	}
	return sr
}

// scaleReady makes the table of n records: reused when reuse is allowed
// and it holds n rows already (a run with DEDUP_SQL_SCALE_KEEP=1 left
// it), else dropped, made by the store's Migrate and loaded; analyzed and
// measured on disk either way. finish runs when t ends, once the table's
// store is closed.
func scaleReady(t *testing.T, name string, b scaleBackend, n int, reuse bool, finish func(*scaleTable)) *scaleTable {
	tb := &scaleTable{name: "dedup_records_" + strconv.Itoa(n), records: n}
	tb.report = scaleTableReport{Name: tb.name, Records: n}
	t.Cleanup(func() { finish(tb) })
	if reuse && b.rows(t, tb.name) == int64(n) {
		t.Logf("%s: %s holds %d rows already: reused, not loaded", name, tb.name, n)
		tb.report.Reused = true
		tb.rcv = b.open(t, tb.name)
	} else {
		b.drop(t, tb.name)
		tb.rcv = b.open(t, tb.name)
		if rows := b.rows(t, tb.name); rows != 0 {
			t.Fatalf("%s: %s holds %d rows after Migrate, want none", name, tb.name, rows)
		}
		t0 := time.Now().Add(-time.Duration(n) * scaleEvery).UTC().Truncate(time.Microsecond)
		start := time.Now()
		for lo := 1; lo <= n; lo += scaleChunk {
			hi := min(lo+scaleChunk-1, n)
			b.load(t, tb.name, lo, hi, n, t0)
			el := time.Since(start)
			t.Logf("%s: %s: %d of %d rows (%.0f%%) in %s, %.0f rows/s", name, tb.name, hi, n,
				100*float64(hi)/float64(n), el.Round(100*time.Millisecond), float64(hi)/el.Seconds())
		}
		tb.report.LoadSeconds = time.Since(start).Seconds()
	}
	start := time.Now()
	b.analyze(t, tb.name)
	tb.report.AnalyzeSeconds = time.Since(start).Seconds()
	if os.Getenv("DEDUP_SQL_SCALE_WARM") == "1" {
		start := time.Now()
		b.warm(t, tb.name)
		t.Logf("%s: %s: primary key read whole in %.1f s", name, tb.name, time.Since(start).Seconds())
	}
	if rows := b.rows(t, tb.name); rows != int64(n) {
		t.Fatalf("%s: %s holds %d rows, want %d", name, tb.name, rows, n)
	}
	tb.report.Sizes = b.sizes(t, tb.name)
	t.Logf("%s: %s ready: loaded in %.1f s, analyzed in %.1f s; %s", name, tb.name,
		tb.report.LoadSeconds, tb.report.AnalyzeSeconds, tb.report.Sizes.String(n))
	return tb
}

// scaleCheck reads loaded records back through the store, the first, the
// last and some at random: each must be completed, with a token, the
// result, and its times, and Handle must answer it as a duplicate with
// the result.
func scaleCheck(t *testing.T, tb *scaleTable) {
	ctx := context.Background()
	picks := []int{1, tb.records}
	for range 20 {
		picks = append(picks, 1+rand.IntN(tb.records))
	}
	for _, i := range picks {
		id := scaleID(i, tb.records)
		rec, err := tb.rcv.get(ctx, scaleKey(id))
		if err != nil {
			t.Fatalf("%s: record %d (%s): %v", tb.name, i, id, err)
		}
		if rec.State != store.StateCompleted || rec.Token.IsZero() || rec.Attempt != 1 || string(rec.Result) != scaleResult ||
			rec.CreatedAt.IsZero() || !rec.CompletedAt.After(rec.CreatedAt) || rec.ExpiresAt.Before(time.Now().Add(300*24*time.Hour)) {
			t.Fatalf("%s: record %d is not a completed record of the store's: %+v", tb.name, i, rec)
		}
		res, err := tb.rcv.plain.Handle(ctx, order{ID: id, Amount: 1})
		if err != nil || res.Status != delivery.StatusDuplicate || !res.Value.OK {
			t.Fatalf("%s: Handle of loaded id %d: %+v, %v; want a duplicate with the result", tb.name, i, res, err)
		}
	}
}

// scaleOp is an operation the harness measures on both tables.
type scaleOp struct {
	name string
	// unit is what an operation is in the report: µs per message or per
	// batch.
	unit string
	// perOp is the number of messages of one operation.
	perOp int
	// n is the number of operations of one side in one round.
	n int
	// run does n operations on tb, timing each in lat.
	run func(t testing.TB, tb *scaleTable, n int, lat *scaleLatencies) sample
}

// scaleOps are the operations measured, in order: the duplicate first,
// before the new records grow the small table.
var scaleOps = []scaleOp{
	{name: "a duplicate through Handle (an id drawn at random from the loaded)", unit: "µs/msg", perOp: 1, n: 2000,
		run: func(t testing.TB, tb *scaleTable, n int, lat *scaleLatencies) sample {
			ctx := context.Background()
			ids := make([]string, n)
			for i := range ids {
				ids[i] = scaleID(1+rand.IntN(tb.records), tb.records)
			}
			return lat.timed(n, func(i int) {
				res, err := tb.rcv.plain.Handle(ctx, order{ID: ids[i], Amount: 1})
				if err != nil || res.Status != delivery.StatusDuplicate || !res.Value.OK {
					t.Fatalf("%s: duplicate %s: %+v, %v", tb.name, ids[i], res, err)
				}
			})
		}},
	{name: "a new message through Handle", unit: "µs/msg", perOp: 1, n: 400,
		run: func(t testing.TB, tb *scaleTable, n int, lat *scaleLatencies) sample {
			return scaleNew(t, tb, tb.rcv.plain, n, lat)
		}},
	{name: "a new message through TxHandler (claim, BEGIN, INSERT, completion, COMMIT)", unit: "µs/msg", perOp: 1, n: 400,
		run: func(t testing.TB, tb *scaleTable, n int, lat *scaleLatencies) sample {
			return scaleNew(t, tb, tb.rcv.tx, n, lat)
		}},
	{name: fmt.Sprintf("HandleBatch of %d new messages", scaleBatch), unit: "µs/batch", perOp: scaleBatch, n: 10,
		run: func(t testing.TB, tb *scaleTable, n int, lat *scaleLatencies) sample {
			ctx := context.Background()
			batches := make([][]order, n)
			for i := range batches {
				batches[i] = make([]order, scaleBatch)
				for j := range batches[i] {
					id := scaleNewID()
					tb.written = append(tb.written, id)
					batches[i][j] = order{ID: id, Amount: 1}
				}
			}
			return lat.timed(n, func(i int) {
				for j, o := range tb.rcv.plain.HandleBatch(ctx, batches[i]) {
					if o.Err != nil || o.Result.Status != delivery.StatusProcessed {
						t.Fatalf("%s: batch message %d (%s): %+v", tb.name, j, batches[i][j].ID, o)
					}
				}
			})
		}},
}

// scaleNew handles n new messages through rcv, one at a time.
func scaleNew(t testing.TB, tb *scaleTable, rcv *dedup.Receiver[order, scaleReply], n int, lat *scaleLatencies) sample {
	ctx := context.Background()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = scaleNewID()
	}
	tb.written = append(tb.written, ids...)
	return lat.timed(n, func(i int) {
		res, err := rcv.Handle(ctx, order{ID: ids[i], Amount: 1})
		if err != nil || res.Status != delivery.StatusProcessed {
			t.Fatalf("%s: new message %s: %+v, %v", tb.name, ids[i], res, err)
		}
	})
}

// scaleLatencies are the latencies of one side's operations, over every
// round; its first run, measure's warm-up, is not kept.
type scaleLatencies struct {
	runs int
	all  latencies
}

// timed runs op n times and returns nanoseconds per operation, keeping
// each operation's latency unless this is the side's warm-up.
func (l *scaleLatencies) timed(n int, op func(i int)) sample {
	l.runs++
	start := time.Now()
	last := start
	for i := range n {
		op(i)
		now := time.Now()
		if l.runs > 1 {
			l.all = append(l.all, now.Sub(last))
		}
		last = now
	}
	return sample{value: float64(last.Sub(start).Nanoseconds()) / float64(n)}
}

// p99 is the 99th percentile of the latencies kept, in nanoseconds (the
// nearest rank).
func (l *scaleLatencies) p99() float64 { return float64(l.all.quantile(0.99).Nanoseconds()) }

// scaleReceiver is a receiver of orders on s with the defaults.
func scaleReceiver(tb testing.TB, s store.Store, h dedup.Handler[order, scaleReply]) *dedup.Receiver[order, scaleReply] {
	rcv, err := dedup.NewReceiver(s, orderID, h, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return rcv
}
