package bench

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/store"
)

// TestSQLChurn is the churn run of the SQL stores: new records written
// through a dedup.Receiver as fast as the machine goes (or at a set rate),
// each completed with a small result, under a retention short enough that
// records expire within the run, while the store's Cleanup runs beside on
// an interval, as RunCleanup would run it. It asks whether deletion keeps
// up: whether the table and its indexes stay near the size that the rows
// within their retention need, whether PostgreSQL's dead tuples and
// MariaDB's purge backlog stay bounded, and whether claim latency drifts
// as the table churns.
//
// It is a long run, outside make test: it skips unless DEDUP_SQL_CHURN
// gives the number of records to write through each store:
//
//	DEDUP_SQL_CHURN=3000000 go -C bench test -run '^TestSQLChurn$' -count 1 -v -timeout 0
//
// Other knobs (the defaults in brackets):
//
//	DEDUP_SQL_CHURN_STORES         pg, mysql or both, comma-separated [pg,mysql]
//	DEDUP_SQL_CHURN_RATE           records a second; 0 is as fast as it goes [0]
//	DEDUP_SQL_CHURN_FLOOR          the lowest average rate that passes [1000]
//	DEDUP_SQL_CHURN_RETENTION      the receiver's Retention [2m]
//	DEDUP_SQL_CHURN_CLEANUP        the interval of Cleanup [15s]
//	DEDUP_SQL_CHURN_CLEANUP_BATCH  the stores' CleanupBatchSize [their default]
//	DEDUP_SQL_CHURN_WORKERS        writing goroutines [8]
//	DEDUP_SQL_CHURN_HANDLE_BATCH   messages per HandleBatch; 1 is Handle [1]
//	DEDUP_SQL_CHURN_KEYS           random (UUID-like ids) or sequential [random]
//	DEDUP_SQL_CHURN_SAMPLE         the interval of the sample lines [15s]
//	DEDUP_SQL_CHURN_OUT            a file for the series: .json, else CSV [none]
//	DEDUP_SQL_CHURN_SERVER         own: servers of the run's own; shared: the shared ones [own]
//	DEDUP_SQL_CHURN_PG_CONF        settings of the own PostgreSQL, name=value,... [none]
//	DEDUP_SQL_CHURN_PG_TABLE       storage parameters of the PostgreSQL table, name=value,... [none]
//	DEDUP_SQL_CHURN_MYSQL_CONF     options of the own mariadbd, name=value,... [none]
//
// Each store runs on a server of the run's own, with the stock settings
// of the installed PostgreSQL or MariaDB, its data directory removed at
// the end (openChurnTarget), or on the shared server, in a schema or
// database of its own (as the SQL rows of the table do). Every
// sample interval it logs a line: the records written and the rate,
// the rows in the table and those of them expired but not yet deleted
// (the backlog), what Cleanup deleted a second and its longest run, the
// sizes of the table and its indexes, PostgreSQL's n_live_tup,
// n_dead_tup and autovacuum count and MariaDB's purge backlog (history
// list length), and the claim latency (from Handle's call to the
// handler's) and Handle's latency, p50 and p99 of the interval. Once
// every record is written it samples on until the table has drained
// (every record expired and deleted), at most a retention and two
// cleanup intervals more. Then it checks its bounds (churnBounds) and
// fails on any exceeded, and logs the time, the WAL or redo written and
// the growth of the server's data directory.
func TestSQLChurn(t *testing.T) {
	cfg := churnConfigFromEnv(t)
	t.Logf("churn: %s", cfg)
	// An interrupt, or the test's -timeout coming near, stops the run and
	// fails it, with its servers stopped and removed and its series
	// written: a test that panics at its timeout leaves them behind.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-time.Minute))
		defer cancel()
	}
	report := churnReport{Config: cfg.fields()}
	for _, name := range cfg.stores {
		t.Run(name, func(t *testing.T) {
			if ctx.Err() != nil {
				t.Fatalf("%s: not run: %v", name, context.Cause(ctx))
			}
			report.Runs = append(report.Runs, churnRun{Store: name})
			run := &report.Runs[len(report.Runs)-1]
			if cfg.out != "" {
				defer func() {
					if err := report.write(cfg.out); err != nil {
						t.Errorf("write %s: %v", cfg.out, err)
					}
				}()
			}
			runChurn(t, ctx, cfg, openChurnTarget(t, name, cfg), run)
		})
	}
}

// churnConfig is the churn run's knobs, from the environment.
type churnConfig struct {
	total       int64
	stores      []string
	rate        float64
	floor       float64
	retention   time.Duration
	cleanup     time.Duration
	batchSize   int
	workers     int
	handleBatch int
	keys        string
	sample      time.Duration
	out         string
	server      string
	pgConf      []string
	pgTable     []string
	mysqlConf   []string
}

func churnConfigFromEnv(t *testing.T) churnConfig {
	t.Helper()
	v := os.Getenv("DEDUP_SQL_CHURN")
	if v == "" {
		t.Skip("DEDUP_SQL_CHURN is not set: it is the number of records the churn run writes through each SQL store, " +
			"e.g. DEDUP_SQL_CHURN=3000000 go -C bench test -run '^TestSQLChurn$' -count 1 -v -timeout 0 (the other knobs: TestSQLChurn's documentation)")
	}
	total, err := strconv.ParseInt(v, 10, 64)
	if err != nil || total <= 0 {
		t.Fatalf("DEDUP_SQL_CHURN=%q: want a positive number of records", v)
	}
	cfg := churnConfig{
		total:       total,
		stores:      []string{"pg", "mysql"},
		floor:       churnEnvFloat(t, "DEDUP_SQL_CHURN_FLOOR", 1000),
		rate:        churnEnvFloat(t, "DEDUP_SQL_CHURN_RATE", 0),
		retention:   churnEnvDuration(t, "DEDUP_SQL_CHURN_RETENTION", 2*time.Minute),
		cleanup:     churnEnvDuration(t, "DEDUP_SQL_CHURN_CLEANUP", 15*time.Second),
		batchSize:   churnEnvInt(t, "DEDUP_SQL_CHURN_CLEANUP_BATCH", 0),
		workers:     churnEnvInt(t, "DEDUP_SQL_CHURN_WORKERS", 8),
		handleBatch: churnEnvInt(t, "DEDUP_SQL_CHURN_HANDLE_BATCH", 1),
		keys:        churnOr(os.Getenv("DEDUP_SQL_CHURN_KEYS"), "random"),
		sample:      churnEnvDuration(t, "DEDUP_SQL_CHURN_SAMPLE", 15*time.Second),
		out:         os.Getenv("DEDUP_SQL_CHURN_OUT"),
		server:      churnOr(os.Getenv("DEDUP_SQL_CHURN_SERVER"), "own"),
		pgConf:      churnList(os.Getenv("DEDUP_SQL_CHURN_PG_CONF")),
		pgTable:     churnList(os.Getenv("DEDUP_SQL_CHURN_PG_TABLE")),
		mysqlConf:   churnList(os.Getenv("DEDUP_SQL_CHURN_MYSQL_CONF")),
	}
	if s := os.Getenv("DEDUP_SQL_CHURN_STORES"); s != "" {
		cfg.stores = nil
		for _, name := range strings.Split(s, ",") {
			switch name = strings.TrimSpace(name); name {
			case "pg", "mysql":
				cfg.stores = append(cfg.stores, name)
			default:
				t.Fatalf("DEDUP_SQL_CHURN_STORES=%q: %q is neither pg nor mysql", s, name)
			}
		}
	}
	switch {
	case cfg.retention <= 0 || cfg.cleanup <= 0 || cfg.sample <= 0:
		t.Fatal("DEDUP_SQL_CHURN_RETENTION, _CLEANUP and _SAMPLE must be positive")
	case cfg.workers <= 0 || cfg.handleBatch <= 0 || cfg.batchSize < 0 || cfg.rate < 0:
		t.Fatal("DEDUP_SQL_CHURN_WORKERS and _HANDLE_BATCH must be positive, _CLEANUP_BATCH and _RATE not negative")
	case cfg.keys != "random" && cfg.keys != "sequential":
		t.Fatalf("DEDUP_SQL_CHURN_KEYS=%q: want random or sequential", cfg.keys)
	case cfg.server != "own" && cfg.server != "shared":
		t.Fatalf("DEDUP_SQL_CHURN_SERVER=%q: want own or shared", cfg.server)
	case cfg.server == "shared" && len(cfg.pgConf)+len(cfg.mysqlConf) > 0:
		t.Fatal("DEDUP_SQL_CHURN_PG_CONF and _MYSQL_CONF set the server's settings: only on a server of the run's own (DEDUP_SQL_CHURN_SERVER=own)")
	}
	return cfg
}

func (c churnConfig) String() string {
	rate := "as fast as it goes"
	if c.rate > 0 {
		rate = fmt.Sprintf("%.0f/s", c.rate)
	}
	batch := "the store's default"
	if c.batchSize > 0 {
		batch = strconv.Itoa(c.batchSize)
	}
	return fmt.Sprintf("%s servers, %d records a store (%s), rate %s (floor %.0f/s), retention %v, cleanup every %v (batch %s), %d workers, %d a Handle%s, %s keys, a sample every %v",
		c.server, c.total, strings.Join(c.stores, ", "), rate, c.floor, c.retention, c.cleanup, batch, c.workers,
		c.handleBatch, map[bool]string{true: "Batch", false: ""}[c.handleBatch > 1], c.keys, c.sample)
}

// fields is the configuration as the series file records it.
func (c churnConfig) fields() map[string]any {
	return map[string]any{
		"records": c.total, "rate": c.rate, "floor": c.floor, "retention_s": c.retention.Seconds(),
		"cleanup_s": c.cleanup.Seconds(), "cleanup_batch": c.batchSize, "workers": c.workers,
		"handle_batch": c.handleBatch, "keys": c.keys, "sample_s": c.sample.Seconds(), "server": c.server,
		"pg_conf": c.pgConf, "pg_table": c.pgTable, "mysql_conf": c.mysqlConf,
	}
}

// churnList splits a comma-separated list of name=value settings.
func churnList(v string) []string {
	var out []string
	for _, kv := range strings.Split(v, ",") {
		if kv = strings.TrimSpace(kv); kv != "" {
			out = append(out, kv)
		}
	}
	return out
}

func churnOr(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// churnEnv is the environment variable name parsed by parse, def when
// it is unset; a value parse refuses fails t.
func churnEnv[T any](t *testing.T, name string, def T, parse func(string) (T, error)) T {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	x, err := parse(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return x
}

func churnEnvInt(t *testing.T, name string, def int) int {
	t.Helper()
	return churnEnv(t, name, def, strconv.Atoi)
}

func churnEnvFloat(t *testing.T, name string, def float64) float64 {
	t.Helper()
	return churnEnv(t, name, def, func(v string) (float64, error) { return strconv.ParseFloat(v, 64) })
}

func churnEnvDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	return churnEnv(t, name, def, time.ParseDuration)
}

// churnTarget is one store under churn, with what the run reads of its
// server.
type churnTarget struct {
	name  string
	store store.Store
	// cleanup is the store's Cleanup.
	cleanup func(context.Context) (int64, error)
	// stats reads the table's figures.
	stats func(context.Context) (churnStats, error)
	// settings describes the server's settings that bear on the run.
	settings string
	// vacuum is PostgreSQL's autovacuum settings for the table (nil on
	// MariaDB).
	vacuum *churnVacuum
	// dataDir is the server's data directory, when it is on this machine.
	dataDir string
}

// churnStats is what one sample reads of the table and its server.
type churnStats struct {
	Rows        int64   `json:"rows"`        // rows in the table, expired ones included
	Backlog     int64   `json:"backlog"`     // rows expired and not yet deleted
	TableBytes  int64   `json:"table_bytes"` // PostgreSQL: the heap (pg_table_size); MariaDB: data_length (the clustered primary key)
	IndexBytes  int64   `json:"index_bytes"` // PostgreSQL: both indexes; MariaDB: index_length (the expiry index)
	ExpiryIdx   int64   `json:"expiry_index_bytes"`
	TotalBytes  int64   `json:"total_bytes"` // table and indexes
	FileBytes   int64   `json:"file_bytes"`  // on disk: PostgreSQL the relations' files, MariaDB the .ibd file's allocated size
	FreeBytes   int64   `json:"free_bytes"`  // MariaDB: data_free
	LiveTup     int64   `json:"n_live_tup"`
	DeadTup     int64   `json:"n_dead_tup"`
	Autovacs    int64   `json:"autovacuum_count"`
	LastAutovac float64 `json:"last_autovacuum_age_s"` // -1: none yet
	History     int64   `json:"history_list_length"`   // MariaDB's purge backlog
	LogBytes    int64   `json:"log_bytes"`             // WAL position (PostgreSQL) or redo written (MariaDB), cumulative
	DataDir     int64   `json:"data_dir_bytes"`        // the server's data directory (-1: not on this machine)
}

// churnSample is one line of the series.
type churnSample struct {
	Phase       string  `json:"phase"` // write or drain
	Elapsed     float64 `json:"elapsed_s"`
	Written     int64   `json:"written"`
	Rate        float64 `json:"rate"` // records a second over the interval
	Deleted     int64   `json:"deleted"`
	DeleteRate  float64 `json:"deleted_per_s"` // over the interval
	Cleanups    int64   `json:"cleanup_runs"`
	CleanupMax  float64 `json:"cleanup_max_s"`  // the longest Cleanup that ended in the interval
	CleanupBusy float64 `json:"cleanup_busy_s"` // the time spent in Cleanup so far
	ClaimP50    float64 `json:"claim_p50_ms"`
	ClaimP99    float64 `json:"claim_p99_ms"`
	HandleP50   float64 `json:"handle_p50_ms"`
	HandleP99   float64 `json:"handle_p99_ms"`
	Errors      int64   `json:"errors"`
	churnStats

	claim, handle latencies
}

// churnRun is one store's run: its settings, its series and its verdict.
type churnRun struct {
	Store    string        `json:"store"`
	Settings string        `json:"settings"`
	Samples  []churnSample `json:"samples"`
	Summary  []string      `json:"summary"`
}

// churnReport is the series file.
type churnReport struct {
	Config map[string]any `json:"config"`
	Runs   []churnRun     `json:"runs"`
}

func (r churnReport) write(path string) error {
	if strings.HasSuffix(path, ".json") {
		b, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(path, append(b, '\n'), 0o644)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"store", "phase", "elapsed_s", "written", "rate", "deleted", "deleted_per_s", "cleanup_runs", "cleanup_max_s", "cleanup_busy_s",
		"claim_p50_ms", "claim_p99_ms", "handle_p50_ms", "handle_p99_ms", "errors", "rows", "backlog", "table_bytes", "index_bytes",
		"expiry_index_bytes", "total_bytes", "file_bytes", "free_bytes", "n_live_tup", "n_dead_tup", "autovacuum_count",
		"last_autovacuum_age_s", "history_list_length", "log_bytes", "data_dir_bytes"})
	for _, run := range r.Runs {
		for _, s := range run.Samples {
			f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
			i := func(v int64) string { return strconv.FormatInt(v, 10) }
			_ = w.Write([]string{run.Store, s.Phase, f(s.Elapsed), i(s.Written), f(s.Rate), i(s.Deleted), f(s.DeleteRate), i(s.Cleanups),
				f(s.CleanupMax), f(s.CleanupBusy), f(s.ClaimP50), f(s.ClaimP99), f(s.HandleP50), f(s.HandleP99), i(s.Errors), i(s.Rows), i(s.Backlog),
				i(s.TableBytes), i(s.IndexBytes), i(s.ExpiryIdx), i(s.TotalBytes), i(s.FileBytes), i(s.FreeBytes), i(s.LiveTup),
				i(s.DeadTup), i(s.Autovacs), f(s.LastAutovac), i(s.History), i(s.LogBytes), i(s.DataDir)})
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// churnMsg is a message of the run: a new id each, and when its Handle
// began, for the claim latency its handler measures.
type churnMsg struct {
	ID    string
	Seq   int64
	start time.Time
	w     *churnWorker
}

// churnResult is the small result each record completes with.
type churnResult struct {
	Seq int64 `json:"seq"`
	OK  bool  `json:"ok"`
}

// churnWorker is one writing goroutine's latencies of the current
// interval.
type churnWorker struct {
	mu            sync.Mutex
	claim, handle latencies
}

func (w *churnWorker) record(l func(*churnWorker) *latencies, d time.Duration) {
	w.mu.Lock()
	*l(w) = append(*l(w), d)
	w.mu.Unlock()
}

// drainInto adds the worker's latencies to claim and handle and starts
// its next interval.
func (w *churnWorker) drainInto(claim, handle *latencies) {
	w.mu.Lock()
	*claim = append(*claim, w.claim...)
	*handle = append(*handle, w.handle...)
	w.claim, w.handle = w.claim[:0], w.handle[:0]
	w.mu.Unlock()
}

// churnCleanup is what the cleanup loop did so far.
type churnCleanup struct {
	mu      sync.Mutex
	deleted int64
	runs    int64
	longest time.Duration // of the runs since the last sample
	busy    time.Duration // of all the runs
	errs    int64
	lastErr error
}

// runChurn writes cfg.total records through target and samples it into
// run until it has drained, then checks the bounds. It fails t when
// parent ends first.
func runChurn(t *testing.T, parent context.Context, cfg churnConfig, target churnTarget, run *churnRun) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	run.Settings = target.settings
	t.Logf("%s: %s", target.name, target.settings)

	rcv, err := dedup.NewReceiver(target.store, func(m churnMsg) (string, error) { return m.ID, nil },
		func(ctx context.Context, m churnMsg) (churnResult, error) {
			if err := ctx.Err(); err != nil {
				return churnResult{}, err
			}
			m.w.record(func(w *churnWorker) *latencies { return &w.claim }, time.Since(m.start))
			return churnResult{Seq: m.Seq, OK: true}, nil
		}, &dedup.Config{Namespace: "churn", Retention: cfg.retention})
	if err != nil {
		t.Fatal(err)
	}

	before, err := target.stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()

	// The cleanup, beside the writers, as RunCleanup runs it: at once,
	// then every interval (a run longer than the interval is followed by
	// the next one at once).
	var cl churnCleanup
	cleanupDone := make(chan struct{})
	go func() {
		defer close(cleanupDone)
		ticker := time.NewTicker(cfg.cleanup)
		defer ticker.Stop()
		for {
			t0 := time.Now()
			n, err := target.cleanup(ctx)
			took := time.Since(t0)
			cl.mu.Lock()
			cl.deleted += n
			cl.runs++
			cl.longest = max(cl.longest, took)
			cl.busy += took
			if err != nil && ctx.Err() == nil {
				cl.errs++
				cl.lastErr = err
			}
			cl.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
		}
	}()

	// The writers.
	var next, written, failed atomic.Int64
	var firstErr atomic.Value
	workers := make([]*churnWorker, cfg.workers)
	var wg sync.WaitGroup
	prefix := fmt.Sprintf("%d-%d-", os.Getpid(), began.UnixNano())
	for i := range workers {
		w := &churnWorker{}
		workers[i] = w
		rng := rand.New(rand.NewPCG(uint64(began.UnixNano()), uint64(i)))
		wg.Go(func() {
			batch := make([]churnMsg, 0, cfg.handleBatch)
			for ctx.Err() == nil {
				first := next.Add(int64(cfg.handleBatch)) - int64(cfg.handleBatch)
				if first >= cfg.total {
					return
				}
				n := min(int64(cfg.handleBatch), cfg.total-first)
				if cfg.rate > 0 {
					due := began.Add(time.Duration(float64(first) / cfg.rate * float64(time.Second)))
					if d := time.Until(due); d > 0 {
						time.Sleep(d)
					}
				}
				batch = batch[:0]
				now := time.Now()
				for seq := first; seq < first+n; seq++ {
					batch = append(batch, churnMsg{ID: churnID(cfg.keys, prefix, seq, rng), Seq: seq, start: now, w: w})
				}
				var outcomes []dedup.Outcome[churnResult]
				if n == 1 && cfg.handleBatch == 1 {
					res, err := rcv.Handle(ctx, batch[0])
					outcomes = []dedup.Outcome[churnResult]{{Result: res, Err: err}}
				} else {
					outcomes = rcv.HandleBatch(ctx, batch)
				}
				took := time.Since(now)
				w.record(func(w *churnWorker) *latencies { return &w.handle }, took)
				for i, o := range outcomes {
					if o.Err != nil || o.Result.Status != delivery.StatusProcessed {
						if ctx.Err() != nil {
							return
						}
						failed.Add(1)
						firstErr.CompareAndSwap(nil, fmt.Sprintf("%s: status %v, %v", batch[i].ID, o.Result.Status, o.Err))
					}
				}
				written.Add(n)
			}
		})
	}
	writersDone := make(chan struct{})
	go func() { wg.Wait(); close(writersDone) }()
	stop := func() {
		cancel()
		<-writersDone
		<-cleanupDone
	}
	defer stop()

	t.Logf("%s: %s", target.name, churnHeader(target.vacuum != nil))
	ticker := time.NewTicker(cfg.sample)
	defer ticker.Stop()
	phase := "write"
	var wrote time.Duration // the writing phase's length
	var prev churnSample
	prevAt := began
	var drainUntil time.Time
	writing := writersDone
	for {
		select {
		case <-parent.Done():
			t.Fatalf("%s: stopped after %.0f s, %d records written: %v (an interrupt, or the test's -timeout a minute away: run with -timeout 0)",
				target.name, time.Since(began).Seconds(), written.Load(), context.Cause(parent))
		case <-ticker.C:
		case <-writing:
			if phase == "write" {
				phase, wrote = "drain", time.Since(began)
				drainUntil = time.Now().Add(cfg.retention + 2*cfg.cleanup)
				writing = nil // sampled on the ticker from now on
			}
			continue
		}
		if failed.Load() > 100 {
			t.Fatalf("%s: %d records failed, the first: %v", target.name, failed.Load(), firstErr.Load())
		}
		now := time.Now()
		st, err := target.stats(ctx)
		if err != nil {
			t.Fatalf("%s: stats: %v", target.name, err)
		}
		s := churnSample{Phase: phase, Elapsed: now.Sub(began).Seconds(), Written: written.Load(), Errors: failed.Load(),
			churnStats: st}
		for _, w := range workers {
			w.drainInto(&s.claim, &s.handle)
		}
		cl.mu.Lock()
		s.Deleted, s.Cleanups, s.CleanupMax, s.CleanupBusy = cl.deleted, cl.runs, cl.longest.Seconds(), cl.busy.Seconds()
		cl.longest = 0
		cl.mu.Unlock()
		dt := now.Sub(prevAt).Seconds()
		s.Rate = float64(s.Written-prev.Written) / dt
		s.DeleteRate = float64(s.Deleted-prev.Deleted) / dt
		s.ClaimP50, s.ClaimP99 = churnMs(s.claim.quantile(0.5)), churnMs(s.claim.quantile(0.99))
		s.HandleP50, s.HandleP99 = churnMs(s.handle.quantile(0.5)), churnMs(s.handle.quantile(0.99))
		run.Samples = append(run.Samples, s)
		t.Logf("%s: %s", target.name, s.line(target.vacuum != nil))
		prev, prevAt = s, now
		if phase == "drain" && (st.Rows == 0 || now.After(drainUntil)) {
			break
		}
	}
	stop()
	took := time.Since(began)

	cl.mu.Lock()
	if cl.errs > 0 {
		t.Errorf("%s: %d cleanup runs failed, the last: %v", target.name, cl.errs, cl.lastErr)
	}
	cl.mu.Unlock()
	if n := failed.Load(); n > 0 {
		t.Errorf("%s: %d records failed, the first: %v", target.name, n, firstErr.Load())
	}
	run.Summary = churnBounds(t, cfg, target, before, run.Samples, wrote, took)
	for _, line := range run.Summary {
		t.Logf("%s: %s", target.name, line)
	}
}

// churnID is the id of record seq: UUID-like and random, or the run's
// prefix and seq.
func churnID(keys, prefix string, seq int64, rng *rand.Rand) string {
	if keys == "sequential" {
		return prefix + fmt.Sprintf("%012d", seq)
	}
	a, b := rng.Uint64(), rng.Uint64()
	return fmt.Sprintf("%08x-%04x-4%03x-%04x-%012x", a>>32, (a>>16)&0xffff, a&0xfff, (b>>48)&0x3fff|0x8000, b&0xffffffffffff)
}

func churnMs(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

const churnMiB = 1 << 20

// churnHeader names the columns of a sample line: what was written and
// deleted, the sizes, PostgreSQL's tuples and autovacuum runs or
// MariaDB's free space and purge backlog, the latencies.
func churnHeader(pg bool) string {
	server := "free(MiB) history"
	if pg {
		server = "live_tup dead_tup autovac last(s)"
	}
	return "    t(s) phase    written  rate/s      rows backlog  del/s  cl.max(s) |  table   index  expiry   total    file (MiB) | " +
		server + " | claim p50/p99  handle p50/p99 (ms) errs"
}

func (s churnSample) line(pg bool) string {
	server := fmt.Sprintf("%9.1f %7d", float64(s.FreeBytes)/churnMiB, s.History)
	if pg {
		last := "-"
		if s.LastAutovac >= 0 {
			last = fmt.Sprintf("%.0f", s.LastAutovac)
		}
		server = fmt.Sprintf("%8d %8d %7d %7s", s.LiveTup, s.DeadTup, s.Autovacs, last)
	}
	return fmt.Sprintf("%8.0f %-5s %10d %7.0f %9d %7d %6.0f %10.2f | %6.1f %7.1f %7.1f %7.1f %7.1f       | %s | %6.2f/%-6.2f %6.2f/%-6.2f %7d",
		s.Elapsed, s.Phase, s.Written, s.Rate, s.Rows, s.Backlog, s.DeleteRate, s.CleanupMax,
		float64(s.TableBytes)/churnMiB, float64(s.IndexBytes)/churnMiB, float64(s.ExpiryIdx)/churnMiB, float64(s.TotalBytes)/churnMiB, float64(s.FileBytes)/churnMiB,
		server, s.ClaimP50, s.ClaimP99, s.HandleP50, s.HandleP99, s.Errors)
}

// churnDirSize is the bytes of the files under dir, or -1 when it cannot be
// read (the server is elsewhere).
func churnDirSize(dir string) int64 {
	if dir == "" {
		return -1
	}
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // a file removed meanwhile
		}
		if !d.IsDir() {
			if info, err := d.Info(); err == nil {
				total += info.Size()
			}
		}
		return nil
	})
	if err != nil {
		return -1
	}
	return total
}
