package rediscore

import (
	"strconv"
	"time"

	"github.com/dedup-go/dedup/store"
)

// Acquisition is one Acquire in the making: the record a SET NX writes for
// a new key (SET key record PX ttl NX GET), and what AcquireScript needs
// when the key is taken.
type Acquisition struct {
	Req      store.AcquireRequest
	Token    store.Token
	Now      int64 // ms, on this process's clock
	Deadline int64 // Now + the lease
	TTL      time.Duration
	// Record is the processing record SET NX writes; a store that packs
	// the records of a batch together (PackAll) may leave it empty.
	Record string
}

// InitAcquisition prepares req at now into a, with the caller's token
// (req.Token) or else a fresh one, but for its Record. The lease is
// measured on the caller's clock; the key lives the lease plus
// AbandonedTTL on the server's.
func (c *Core) InitAcquisition(a *Acquisition, req store.AcquireRequest, now time.Time) {
	token := req.Token
	if token.IsZero() {
		token = store.NewToken()
	}
	*a = Acquisition{Req: req, Token: token, Now: now.UnixMilli()}
	a.Deadline = a.Now + MS(req.Lease)
	a.TTL = time.Duration(MS(req.Lease)+MS(c.AbandonedTTL)) * time.Millisecond
}

// Pack sets a.Record to the processing record its SET NX writes.
func (a *Acquisition) Pack() {
	a.Record = PackProcessing(a.Token, a.Deadline, a.Now, a.Req.Fingerprint)
}

// Claimed reads the answer of SET NX GET: found is false when there was no
// record (the key is claimed); a record held by a live lease or completed
// is the answer (refused, without a live holder's token); one of another
// fingerprint is an error matching store.ErrKeyReused; again reports that
// the record is failed, its lease ended, or it is processing under the
// caller's own token (req.Token: a claim whose answer the caller lost),
// which AcquireScript must decide: SET NX GET wrote nothing, and the
// claim granted again needs its new lease written. A value this package
// did not write is an error of its own, for the store to report as
// unavailable.
func (c *Core) Claimed(a *Acquisition, old string, found bool) (cl store.Claim, again bool, _ error) {
	if !found {
		return store.Claim{Acquired: true, Token: a.Token, Record: store.Record{
			Key:         a.Req.Key,
			State:       store.StateProcessing,
			Attempt:     1,
			Fingerprint: a.Req.Fingerprint,
			LeaseUntil:  time.UnixMilli(a.Deadline),
			Token:       a.Token,
			CreatedAt:   time.UnixMilli(a.Now),
		}}, false, nil
	}
	rec, err := Unpack(a.Req.Key, old)
	switch {
	case err != nil:
		return store.Claim{}, false, err
	case rec.Fingerprint != "" && a.Req.Fingerprint != "" && rec.Fingerprint != a.Req.Fingerprint:
		return store.Claim{}, false, c.Reused(a.Req.Key, rec.State)
	case rec.State == store.StateCompleted:
		return Refused(rec), false, nil
	case rec.State == store.StateProcessing && !a.Req.Token.IsZero() && rec.Token == a.Token:
		// Most likely this very claim's own SET NX, whose answer was lost
		// and which the caller sends again: granted again by the script,
		// which writes its new lease, whether the old one is live or not.
		return store.Claim{}, true, nil
	case rec.State == store.StateProcessing && a.Now < rec.LeaseUntil.UnixMilli():
		return Refused(rec), false, nil
	}
	return store.Claim{}, true, nil
}

// Refused is the answer of an Acquire that found rec holding the key. A
// processing record's token is left out: it is the live holder's, which
// fences its claim, and no other caller of Acquire needs it (an operator
// reads it through the Inspector).
func Refused(rec store.Record) store.Claim {
	if rec.State == store.StateProcessing {
		rec.Token = store.Token{}
	}
	return store.Claim{Record: rec}
}

// Args are AcquireScript's arguments after the key, as the strings a
// client sends.
func (a *Acquisition) Args() []string {
	return []string{string(a.Token[:]), TimeString(a.Deadline), a.Req.Fingerprint,
		strconv.FormatInt(MS(a.TTL), 10), strconv.FormatInt(a.Now, 10), TimeString(a.Now)}
}

// Retaken reads the answer of AcquireScript, {code, v}: 1 the new record
// v (a new claim, or the caller's own granted again, which a.Token holds
// either way), 0 the record v holding the key, 2 a record of another
// fingerprint.
func (c *Core) Retaken(a *Acquisition, code int64, v string) (store.Claim, error) {
	rec, err := Unpack(a.Req.Key, v)
	if err != nil {
		return store.Claim{}, c.Unavailable("acquire", a.Req.Key, err)
	}
	switch code {
	case 1:
		return store.Claim{Acquired: true, Token: a.Token, Record: rec}, nil
	case 2:
		return store.Claim{}, c.Reused(a.Req.Key, rec.State)
	}
	return Refused(rec), nil
}

// PackAll returns the processing records of n acquisitions, a(0) to
// a(n-1), cut from one string.
func PackAll(n int, a func(int) *Acquisition) []string {
	size := 0
	for k := range n {
		size += HeaderLen + 26 + len(a(k).Req.Fingerprint)
	}
	b := make([]byte, 0, size)
	ends := make([]int, n)
	for k := range n {
		x := a(k)
		b = AppendProcessing(b, x.Token, x.Deadline, x.Now, x.Req.Fingerprint)
		ends[k] = len(b)
	}
	all := string(b)
	records := make([]string, n)
	start := 0
	for k, end := range ends {
		records[k], start = all[start:end], end
	}
	return records
}
