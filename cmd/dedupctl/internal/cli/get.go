package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/dedup-go/dedup/store"
)

// resultPreview is how many bytes of a result that is not JSON the table
// shows.
const resultPreview = 200

func newGetCmd(o *options) *cobra.Command {
	var (
		raw  bool
		idem idempotencyFlags
	)
	cmd := &cobra.Command{
		Use:   "get KEY... | --idempotency-key KEY --principal P",
		Short: "Show the records of keys",
		Long: `Show the record of each key: state, attempt, the token of its last claim,
lease end, when it was created (its first claim), completed (or last failed)
and expires, last error, fingerprint, result size, and the result (decoded as
JSON when it is JSON).

A record whose handler ran recorded steps (dedup.Step) shows each step
after it, in the order the steps completed: its name, state (done,
done-result-not-stored, compensated), order and result (as text when it is
JSON, else in base64, or its length when long). The record that says the
message was given up (dedup/given-up) comes after them: its state
(compensating while the compensations have not all run, compensated-all
once they have), the reason and cause it was given up for, the step whose
compensation failed last and how many times they failed. A step record a
dedup receiver did not write is shown raw, with a note saying so. With
--output json they are the record's "steps".

A key is NAMESPACE:ID, or an ID read in --namespace. The token is the one in
the holder's logs while processing, the one that completed or released the
record after. A time the record does not have is shown as "-": no completion
while processing, no lease once settled, and no token or creation time in a
record written before the store kept them.

The record of an HTTP Idempotency-Key is named instead by --idempotency-key
and --principal (and --operation, when the middleware's Options.Operation is
set), in --namespace: the tool builds its id as the middleware does
(deduphttp.RecordID). --middleware grpc builds the gRPC interceptor's
(dedupgrpc.RecordID), which has no operation.

--raw writes the result's bytes alone, as stored, for one key.

A key without a record (never seen, expired or forgotten) is reported on
stderr; the records found are printed, and the exit code is 3 if any key had
none.`,
		Example: `  dedupctl get orders:42
  dedupctl --namespace orders get 42 43
  dedupctl get orders:42 --raw > result.json
  dedupctl get --namespace payments-http --principal acme --idempotency-key pay-7`,
		RunE: func(cmd *cobra.Command, args []string) error {
			keys, err := o.keys(args)
			if err != nil {
				return err
			}
			idemKey, byIdem, err := idem.recordKey(cmd, o)
			switch {
			case err != nil:
				return err
			case byIdem && len(keys) > 0:
				return usageErrorf("give keys, or --idempotency-key, not both")
			case byIdem:
				keys = []string{idemKey}
			case len(keys) == 0:
				return usageErrorf("no key: give KEY..., or --idempotency-key with --principal")
			}
			if raw && len(keys) != 1 {
				return usageErrorf("--raw writes the result of one key; %d given", len(keys))
			}
			ins, where, closeStore, err := o.openStore(cmd.Context())
			if err != nil {
				return err
			}
			defer closeStore()

			var missing []string
			for i, key := range keys {
				rec, err := ins.Get(cmd.Context(), key)
				switch {
				case errors.Is(err, store.ErrNotFound):
					missing = append(missing, key)
					continue
				case err != nil:
					return storeError(where, key, err)
				}
				if raw {
					if rec.State != store.StateCompleted {
						return fmt.Errorf("%s is %s: only a completed record has a result", shown(key), rec.State)
					}
					_, err = o.streams.Out.Write(rec.Result)
				} else {
					err = o.printRecord(rec, i > 0)
				}
				if err != nil {
					return err
				}
			}
			if len(missing) > 0 {
				return notFound(fmt.Errorf("not found: %s", joinShort(missing)))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&raw, "raw", false, "write the result's bytes alone, as stored (one key)")
	idem.add(cmd)
	return cmd
}

// printRecord writes one record of get: a JSON object, or a block of
// "field value" lines (after a blank line when it is not the first).
func (o *options) printRecord(rec store.Record, blank bool) error {
	if o.jsonOutput() {
		enc := json.NewEncoder(o.streams.Out)
		enc.SetEscapeHTML(false)
		return enc.Encode(newRecordJSON(rec, true))
	}
	var b strings.Builder
	if blank {
		b.WriteString("\n")
	}
	now := time.Now()
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	line := func(field, value string) { fmt.Fprintf(tw, "%s\t%s\n", field, cellSpaces.Replace(value)) }
	line("key", rec.Key)
	line("state", rec.State.String())
	line("attempt", strconv.Itoa(rec.Attempt))
	line("token", tokenText(rec.Token))
	line("lease until", leaseWhen(rec.LeaseUntil, now))
	line("created", when(rec.CreatedAt, now))
	line("completed", when(rec.CompletedAt, now))
	line("expires", when(rec.ExpiresAt, now))
	line("last error", dash(rec.LastError))
	line("fingerprint", dash(rec.Fingerprint))
	line("result size", size(len(rec.Result)))
	switch {
	case len(rec.Result) == 0:
		line("result", "-")
	case json.Valid(rec.Result):
		var ind bytes.Buffer
		_ = json.Indent(&ind, rec.Result, "", "  ") // valid JSON indents
		for i, l := range strings.Split(ind.String(), "\n") {
			field := ""
			if i == 0 {
				field = "result"
			}
			fmt.Fprintf(tw, "%s\t%s\n", field, l)
		}
	default:
		preview := rec.Result
		more := ""
		if len(preview) > resultPreview {
			preview, more = preview[:resultPreview], "…"
		}
		line("result", strconv.Quote(string(preview))+more+" (not JSON; --raw writes the bytes)")
	}
	stepLines(line, rec.Steps)
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := io.WriteString(o.streams.Out, b.String())
	return err
}

// tokenText is t in hexadecimal, or "-" when the store keeps none.
func tokenText(t store.Token) string {
	if t.IsZero() {
		return "-"
	}
	return t.String()
}

// dash is s, or "-" when it is empty.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
