package redrive

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dedup-go/dedup/delivery"
	"github.com/dedup-go/dedup/store"
)

// Action is what Run did with a letter.
type Action string

// The actions of Run; the dry run's say what a run would do.
const (
	Republished          Action = "republished"       // the copy confirmed, the letter removed
	RemovedCompleted     Action = "removed-completed" // the key's record is completed: removed, nothing republished
	Skipped              Action = "skipped"           // left in place, for the reason Outcome.Why names
	Failed               Action = "failed"            // the destination refused the copy: left in place
	WouldRepublish       Action = "would-republish"
	WouldRemoveCompleted Action = "would-remove-completed"
)

// Why a letter is skipped, beside the dedup reasons that are never
// republished unless forced (no-key, invalid-key, undecodable, key-reused).
const (
	WhyNoHeaders       = "no-dedup-headers" // neither Dedup-* headers nor x-death: where would it go?
	WhyNoDestination   = "no-destination"   // Dedup-Reason without the header naming its origin
	WhyTruncated       = "truncated"        // the body was cut: the original is lost
	WhyInFlight        = "in-flight"        // a copy holds the key under a live lease now
	WhyDuplicateWindow = "duplicate-window" // the stream dropped the copy as the original's duplicate
	WhyNoKey           = "key-unknown"      // --key-from found no key in a broker's letter
)

// unredrivable are the reasons of letters a copy would meet again: no key
// to find, a key that is not one, a body that does not decode, a key whose
// record belongs to another payload.
var unredrivable = []string{
	string(delivery.ReasonNoKey), string(delivery.ReasonInvalidKey),
	string(delivery.ReasonUndecodable), string(delivery.ReasonKeyReused),
}

// Outcome is what Run did with one letter.
type Outcome struct {
	Letter *Letter
	Action Action
	// Why names why a letter was skipped or failed ("truncated",
	// "in-flight", "no-key"...); empty otherwise.
	Why string
	// Detail says more: the refusal's error, the record that kept the
	// letter, a note on a forced letter.
	Detail string
}

// Options are a run's filters and safeties.
type Options struct {
	// Store holds the receivers' records. Required.
	Store store.Inspector
	// StoreName names the store in errors: its address. Defaults to
	// "the store".
	StoreName string
	// Reasons keeps only the letters of these reasons; empty keeps all.
	Reasons []string
	// Since keeps only the letters dead-lettered at or after it; a letter
	// whose time is unknown is then left out. Zero keeps all.
	Since time.Time
	// Limit stops the run after that many letters matched the filters;
	// 0 has no limit.
	Limit int
	// DryRun reports what a run would do and changes nothing: no record
	// forgotten, no copy published, no letter removed.
	DryRun bool
	// Force republishes the letters of reasons a copy would meet again
	// (no-key, invalid-key, undecodable, key-reused). Never a truncated
	// one, nor one that does not say where it came from.
	Force bool
	// KeyFrom derives the key of broker's letters (x-death), which carry
	// none. Nil leaves their records unread: they are republished without
	// a record check.
	KeyFrom *KeyFrom
	// Timeout bounds each call to the store or the broker. Defaults to 10s.
	Timeout time.Duration
	// Now is the clock leases are compared with. Defaults to time.Now.
	Now func() time.Time
	// Progress is told of each letter read. Defaults to nothing.
	Progress func()
}

// Summary counts what a run did.
type Summary struct {
	// Read is how many letters the pass read; Filtered of them did not
	// match the filters (left in place, not reported) and Matched did.
	Read, Filtered, Matched int
	// Actions counts the matched letters by what was done with them, and
	// Skips the skipped ones by why.
	Actions map[Action]int
	Skips   map[string]int
}

// Run takes every letter of src through the steps of the package
// documentation and reports each matched letter's outcome, as it happens,
// to report. It stops at the end of the pass, at Options.Limit, or at the
// first error that is not one letter's own (a store or broker that fails),
// which it returns. The caller closes src.
func Run(ctx context.Context, src Source, opts Options, report func(Outcome) error) (Summary, error) {
	opts.Timeout = cmp.Or(opts.Timeout, 10*time.Second)
	opts.StoreName = cmp.Or(opts.StoreName, "the store")
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Progress == nil {
		opts.Progress = func() {}
	}
	r := &run{src: src, opts: opts}
	sum := Summary{Actions: map[Action]int{}, Skips: map[string]int{}}
	for opts.Limit <= 0 || sum.Matched < opts.Limit {
		var l *Letter
		err := r.call(ctx, func(ctx context.Context) (err error) {
			l, err = src.Next(ctx)
			return err
		})
		if errors.Is(err, ErrEnd) {
			break
		}
		if err != nil {
			return sum, fmt.Errorf("read the next dead letter: %w", err)
		}
		sum.Read++
		opts.Progress()
		if !r.matches(l) {
			sum.Filtered++
			if err := r.call(ctx, func(ctx context.Context) error { return src.Leave(ctx, l) }); err != nil {
				return sum, fmt.Errorf("dead letter %s: leave it: %w", l.ID, err)
			}
			continue
		}
		sum.Matched++
		out, err := r.letter(ctx, l)
		if err != nil {
			return sum, fmt.Errorf("dead letter %s: %w", l.ID, err)
		}
		sum.Actions[out.Action]++
		if out.Action == Skipped {
			sum.Skips[out.Why]++
		}
		if err := report(out); err != nil {
			return sum, err
		}
	}
	return sum, nil
}

// run is one Run's state.
type run struct {
	src  Source
	opts Options
}

// call runs fn under the per-call timeout.
func (r *run) call(ctx context.Context, fn func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	return fn(ctx)
}

func (r *run) matches(l *Letter) bool {
	if len(r.opts.Reasons) > 0 && !slices.Contains(r.opts.Reasons, l.Reason) {
		return false
	}
	if !r.opts.Since.IsZero() && (l.Time.IsZero() || l.Time.Before(r.opts.Since)) {
		return false
	}
	return true
}

// letter decides and acts on one matched letter. A returned error ends
// the run.
func (r *run) letter(ctx context.Context, l *Letter) (Outcome, error) {
	out := Outcome{Letter: l}
	skip := func(why, detail string) (Outcome, error) {
		out.Action, out.Why, out.Detail = Skipped, why, detail
		return out, r.leave(ctx, l)
	}
	switch {
	case l.Marking == Unmarked:
		return skip(WhyNoHeaders, "neither Dedup-* headers nor x-death: where it came from is unknown")
	case l.Truncated != "":
		return skip(WhyTruncated, l.Truncated)
	case l.To == "":
		return skip(WhyNoDestination, "no header names where it came from")
	}
	forced := slices.Contains(unredrivable, l.Reason)
	if forced && !r.opts.Force {
		return skip(l.Reason, "a copy would be dead-lettered again (--force)")
	}
	if l.Key == "" && l.Marking == ByBroker && r.opts.KeyFrom != nil {
		key, err := r.opts.KeyFrom.Key(l)
		if err != nil {
			return skip(WhyNoKey, "--key-from "+r.opts.KeyFrom.From+": "+err.Error())
		}
		l.Key = key
	}
	switch {
	case forced:
		out.Detail = "forced"
	case l.Key == "":
		out.Detail = "no key: its record is neither read nor forgotten (--key-from)"
	}

	if l.Key != "" {
		rec, found, deleted, err := r.record(ctx, l.Key)
		if err != nil {
			return out, err
		}
		switch {
		case !found || deleted:
		case rec.State == store.StateCompleted && l.Reason == string(delivery.ReasonKeyReused):
			// Another payload's record: it says nothing of this message.
		case rec.State == store.StateCompleted:
			out.Action, out.Detail = RemovedCompleted, fmt.Sprintf("completed at attempt %d", rec.Attempt)
			if r.opts.DryRun {
				out.Action = WouldRemoveCompleted
				return out, r.leave(ctx, l)
			}
			return out, r.remove(ctx, l)
		case rec.State == store.StateProcessing && r.opts.Now().Before(rec.LeaseUntil):
			return skip(WhyInFlight, fmt.Sprintf("attempt %d is processing until %s",
				rec.Attempt, rec.LeaseUntil.UTC().Format(time.RFC3339)))
		}
		// A failed record (forgotten, or to be in a dry run), or a lease
		// that ended: the receiver takes an ended lease over.
	}
	if r.opts.DryRun {
		out.Action = WouldRepublish
		return out, r.leave(ctx, l)
	}
	err := r.call(ctx, func(ctx context.Context) error { return r.src.Republish(ctx, l) })
	switch {
	case errors.Is(err, ErrDuplicateWindow):
		return skip(WhyDuplicateWindow, err.Error())
	case errors.Is(err, ErrRefused):
		out.Action, out.Why, out.Detail = Failed, "refused", err.Error()
		return out, r.leave(ctx, l)
	case err != nil:
		return out, fmt.Errorf("republish to %s: %w", l.To, err)
	}
	out.Action = Republished
	return out, r.remove(ctx, l)
}

// record reads the record of key, and forgets it when it failed (but in a
// dry run). DeleteIf reads and deletes in one step, so a claim made
// meanwhile is never deleted.
func (r *run) record(ctx context.Context, key string) (rec store.Record, found, deleted bool, err error) {
	err = r.call(ctx, func(ctx context.Context) error {
		if r.opts.DryRun {
			rec, err = r.opts.Store.Get(ctx, key)
		} else {
			deleted, rec, err = r.opts.Store.DeleteIf(ctx, store.DeleteRequest{Key: key, States: []store.State{store.StateFailed}})
		}
		return err
	})
	switch {
	case errors.Is(err, store.ErrNotFound):
		return rec, false, false, nil
	case err != nil:
		return rec, false, false, fmt.Errorf("%s: the record of %q: %w", r.opts.StoreName, key, err)
	}
	return rec, true, deleted, nil
}

func (r *run) remove(ctx context.Context, l *Letter) error {
	if err := r.call(ctx, func(ctx context.Context) error { return r.src.Remove(ctx, l) }); err != nil {
		return fmt.Errorf("remove it: %w", err)
	}
	return nil
}

func (r *run) leave(ctx context.Context, l *Letter) error {
	if err := r.call(ctx, func(ctx context.Context) error { return r.src.Leave(ctx, l) }); err != nil {
		return fmt.Errorf("leave it: %w", err)
	}
	return nil
}
