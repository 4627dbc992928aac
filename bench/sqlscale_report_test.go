package bench

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/dedup-go/dedup/bench/internal/perf"
)

// The scale harness's report (TestSQLScale): what DEDUP_SQL_SCALE_OUT
// gets as JSON, and the markdown printed.

// scaleReport is one run of the harness.
type scaleReport struct {
	// Date is when the run ended (UTC, RFC 3339).
	Date   string `json:"date"`
	Go     string `json:"go"`
	Procs  int    `json:"gomaxprocs"`
	Rounds int    `json:"rounds"`
	// Records is DEDUP_SQL_SCALE, the big tables' records; Small the
	// small ones'.
	Records int                `json:"records"`
	Small   int                `json:"small"`
	Stores  []scaleStoreReport `json:"stores"`
}

// scaleStoreReport is one store's tables and operations.
type scaleStoreReport struct {
	Store  string `json:"store"`
	Server string `json:"server"`
	// Tables are the small table and the big one, in that order.
	Tables []scaleTableReport `json:"tables"`
	Ops    []scaleOpReport    `json:"ops"`
}

// scaleTableReport is one table as the run found or loaded it, before
// anything was measured on it.
type scaleTableReport struct {
	Name    string `json:"name"`
	Records int    `json:"records"`
	// Reused is true of a table a run before kept: not loaded by this
	// one, LoadSeconds zero.
	Reused         bool       `json:"reused,omitempty"`
	LoadSeconds    float64    `json:"load_seconds"`
	AnalyzeSeconds float64    `json:"analyze_seconds"`
	Sizes          scaleSizes `json:"sizes"`
}

// scaleSizes are a table's sizes on disk, in bytes.
type scaleSizes struct {
	// Total is all of the table's storage: PostgreSQL's
	// pg_total_relation_size; InnoDB's tablespace file, as allocated.
	Total int64 `json:"total"`
	// Data is the rows: PostgreSQL's heap (pg_relation_size); InnoDB's
	// data_length, the clustered index, which is the primary key and the
	// rows in one.
	Data int64 `json:"data"`
	// Indexes are the indexes besides the rows: pg_indexes_size (the
	// primary key and the expiry index); InnoDB's index_length (the
	// expiry index).
	Indexes int64 `json:"indexes"`
	// PrimaryKey is PostgreSQL's primary key index alone; zero for
	// InnoDB, whose primary key is the table's Data.
	PrimaryKey int64 `json:"primary_key,omitempty"`
	// Expiry is the expires_at index.
	Expiry int64 `json:"expiry"`
	// Free is InnoDB's data_free: space allocated and unused.
	Free int64 `json:"free,omitempty"`
}

// String is s for a table of n records.
func (s scaleSizes) String(n int) string {
	out := fmt.Sprintf("%s on disk (%.0f B per record): data %s, indexes %s", scaleBytes(s.Total), float64(s.Total)/float64(n), scaleBytes(s.Data), scaleBytes(s.Indexes))
	if s.PrimaryKey > 0 {
		out += fmt.Sprintf(" (primary key %s, expiry %s)", scaleBytes(s.PrimaryKey), scaleBytes(s.Expiry))
	}
	return out
}

// scaleOpReport is one operation measured on both tables.
type scaleOpReport struct {
	Name string `json:"name"`
	// Unit is what the report shows: µs per message, or per batch of
	// PerOp messages.
	Unit  string `json:"unit"`
	PerOp int    `json:"messages_per_op"`
	// N is the number of operations of a side in a round.
	N int `json:"n"`
	// Values are ns per operation per round, of the small table then the
	// big one.
	Values [][]float64 `json:"ns_per_op"`
	// Ratios are big over small, per round.
	Ratios []float64 `json:"ratios"`
	// P99 is the 99th percentile of every operation of every round, in
	// ns, of the small table then the big one.
	P99 []float64 `json:"p99_ns"`
}

// marshal is the report as JSON.
func (r scaleReport) marshal() ([]byte, error) {
	b, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// markdown is the report as markdown: per store, a table of the
// operations and a table of the tables.
func (r scaleReport) markdown() string {
	var b strings.Builder
	small, big := scaleCount(r.Small), scaleCount(r.Records)
	fmt.Fprintf(&b, "SQL stores at %s records beside %s (%s, %d rounds, Go %s, GOMAXPROCS %d). ",
		big, small, r.Date, r.Rounds, strings.TrimPrefix(r.Go, "go"), r.Procs)
	b.WriteString("Each operation ran on both tables in interleaved rounds; a side's figure is its median per operation " +
		"(per round: IQR; min-max), p99 is over every operation of every round, and the ratio is the median of the per-round ratios big over small.\n")
	for _, s := range r.Stores {
		fmt.Fprintf(&b, "\n**%s** on %s\n\n", s.Store, s.Server)
		fmt.Fprintf(&b, "| operation | %s records | %s records | ratio %s/%s (IQR; min-max) | p99 at %s | p99 at %s |\n", small, big, scaleShort(r.Records), scaleShort(r.Small), scaleShort(r.Small), scaleShort(r.Records))
		b.WriteString("|---|---|---|---|---|---|\n")
		for _, o := range s.Ops {
			us := func(ns float64) string { return perf.Format(ns / 1e3) }
			side := func(v []float64) string {
				q1, q3 := perf.Quartiles(v)
				return fmt.Sprintf("%s %s (%s-%s; %s-%s)", us(perf.Median(v)), o.Unit, us(q1), us(q3), us(slices.Min(v)), us(slices.Max(v)))
			}
			q1, q3 := perf.Quartiles(o.Ratios)
			fmt.Fprintf(&b, "| %s | %s | %s | %.2f (%.2f-%.2f; %.2f-%.2f) | %s µs | %s µs |\n", o.Name, side(o.Values[0]), side(o.Values[1]),
				perf.Median(o.Ratios), q1, q3, slices.Min(o.Ratios), slices.Max(o.Ratios), us(o.P99[0]), us(o.P99[1]))
		}
		b.WriteString("\n| table | records | loaded in | on disk | bytes per record | data | indexes | primary key per million keys | expiry index per million keys |\n")
		b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
		for _, t := range s.Tables {
			z := t.Sizes
			loaded := fmt.Sprintf("%.1f s (%s rows/s), analyzed in %.1f s", t.LoadSeconds, perf.Format(float64(t.Records)/t.LoadSeconds), t.AnalyzeSeconds)
			if t.Reused {
				loaded = fmt.Sprintf("reused (kept by a run before), analyzed in %.1f s", t.AnalyzeSeconds)
			}
			millions := float64(t.Records) / 1e6
			pk := "in the data (clustered)"
			if z.PrimaryKey > 0 {
				pk = scaleBytes(int64(float64(z.PrimaryKey) / millions))
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %.0f | %s | %s | %s | %s |\n", t.Name, scaleCount(t.Records), loaded, scaleBytes(z.Total),
				float64(z.Total)/float64(t.Records), scaleBytes(z.Data), scaleBytes(z.Indexes), pk, scaleBytes(int64(float64(z.Expiry)/millions)))
		}
	}
	return b.String()
}

// scaleCount is n with its thousands grouped.
func scaleCount(n int) string { return perf.Format(float64(n)) }

// scaleShort is n as 10k, 10M or 1.5M.
func scaleShort(n int) string {
	switch {
	case n >= 1e9 && n%1e8 == 0:
		return fmt.Sprintf("%gG", float64(n)/1e9)
	case n >= 1e6 && n%1e5 == 0:
		return fmt.Sprintf("%gM", float64(n)/1e6)
	case n >= 1e3 && n%100 == 0:
		return fmt.Sprintf("%gk", float64(n)/1e3)
	}
	return scaleCount(n)
}

// scaleBytes is b in binary units.
func scaleBytes(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.0f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}
