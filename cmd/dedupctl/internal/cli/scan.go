package cli

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/dedup-go/dedup/store"
)

// lastErrorWidth is how much of a last error a table row shows.
const lastErrorWidth = 60

// selectionFlags adds --state and --id-prefix to cmd; selection reads
// them with --namespace.
type selectionFlags struct {
	states   []string
	idPrefix string
}

func (f *selectionFlags) add(cmd *cobra.Command, stateHelp string) {
	cmd.Flags().StringSliceVar(&f.states, "state", nil, stateHelp)
	cmd.Flags().StringVar(&f.idPrefix, "id-prefix", "", "only ids that start with `PREFIX`")
}

func (f *selectionFlags) selection(o *options) (selection, error) {
	states, err := parseStates(f.states)
	if err != nil {
		return selection{}, err
	}
	return selection{namespace: o.namespace, idPrefix: f.idPrefix, states: states}, nil
}

func newScanCmd(o *options) *cobra.Command {
	var (
		sel   selectionFlags
		limit int
	)
	cmd := &cobra.Command{
		Use:   "scan",
		Short: "List records by namespace, state and id prefix",
		Long: `List the records of the store, or of --namespace, filtered by --state and
--id-prefix, as the store streams them: SCAN on every master on Redis (never
KEYS), pages in key order on PostgreSQL (never the whole table at once). The
order is the store's: key order on PostgreSQL, none on Redis.

Rows are written as they come (a table is aligned over each batch of rows),
with a progress count on stderr when it is a terminal. No record matching is
not an error.`,
		Example: `  dedupctl scan --namespace orders --state failed
  dedupctl scan --namespace orders --id-prefix 2024- --limit 20 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := sel.selection(o)
			if err != nil {
				return err
			}
			if limit < 0 {
				return usageErrorf("--limit %d: must not be negative", limit)
			}
			ins, where, closeStore, err := o.openStore(cmd.Context())
			if err != nil {
				return err
			}
			defer closeStore()

			p := o.newPrinter(o.streams.Out, "KEY", "STATE", "ATTEMPT", "UNTIL", "RESULT", "LAST ERROR")
			prog := o.newProgress(-1, "scanning", "records")
			n := 0
			err = s.scan(cmd.Context(), ins, where, prog, func(rec store.Record) (bool, error) {
				n++
				return limit == 0 || n < limit, p.row(newRecordJSON(rec, false), recordCells(rec, time.Now())...)
			})
			prog.done()
			if ferr := p.flush(); err == nil {
				err = ferr
			}
			if err == nil && n == 0 && !o.jsonOutput() {
				fmt.Fprintln(o.streams.Err, "no records")
			}
			return err
		},
	}
	sel.add(cmd, "only records in `STATE`: processing, completed or failed (repeat, or a comma list)")
	cmd.Flags().IntVar(&limit, "limit", 0, "stop after `N` records (0: no limit)")
	return cmd
}

// recordCells are a record's cells in scan's and forget's tables.
func recordCells(rec store.Record, now time.Time) []string {
	lastErr := rec.LastError
	if r := []rune(lastErr); len(r) > lastErrorWidth {
		lastErr = string(r[:lastErrorWidth-1]) + "…"
	}
	result := "-"
	if rec.State == store.StateCompleted {
		result = size(len(rec.Result))
	}
	return []string{rec.Key, rec.State.String(), strconv.Itoa(rec.Attempt), until(rec, now), result, dash(lastErr)}
}
