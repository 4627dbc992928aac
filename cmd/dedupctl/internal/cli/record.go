package cli

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dedup-go/dedup/store"
)

// recordJSON is a record as --output json writes it. The field names are
// part of the tool's interface (docs/operations.md lists them): add
// fields, never rename one.
type recordJSON struct {
	Key         string     `json:"key"`
	Namespace   string     `json:"namespace"`
	ID          string     `json:"id"`
	State       string     `json:"state"`
	Attempt     int        `json:"attempt"`
	LeaseUntil  *time.Time `json:"lease_until"`
	ExpiresAt   *time.Time `json:"expires_at"`
	LastError   string     `json:"last_error"`
	Fingerprint string     `json:"fingerprint"`
	ResultSize  int        `json:"result_size"`
	// Token is the last claim's token in hexadecimal; absent when the
	// store keeps none (a record written by an earlier version of it).
	Token string `json:"token,omitempty"`
	// CreatedAt is when the key's first claim was made; CompletedAt when
	// the record completed or its last attempt failed. Each is absent when
	// the store has no such time: a record written by an earlier version
	// of the store, and CompletedAt while processing.
	CreatedAt   *time.Time `json:"created_at,omitempty"`
	CompletedAt *time.Time `json:"completed_at,omitempty"`
	// Result is the result when it is JSON (get only).
	Result json.RawMessage `json:"result,omitempty"`
	// ResultBase64 is the result when it is not JSON (get only).
	ResultBase64 []byte `json:"result_base64,omitempty"`
	// Steps are the record's step records (dedup.Step), when it has any
	// (get only).
	Steps []stepJSON `json:"steps,omitempty"`
}

// newRecordJSON returns rec's JSON object; withResult adds the result.
func newRecordJSON(rec store.Record, withResult bool) recordJSON {
	ns, id := splitKey(rec.Key)
	v := recordJSON{
		Key:         rec.Key,
		Namespace:   ns,
		ID:          id,
		State:       rec.State.String(),
		Attempt:     rec.Attempt,
		LeaseUntil:  timeOrNil(rec.LeaseUntil),
		ExpiresAt:   timeOrNil(rec.ExpiresAt),
		LastError:   rec.LastError,
		Fingerprint: rec.Fingerprint,
		ResultSize:  len(rec.Result),
		CreatedAt:   timeOrNil(rec.CreatedAt),
		CompletedAt: timeOrNil(rec.CompletedAt),
	}
	if !rec.Token.IsZero() {
		v.Token = rec.Token.String()
	}
	if withResult {
		v.Steps = newStepsJSON(rec.Steps)
	}
	if withResult && len(rec.Result) > 0 {
		if json.Valid(rec.Result) {
			v.Result = rec.Result
		} else {
			v.ResultBase64 = rec.Result
		}
	}
	return v
}

// splitKey cuts a store key into its namespace and id.
func splitKey(key string) (ns, id string) {
	ns, id, ok := strings.Cut(key, ":")
	if !ok {
		return "", key
	}
	return ns, id
}

func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// when shows t for people: UTC to the second, and how far from now
// ("in 4m12s", "3s ago"); "-" when zero.
func when(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := t.Sub(now)
	rel := "in " + human(d)
	if d < 0 {
		rel = human(-d) + " ago"
	}
	return t.UTC().Format(time.RFC3339) + " (" + rel + ")"
}

// human is d rounded for people: 12s, 4m12s, 23h59m, 3d4h.
func human(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d < time.Minute:
		return d.String()
	case d < time.Hour:
		return fmt.Sprintf("%dm%ds", d/time.Minute, d%time.Minute/time.Second)
	case d < 48*time.Hour:
		d = d.Round(time.Minute)
		return fmt.Sprintf("%dh%dm", d/time.Hour, d%time.Hour/time.Minute)
	default:
		d = d.Round(time.Hour)
		return fmt.Sprintf("%dd%dh", d/(24*time.Hour), d%(24*time.Hour)/time.Hour)
	}
}

// until is the time that bounds rec: its lease while processing, its
// expiry otherwise.
func until(rec store.Record, now time.Time) string {
	if rec.State == store.StateProcessing {
		return "lease " + leaseWhen(rec.LeaseUntil, now)
	}
	return "expires " + when(rec.ExpiresAt, now)
}

// leaseWhen shows a lease's end: "... (in 20s)" or "... (ended 3m ago)".
func leaseWhen(t, now time.Time) string {
	s := when(t, now)
	if !t.IsZero() && !t.After(now) {
		s = strings.Replace(s, "(", "(ended ", 1)
	}
	return s
}

// shown is a key or text as a message shows it: cut to 80 characters,
// with its length when cut, so that a huge key never floods the terminal.
func shown(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	cut := s[:max]
	for !utf8.ValidString(cut) && len(cut) > 0 {
		cut = cut[:len(cut)-1]
	}
	return cut + "… (" + strconv.Itoa(len(s)) + " bytes)"
}

// size shows a result's size.
func size(n int) string {
	if n == 1 {
		return "1 byte"
	}
	return strconv.Itoa(n) + " bytes"
}
