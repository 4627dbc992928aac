package rediscore

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/dedup-go/dedup/store"
)

// A record is one Redis string, packed so that the scripts reach what they
// compare at fixed offsets and rewrite a record by cutting and joining
// strings:
//
//	offset  size  field
//	0       1     state: 'p' processing, 'c' completed, 'f' failed; 'q'
//	              and 'C', processing and completed in the short form of
//	              a first attempt with no fingerprint and no error
//	1       16    the token of the last claim (raw bytes); a settled record
//	              keeps the token that completed or released it
//	17      6     a time in ms since the epoch (see below): the lease
//	              deadline while processing; once completed or failed, the
//	              last millisecond of the record's life, ExpiresAt - 1 ms,
//	              which is its key's Redis expiry
//	23      6     when the key's first claim was made, in ms, on the clock
//	              of the process that made it (the clock of leases); kept
//	              by every takeover and retry
//	29      ...   'q': nothing more: a 'q' record is 29 bytes.
//	              'C': done in 3 bytes (below), then the result, which
//	              runs to the end.
//	              'p', 'c', 'f': "<done>,<attempt>,<len(fingerprint)>,
//	              <len(last error)>," in decimal, then the fingerprint,
//	              the last error, and (in a completed record) the result,
//	              which runs to the end; done is empty while processing.
//
// done is when the record completed or failed, by the server's clock, in
// ms after its creation (negative when the creating process's clock ran
// ahead of the server's). The short form keeps it in 3 bytes, big-endian,
// plus 2^23, so from -2^23 to 2^23 - 1 ms (2 h 19 min either way); a
// first attempt that completes further from its creation takes the long
// form.
//
// A time is 6 bytes, big-endian: 48 bits of ms, until the year 10889.
// The scripts decode one with one string.byte and encode the server's
// clock with one string.char and no table, and compare times as numbers,
// never as strings (Lua compares strings by the server's locale, strcoll,
// not by bytes).
//
// A record's step records (store.StepStore) are not in the string: they
// are a hash at another key in the same Cluster slot (StepsKeyOf), whose
// meta field holds a copy of the creation time (offset 23) to tell the
// hash of the record as it is from an earlier record's (steps.go).
//
// What a record costs Redis is what decides the layout: a string of up to
// 44 bytes is kept in one allocation with its object (embstr), and Redis's
// allocator rounds every allocation up to a multiple of 16 bytes (at these
// sizes), so a byte more can cost 16. The short form is what almost every
// message leaves behind (a first attempt that completed, with no
// fingerprint): 32 bytes before its result, where version 2's record, with
// no creation or completion time, took 36, and a first draft of this
// version's (times of 8 digits of base 64, and ",1,0,0,") 43 or 44; so a
// result of up to 12 bytes stays an embstr, and MEMORY USAGE is 16 bytes
// less than both for most results (TestRecordSize). Completing a record
// is state + token + its last millisecond + the creation time + done +
// (in the long form) the record from offset 29 on + the result: the
// attempt count, the fingerprint and the last error are carried over
// uncut.
const (
	HeaderLen = 29 // state, token, time, creation
	timeAt    = 17 // the offset of the time
	createdAt = 23 // the offset of the creation time
	timeLen   = 6
	doneLen   = 3       // done in the short form
	doneBias  = 1 << 23 // added to done in the short form
)

// Layout is put between the store's prefix and the receiver's key: the
// version of the record's layout. Versions never share a Redis key: the records of
// version 2 (":v2:") are never read by this one, nor this one's by version
// 2, and the hash records of version 1 lived under Prefix + key. It starts
// with ':' because a receiver's key never does (it starts with a
// namespace, never empty), so no record of version 1 can sit at a key of a
// later one.
const Layout = ":v3:"

// PackProcessing returns a new processing record: the first claim of a
// key, created at created (ms), with fingerprint fp, held by token until
// deadline (ms).
func PackProcessing(token store.Token, deadline, created int64, fp string) string {
	var buf [HeaderLen + 40]byte // on the stack: the string is the one allocation
	return string(AppendProcessing(buf[:0], token, deadline, created, fp))
}

// AppendProcessing appends the record PackProcessing returns to b: the
// short form without a fingerprint.
func AppendProcessing(b []byte, token store.Token, deadline, created int64, fp string) []byte {
	if fp == "" {
		b = append(b, 'q')
		b = append(b, token[:]...)
		b = appendTime(b, deadline)
		return appendTime(b, created)
	}
	b = append(b, 'p')
	b = append(b, token[:]...)
	b = appendTime(b, deadline)
	b = appendTime(b, created)
	b = append(b, ",1,"...)
	b = strconv.AppendInt(b, int64(len(fp)), 10)
	b = append(b, ",0,"...)
	return append(b, fp...)
}

// appendTime appends ms in timeLen bytes: a clock set before 1970 counts
// as 1970, one after the year 10889 wraps.
func appendTime(b []byte, ms int64) []byte {
	ms = max(ms, 0)
	return append(b, byte(ms>>40), byte(ms>>32), byte(ms>>24), byte(ms>>16), byte(ms>>8), byte(ms))
}

// TimeString is ms as a record holds it.
func TimeString(ms int64) string {
	var buf [timeLen]byte
	return string(appendTime(buf[:0], ms))
}

// parseTime reads a time of timeLen bytes.
func parseTime(s string) int64 {
	var ms int64
	for i := range timeLen {
		ms = ms<<8 | int64(s[i])
	}
	return ms
}

// errNotRecord is the cause of an error for a value this package did not
// write: another program's key under the prefix.
var errNotRecord = errors.New("the value under the key is not a record of this package")

// Unpack reads the record of key from its Redis value.
func Unpack(key, v string) (store.Record, error) {
	if len(v) < HeaderLen {
		return store.Record{}, errNotRecord
	}
	at, created := parseTime(v[timeAt:timeAt+timeLen]), parseTime(v[createdAt:createdAt+timeLen])
	rec := store.Record{Key: key, State: stateOf(v[0]), Attempt: 1, CreatedAt: time.UnixMilli(created)}
	copy(rec.Token[:], v[1:timeAt])
	var done int64
	switch v[0] {
	case 'q':
		if len(v) != HeaderLen {
			return store.Record{}, errNotRecord
		}
		rec.LeaseUntil = time.UnixMilli(at)
		return rec, nil
	case 'C':
		if len(v) < HeaderLen+doneLen {
			return store.Record{}, errNotRecord
		}
		d := v[HeaderLen : HeaderLen+doneLen]
		done = int64(d[0])<<16 | int64(d[1])<<8 | int64(d[2]) - doneBias
		if r := v[HeaderLen+doneLen:]; r != "" {
			rec.Result = []byte(r)
		}
	case 'p', 'c', 'f':
		var err error
		if rec, done, err = unpackLong(rec, v[HeaderLen:]); err != nil {
			return store.Record{}, err
		}
		if rec.State == store.StateProcessing {
			rec.LeaseUntil = time.UnixMilli(at)
			return rec, nil
		}
	default:
		return store.Record{}, errNotRecord
	}
	rec.ExpiresAt = time.UnixMilli(at + 1)
	rec.CompletedAt = time.UnixMilli(created + done)
	return rec, nil
}

// unpackLong reads the long form's fields after the header, rest, into
// rec, and returns done.
func unpackLong(rec store.Record, rest string) (_ store.Record, done int64, _ error) {
	j := strings.IndexByte(rest, ',')
	if j < 0 || (j == 0) != (rec.State == store.StateProcessing) {
		return rec, 0, errNotRecord
	}
	if j > 0 {
		var err error
		if done, err = strconv.ParseInt(rest[:j], 10, 64); err != nil {
			return rec, 0, errNotRecord
		}
	}
	rest = rest[j+1:]
	var n [3]int
	for i := range n {
		j := strings.IndexByte(rest, ',')
		if j < 0 {
			return rec, 0, errNotRecord
		}
		x, err := strconv.Atoi(rest[:j])
		if err != nil || x < 0 {
			return rec, 0, errNotRecord
		}
		n[i], rest = x, rest[j+1:]
	}
	attempt, fpLen, errLen := n[0], n[1], n[2]
	if fpLen+errLen > len(rest) {
		return rec, 0, errNotRecord
	}
	rec.Attempt = attempt
	rec.Fingerprint = rest[:fpLen]
	rec.LastError = rest[fpLen : fpLen+errLen]
	if r := rest[fpLen+errLen:]; r != "" && rec.State == store.StateCompleted {
		rec.Result = []byte(r)
	}
	return rec, done, nil
}

func stateOf(c byte) store.State {
	switch c {
	case 'p', 'q':
		return store.StateProcessing
	case 'c', 'C':
		return store.StateCompleted
	case 'f':
		return store.StateFailed
	}
	return 0
}
