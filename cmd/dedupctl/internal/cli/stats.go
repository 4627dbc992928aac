package cli

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/dedup-go/dedup/store"
)

// Failed records are grouped by the first errorKeyLen bytes of their last
// error, in at most maxErrorGroups groups (the rest count as otherErrors),
// so that errors that each carry an id cannot grow the tool's memory with
// the store.
const (
	errorKeyLen    = 200
	maxErrorGroups = 10_000
	otherErrors    = "(other errors)"
)

// stateCounts are the records of one namespace (or all) by state.
type stateCounts struct {
	Namespace  string `json:"namespace,omitempty"`
	Processing int    `json:"processing"`
	Completed  int    `json:"completed"`
	Failed     int    `json:"failed"`
	Total      int    `json:"total"`
}

func (c *stateCounts) count(s store.State) {
	switch s {
	case store.StateProcessing:
		c.Processing++
	case store.StateCompleted:
		c.Completed++
	case store.StateFailed:
		c.Failed++
	}
	c.Total++
}

// errorGroup is the failed records of one last error.
type errorGroup struct {
	LastError  string `json:"last_error"`
	Count      int    `json:"count"`
	ExampleKey string `json:"example_key"`
}

// statsJSON is stats' one JSON object. The field names are part of the
// tool's interface (docs/operations.md lists them).
type statsJSON struct {
	Namespaces       []stateCounts `json:"namespaces"`
	Total            stateCounts   `json:"total"`
	OldestProcessing *recordJSON   `json:"oldest_processing"`
	FailedByError    []errorGroup  `json:"failed_by_error"`
}

// tally gathers stats over a scan.
type tally struct {
	byNS   map[string]*stateCounts
	total  stateCounts
	oldest *store.Record
	errs   map[string]*errorGroup
}

func (t *tally) add(rec store.Record) {
	ns, _ := splitKey(rec.Key)
	c := t.byNS[ns]
	if c == nil {
		c = &stateCounts{Namespace: ns}
		t.byNS[ns] = c
	}
	c.count(rec.State)
	t.total.count(rec.State)
	switch rec.State {
	case store.StateProcessing:
		if t.oldest == nil || rec.LeaseUntil.Before(t.oldest.LeaseUntil) {
			r := rec
			r.Result = nil
			t.oldest = &r
		}
	case store.StateFailed:
		msg := rec.LastError
		if len(msg) > errorKeyLen {
			msg = msg[:errorKeyLen]
			for !utf8.ValidString(msg) {
				msg = msg[:len(msg)-1]
			}
			msg += "…"
		}
		g := t.errs[msg]
		if g == nil && len(t.errs) >= maxErrorGroups {
			msg = otherErrors
			g = t.errs[msg]
		}
		if g == nil {
			g = &errorGroup{LastError: msg, ExampleKey: rec.Key}
			t.errs[msg] = g
		}
		g.Count++
	}
}

// result is the tally as stats shows it, with the top errors.
func (t *tally) result(top int) statsJSON {
	out := statsJSON{Total: t.total, Namespaces: []stateCounts{}, FailedByError: []errorGroup{}}
	for _, ns := range slices.Sorted(maps.Keys(t.byNS)) {
		out.Namespaces = append(out.Namespaces, *t.byNS[ns])
	}
	if t.oldest != nil {
		r := newRecordJSON(*t.oldest, false)
		out.OldestProcessing = &r
	}
	groups := slices.SortedFunc(maps.Values(t.errs), func(a, b *errorGroup) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.LastError, b.LastError))
	})
	for _, g := range groups[:min(top, len(groups))] {
		out.FailedByError = append(out.FailedByError, *g)
	}
	return out
}

func newStatsCmd(o *options) *cobra.Command {
	var top int
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Count records by namespace and state; show stuck leases and failures",
		Long: `Scan the store (or --namespace) and show:
  - the records of each namespace by state, and their total;
  - the oldest processing record: the one whose lease ends (or ended) first.
    A lease that ended long ago is a stuck claim: its worker died and no
    delivery of the message came back to take it over;
  - failed records grouped by last error, the most frequent first (--top).

The scan streams (SCAN on Redis, key pages on PostgreSQL), with a progress
count on stderr when it is a terminal; memory grows with the namespaces and
distinct errors (at most 10000 groups; the rest are counted as
"(other errors)"), not with the records.`,
		Example: `  dedupctl stats
  dedupctl stats --namespace orders --top 5 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if top < 0 {
				return usageErrorf("--top %d: must not be negative", top)
			}
			ins, where, closeStore, err := o.openStore(cmd.Context())
			if err != nil {
				return err
			}
			defer closeStore()

			t := &tally{byNS: map[string]*stateCounts{}, errs: map[string]*errorGroup{}}
			prog := o.newProgress(-1, "scanning", "records")
			err = selection{namespace: o.namespace}.scan(cmd.Context(), ins, where, prog, func(rec store.Record) (bool, error) {
				t.add(rec)
				return true, nil
			})
			prog.done()
			if err != nil {
				return err
			}
			return o.printStats(t.result(top))
		},
	}
	cmd.Flags().IntVar(&top, "top", 10, "how many last errors of failed records to show")
	return cmd
}

// printStats writes stats: one JSON object, or three tables.
func (o *options) printStats(s statsJSON) error {
	w := o.streams.Out
	if o.jsonOutput() {
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		return enc.Encode(s)
	}
	counts := o.newPrinter(w, "NAMESPACE", "PROCESSING", "COMPLETED", "FAILED", "TOTAL")
	for _, c := range append(s.Namespaces, s.Total) {
		ns := c.Namespace
		if ns == "" {
			ns = "(all)"
		}
		if err := counts.row(nil, ns, strconv.Itoa(c.Processing), strconv.Itoa(c.Completed), strconv.Itoa(c.Failed), strconv.Itoa(c.Total)); err != nil {
			return err
		}
	}
	if err := counts.flush(); err != nil {
		return err
	}
	if r := s.OldestProcessing; r != nil {
		fmt.Fprintln(w)
		oldest := o.newPrinter(w, "OLDEST PROCESSING", "ATTEMPT", "LEASE UNTIL")
		var lease time.Time
		if r.LeaseUntil != nil {
			lease = *r.LeaseUntil
		}
		if err := oldest.row(nil, r.Key, strconv.Itoa(r.Attempt), leaseWhen(lease, time.Now())); err != nil {
			return err
		}
		if err := oldest.flush(); err != nil {
			return err
		}
	}
	if len(s.FailedByError) > 0 {
		fmt.Fprintln(w)
		errs := o.newPrinter(w, "FAILED", "LAST ERROR", "EXAMPLE KEY")
		for _, g := range s.FailedByError {
			if err := errs.row(nil, strconv.Itoa(g.Count), dash(g.LastError), g.ExampleKey); err != nil {
				return err
			}
		}
		return errs.flush()
	}
	return nil
}
