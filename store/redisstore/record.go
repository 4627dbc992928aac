package redisstore

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
//	0       1     state: 'p' processing, 'c' completed, 'f' failed
//	1       16    the token of the last claim (raw bytes); a settled record
//	              keeps the token that completed or released it
//	17      8     a time in ms since the epoch (see below): the lease
//	              deadline while processing; once completed or failed, the
//	              last millisecond of the record's life, ExpiresAt - 1 ms,
//	              which is its key's Redis expiry
//	25      8     when the key's first claim was made, in ms, on the clock
//	              of the process that made it (the clock of leases); kept
//	              by every takeover and retry
//	33      ...   "<done>,<attempt>,<len(fingerprint)>,<len(last error)>,"
//	              in decimal, then the fingerprint, the last error, and (in
//	              a completed record) the result, which runs to the end.
//	              done is empty while processing; once settled it is when
//	              the record completed or failed, by the server's clock, in
//	              ms after its creation (negative when the creating
//	              process's clock ran ahead of the server's)
//
// A time is 8 digits of base 64 in the alphabet of the 64 bytes from '0'
// (48) to 'o' (111), most significant first: 48 bits of ms, until the year
// 10889. Each digit is its byte minus 48, so Lua decodes a time with one
// string.byte and encodes the server's clock with one string.char and no
// table; the scripts compare times as numbers, never as strings (Lua
// compares strings by the server's locale, strcoll, not by bytes).
//
// Layout version 3 (":v3:", see layout) added the creation and done times
// to version 2's, whose times were 13 decimal digits: 8 digits of base 64
// make room for the creation time, so that a completed record with no
// fingerprint and an empty result takes 41 to 44 bytes (done under 10s),
// where version 2's took 36, and stays within the 44 bytes that Redis
// keeps in one allocation with its object (embstr): MEMORY USAGE is the
// same for both (TestRecordSize). done is an offset from the creation
// time, not a third time of 8 digits, so that it costs 3 to 5 bytes for a
// handler under 10s, and the record's key is the last millisecond, so that
// ExpiresAt stays exact without a number parsed. Completing a record is
// 'c' + token + its last millisecond + the creation time + done + the
// record from offset 33 on + the result: the attempt count, the
// fingerprint and the last error are carried over uncut.
const (
	headerLen = 33 // state, token, time, creation
	timeAt    = 17 // the offset of the time
	createdAt = 25 // the offset of the creation time
	timeLen   = 8
)

// layout is put between Options.Prefix and the receiver's key: the version
// of the record's layout. Versions never share a Redis key: the records of
// version 2 (":v2:") are never read by this one, nor this one's by version
// 2, and the hash records of version 1 lived under Prefix + key. It starts
// with ':' because a receiver's key never does (it starts with a
// namespace, never empty), so no record of version 1 can sit at a key of a
// later one.
const layout = ":v3:"

// packProcessing returns a new processing record: the first claim of a
// key, created at created (ms), with fingerprint fp, held by token until
// deadline (ms).
func packProcessing(token store.Token, deadline, created int64, fp string) string {
	var buf [headerLen + 40]byte // on the stack: the string is the one allocation
	return string(appendProcessing(buf[:0], token, deadline, created, fp))
}

// appendProcessing appends the record packProcessing returns to b.
func appendProcessing(b []byte, token store.Token, deadline, created int64, fp string) []byte {
	b = append(b, 'p')
	b = append(b, token[:]...)
	b = appendTime(b, deadline)
	b = appendTime(b, created)
	b = append(b, ",1,"...)
	b = strconv.AppendInt(b, int64(len(fp)), 10)
	b = append(b, ",0,"...)
	return append(b, fp...)
}

// appendTime appends ms in timeLen digits of base 64: a clock set before
// 1970 counts as 1970, one after the year 10889 wraps.
func appendTime(b []byte, ms int64) []byte {
	ms = max(ms, 0)
	var d [timeLen]byte
	for i := timeLen - 1; i >= 0; i-- {
		d[i] = byte('0' + ms%64)
		ms /= 64
	}
	return append(b, d[:]...)
}

// timeString is ms as a record holds it.
func timeString(ms int64) string { return string(appendTime(nil, ms)) }

// parseTime reads a time of timeLen digits of base 64.
func parseTime(s string) (int64, bool) {
	if len(s) != timeLen {
		return 0, false
	}
	var ms int64
	for i := range timeLen {
		c := s[i]
		if c < '0' || c > 'o' {
			return 0, false
		}
		ms = ms*64 + int64(c-'0')
	}
	return ms, true
}

// errNotRecord is the cause of an error for a value this package did not
// write: another program's key under the prefix.
var errNotRecord = errors.New("the value under the key is not a record of this package")

// unpack reads the record of key from its Redis value.
func unpack(key, v string) (store.Record, error) {
	if len(v) < headerLen {
		return store.Record{}, errNotRecord
	}
	state := stateOf(v[0])
	at, ok1 := parseTime(v[timeAt : timeAt+timeLen])
	created, ok2 := parseTime(v[createdAt : createdAt+timeLen])
	if state == 0 || !ok1 || !ok2 {
		return store.Record{}, errNotRecord
	}
	rest := v[headerLen:]
	j := strings.IndexByte(rest, ',')
	if j < 0 || (j == 0) != (state == store.StateProcessing) {
		return store.Record{}, errNotRecord
	}
	var done int64
	if j > 0 {
		var err error
		if done, err = strconv.ParseInt(rest[:j], 10, 64); err != nil {
			return store.Record{}, errNotRecord
		}
	}
	rest = rest[j+1:]
	var n [3]int
	for i := range n {
		j := strings.IndexByte(rest, ',')
		if j < 0 {
			return store.Record{}, errNotRecord
		}
		x, err := strconv.Atoi(rest[:j])
		if err != nil || x < 0 {
			return store.Record{}, errNotRecord
		}
		n[i], rest = x, rest[j+1:]
	}
	attempt, fpLen, errLen := n[0], n[1], n[2]
	if fpLen+errLen > len(rest) {
		return store.Record{}, errNotRecord
	}
	rec := store.Record{
		Key:         key,
		State:       state,
		Attempt:     attempt,
		Fingerprint: rest[:fpLen],
		LastError:   rest[fpLen : fpLen+errLen],
		CreatedAt:   time.UnixMilli(created),
	}
	copy(rec.Token[:], v[1:timeAt])
	switch state {
	case store.StateProcessing:
		rec.LeaseUntil = time.UnixMilli(at)
		return rec, nil
	case store.StateCompleted:
		if r := rest[fpLen+errLen:]; r != "" {
			rec.Result = []byte(r)
		}
	}
	rec.ExpiresAt = time.UnixMilli(at + 1)
	rec.CompletedAt = time.UnixMilli(created + done)
	return rec, nil
}

func stateOf(c byte) store.State {
	switch c {
	case 'p':
		return store.StateProcessing
	case 'c':
		return store.StateCompleted
	case 'f':
		return store.StateFailed
	}
	return 0
}
