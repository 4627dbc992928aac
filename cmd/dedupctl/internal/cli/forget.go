package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/dedup-go/dedup/store"
)

// Outcomes of forget, as its JSON objects name them.
const (
	outcomeForgotten   = "forgotten"
	outcomeWouldForget = "would_forget"
	outcomeHeld        = "held"
	outcomeNotFound    = "not_found"
)

// forgetJSON is one line of forget's JSON output: the record as it was
// found, and what became of it.
type forgetJSON struct {
	recordJSON
	Outcome string `json:"outcome"`
}

// forgetFlags are forget's own flags.
type forgetFlags struct {
	sel      selectionFlags
	idem     idempotencyFlags
	yes      bool
	dryRun   bool
	skipHeld bool
}

// forgetTally counts the outcomes of a forget.
type forgetTally struct {
	forgotten, held, missing int
	missingKeys              []string
}

func newForgetCmd(o *options) *cobra.Command {
	var f forgetFlags
	cmd := &cobra.Command{
		Use:   "forget [KEY... | --idempotency-key KEY --principal P]",
		Short: "Forget records, never one a live claim holds",
		Long: `Forget (delete) records, so that the next delivery of their messages runs the
handler afresh: the step before a redrive, once the bug is fixed.

  forget KEY...   the records of these keys: completed or failed ones, and
                  processing ones whose lease has ended (a worker that died).
  forget --namespace N --principal P --idempotency-key K [--operation O]
                  the same, for the record of an HTTP middleware's
                  Idempotency-Key K sent by principal P (--middleware grpc:
                  the gRPC interceptor's, which has no --operation).
  forget --namespace N --state failed [--state completed] [--id-prefix P]
                  every record of namespace N in those states (bulk). It
                  counts them and asks for confirmation on stdin unless --yes;
                  when stdin is not a terminal, it refuses without --yes.

A record processing under a live lease is never forgotten: a delivery is
running its handler (or a dead worker holds it until its lease ends), and
forgetting it would let a second copy run beside the first. It is reported
as held, with its lease end, and makes the exit code 1 (0 with --skip-held).
There is no flag that forgets a live claim. Each record is checked and
deleted in one atomic step of the store (Inspector.DeleteIf): a claim made
after the check is never deleted.

--dry-run lists what would be forgotten and forgets nothing (the lease ends
it shows are judged by this machine's clock).

Exit codes: 0 done; 1 a key held (without --skip-held), a store error, or the
confirmation refused; 2 usage; 3 a key given by name had no record (the
others are forgotten). A record that vanishes during a bulk forget is
reported as not found and is not an error.`,
		Example: `  dedupctl forget orders:42 orders:43
  dedupctl forget --namespace orders --state failed --dry-run
  dedupctl forget --namespace orders --state failed --id-prefix 2024-05- --yes
  dedupctl forget --namespace payments-http --principal acme --idempotency-key pay-7`,
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := f.sel.selection(o)
			if err != nil {
				return err
			}
			idemKey, byIdem, err := f.idem.recordKey(cmd, o)
			if err != nil {
				return err
			}
			bulk := len(f.sel.states) > 0 || f.sel.idPrefix != ""
			switch {
			case bulk && len(args) > 0:
				return usageErrorf("give keys, or --state (bulk), not both")
			case bulk && byIdem:
				return usageErrorf("give --idempotency-key, or --state (bulk), not both")
			case byIdem && len(args) > 0:
				return usageErrorf("give keys, or --idempotency-key, not both")
			case !bulk && !byIdem && len(args) == 0:
				return usageErrorf("nothing to forget: give keys, --idempotency-key with --principal, or --namespace and --state for a bulk forget")
			case bulk && len(s.states) == 0:
				return usageErrorf("a bulk forget needs --state failed and/or --state completed")
			case bulk && slices.Contains(s.states, store.StateProcessing):
				return usageErrorf("--state processing: forget never deletes processing records in bulk; forget a stuck key by name once its lease has ended")
			case bulk && o.namespace == "":
				return usageErrorf("a bulk forget needs --namespace")
			case bulk && !f.yes && !f.dryRun && !o.streams.Interactive:
				return usageErrorf("a bulk forget asks for confirmation, and stdin is not a terminal: pass --yes (or --dry-run)")
			}
			var keys []string
			switch {
			case byIdem:
				keys = []string{idemKey}
			case !bulk:
				if keys, err = o.keys(args); err != nil {
					return err
				}
			}
			ins, where, closeStore, err := o.openStore(cmd.Context())
			if err != nil {
				return err
			}
			defer closeStore()

			p := o.newPrinter(o.streams.Out, "KEY", "STATE", "ATTEMPT", "OUTCOME")
			var t forgetTally
			if bulk {
				err = o.forgetBulk(cmd.Context(), ins, where, s, &f, p, &t)
			} else {
				err = o.forgetKeys(cmd.Context(), ins, where, keys, &f, p, &t)
			}
			if ferr := p.flush(); err == nil {
				err = ferr
			}
			if err != nil {
				return err
			}
			verb := "forgot"
			if f.dryRun {
				verb = "would forget"
			}
			fmt.Fprintf(o.streams.Err, "%s %d; %d held by a live claim; %d not found\n", verb, t.forgotten, t.held, t.missing)
			switch {
			case t.held > 0 && !f.skipHeld:
				return fmt.Errorf("%d held by a live claim, not forgotten (--skip-held makes this exit 0)", t.held)
			case len(t.missingKeys) > 0:
				return notFound(fmt.Errorf("not found: %s", joinShort(t.missingKeys)))
			}
			return nil
		},
	}
	f.sel.add(cmd, "bulk: forget the records of --namespace in `STATE`: failed or completed (repeat, or a comma list)")
	cmd.Flags().BoolVarP(&f.yes, "yes", "y", false, "bulk: do not ask for confirmation")
	cmd.Flags().BoolVar(&f.dryRun, "dry-run", false, "list what would be forgotten; forget nothing")
	cmd.Flags().BoolVar(&f.skipHeld, "skip-held", false, "exit 0 when records held by a live claim were left (they are still reported)")
	f.idem.add(cmd)
	return cmd
}

// forgetKeys forgets the records of keys: completed, failed, or
// processing under an ended lease.
func (o *options) forgetKeys(ctx context.Context, ins store.Inspector, where string, keys []string, f *forgetFlags, p *printer, t *forgetTally) error {
	for _, key := range keys {
		req := store.DeleteRequest{Key: key, ExpiredLease: true}
		var (
			rec     store.Record
			deleted bool
			err     error
		)
		if f.dryRun {
			rec, err = ins.Get(ctx, key)
			deleted = err == nil && req.Allows(rec, time.Now())
		} else {
			deleted, rec, err = ins.DeleteIf(ctx, req)
		}
		switch {
		case errors.Is(err, store.ErrNotFound):
			t.missingKeys = append(t.missingKeys, key)
			if err := o.forgetRow(p, store.Record{Key: key}, outcomeNotFound, t); err != nil {
				return err
			}
			continue
		case err != nil:
			return storeError(where, key, err)
		}
		if err := o.forgetRow(p, rec, outcomeOf(deleted, f.dryRun), t); err != nil {
			return err
		}
	}
	return nil
}

// forgetBulk forgets the selected records: it counts them and asks for
// confirmation first unless --yes or --dry-run, then scans again and
// deletes each record still in a selected state.
func (o *options) forgetBulk(ctx context.Context, ins store.Inspector, where string, s selection, f *forgetFlags, p *printer, t *forgetTally) error {
	total := int64(-1)
	if !f.yes && !f.dryRun {
		prog := o.newProgress(-1, "counting", "records")
		n := 0
		err := s.scan(ctx, ins, where, prog, func(store.Record) (bool, error) { n++; return true, nil })
		prog.done()
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		ok, err := o.confirm(fmt.Sprintf("Forget %d %s records of namespace %q%s? A redelivery of each will run its handler again.",
			n, joinStates(s.states), s.namespace, idPrefixNote(s.idPrefix)))
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("not confirmed: nothing forgotten")
		}
		total = int64(n)
	}
	what := "forgetting"
	if f.dryRun {
		what = "listing"
	}
	prog := o.newProgress(total, what, "records")
	defer prog.done()
	return s.scan(ctx, ins, where, prog, func(rec store.Record) (bool, error) {
		if f.dryRun {
			return true, o.forgetRow(p, rec, outcomeWouldForget, t)
		}
		deleted, found, err := ins.DeleteIf(ctx, store.DeleteRequest{Key: rec.Key, States: s.states})
		switch {
		case errors.Is(err, store.ErrNotFound):
			return true, o.forgetRow(p, rec, outcomeNotFound, t)
		case err != nil:
			return false, storeError(where, rec.Key, err)
		case !deleted && found.State != store.StateProcessing:
			// Completed since the scan read it as failed (or the other
			// way): not in the selection any more, so left alone.
			return true, nil
		}
		return true, o.forgetRow(p, found, outcomeOf(deleted, false), t)
	})
}

func outcomeOf(deleted, dryRun bool) string {
	switch {
	case !deleted:
		return outcomeHeld
	case dryRun:
		return outcomeWouldForget
	default:
		return outcomeForgotten
	}
}

// forgetRow writes one record's outcome and counts it.
func (o *options) forgetRow(p *printer, rec store.Record, outcome string, t *forgetTally) error {
	v := forgetJSON{recordJSON: newRecordJSON(rec, false), Outcome: outcome}
	text := outcome
	switch outcome {
	case outcomeForgotten, outcomeWouldForget:
		t.forgotten++
		if outcome == outcomeWouldForget {
			text = "would forget"
		}
	case outcomeHeld:
		t.held++
		text = "held by a live claim until " + when(rec.LeaseUntil, time.Now())
	case outcomeNotFound:
		t.missing++
		text = "not found"
		v.State = ""
		return p.row(v, shown(rec.Key), "-", "-", text)
	}
	return p.row(v, rec.Key, rec.State.String(), strconv.Itoa(rec.Attempt), text)
}

func joinStates(states []store.State) string {
	s := ""
	for i, st := range states {
		if i > 0 {
			s += " or "
		}
		s += st.String()
	}
	return s
}

func idPrefixNote(prefix string) string {
	if prefix == "" {
		return ""
	}
	return fmt.Sprintf(" whose id starts with %q", prefix)
}

// joinShort lists keys for a message, each shown short, at most ten.
func joinShort(keys []string) string {
	s := ""
	for i, k := range keys {
		if i == 10 {
			return s + fmt.Sprintf(" and %d more", len(keys)-10)
		}
		if i > 0 {
			s += ", "
		}
		s += shown(k)
	}
	return s
}
