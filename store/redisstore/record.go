package redisstore

import (
	"errors"
	"strconv"
	"time"

	"github.com/dedup-go/dedup/store"
)

// A record is one Redis string, packed so that the scripts reach what they
// compare at fixed offsets and rewrite a record by cutting and joining
// strings, never parsing a number on the hot path:
//
//	offset  size  field
//	0       1     state: 'p' processing, 'c' completed, 'f' failed
//	1       16    the token of the last claim (raw bytes); a completed
//	              record keeps the token that completed it
//	17      13    a time, ms since the epoch in 13 decimal digits (until
//	              the year 2286): the lease deadline while processing; once
//	              completed or failed, the last millisecond of the record's
//	              life, ExpiresAt - 1 ms, which is its key's Redis expiry
//	30      ...   "<attempt>,<len(fingerprint)>,<len(last error)>," in
//	              decimal, then the fingerprint, the last error, and (in a
//	              completed record) the result, which runs to the end
//
// Completing a record is 'c' + token + time + the record from offset 30 +
// the result: the attempt count, the fingerprint and the last error are
// carried over uncut.
const (
	headerLen = 30 // state, token, time
	timeAt    = 17 // the offset of the time
	timeLen   = 13
)

// layout is put between Options.Prefix and the receiver's key. The records
// of earlier versions of this package were hashes under Prefix + key: the
// two kinds never share a Redis key, so a rolling upgrade never meets
// WRONGTYPE. It starts with ':' because a receiver's key never does (it
// starts with a namespace, never empty), so no record of the earlier
// layout can sit at a key of this one.
const layout = ":v2:"

// packProcessing returns a new processing record: the first claim of a
// key, with fingerprint fp, held by token until deadline (ms).
func packProcessing(token store.Token, deadline int64, fp string) string {
	var buf [headerLen + 32]byte // on the stack: the string is the one allocation
	return string(appendProcessing(buf[:0], token, deadline, fp))
}

// appendProcessing appends the record packProcessing returns to b.
func appendProcessing(b []byte, token store.Token, deadline int64, fp string) []byte {
	b = append(b, 'p')
	b = append(b, token[:]...)
	b = appendTime(b, deadline)
	b = append(b, "1,"...)
	b = strconv.AppendInt(b, int64(len(fp)), 10)
	b = append(b, ",0,"...)
	return append(b, fp...)
}

// appendTime appends ms in timeLen decimal digits, zero-padded: a clock
// set before 2001 still makes a record the scripts can cut.
func appendTime(b []byte, ms int64) []byte {
	var d [20]byte
	digits := strconv.AppendInt(d[:0], max(ms, 0), 10)
	for range timeLen - len(digits) {
		b = append(b, '0')
	}
	return append(b, digits...)
}

// timeString is ms as the scripts compare it: timeLen digits, so that the
// order of the strings is the order of the times.
func timeString(ms int64) string { return string(appendTime(nil, ms)) }

// errNotRecord is the cause of an error for a value this package did not
// write: another program's key under the prefix.
var errNotRecord = errors.New("the value under the key is not a record of this package")

// unpack reads the record of key from its Redis value, with the token that
// holds it.
func unpack(key, v string) (store.Record, store.Token, error) {
	var token store.Token
	if len(v) < headerLen {
		return store.Record{}, token, errNotRecord
	}
	state := stateOf(v[0])
	at, err := strconv.ParseInt(v[timeAt:timeAt+timeLen], 10, 64)
	if state == 0 || err != nil {
		return store.Record{}, token, errNotRecord
	}
	rest := v[headerLen:]
	var n [3]int
	for i := range n {
		j := 0
		for j < len(rest) && rest[j] != ',' {
			j++
		}
		x, err := strconv.Atoi(rest[:j])
		if err != nil || x < 0 || j == len(rest) {
			return store.Record{}, token, errNotRecord
		}
		n[i], rest = x, rest[j+1:]
	}
	attempt, fpLen, errLen := n[0], n[1], n[2]
	if fpLen+errLen > len(rest) {
		return store.Record{}, token, errNotRecord
	}
	copy(token[:], v[1:headerLen-timeLen])
	rec := store.Record{
		Key:         key,
		State:       state,
		Attempt:     attempt,
		Fingerprint: rest[:fpLen],
		LastError:   rest[fpLen : fpLen+errLen],
	}
	switch state {
	case store.StateProcessing:
		rec.LeaseUntil = time.UnixMilli(at)
	case store.StateCompleted:
		if r := rest[fpLen+errLen:]; r != "" {
			rec.Result = []byte(r)
		}
		fallthrough
	default:
		rec.ExpiresAt = time.UnixMilli(at + 1)
	}
	return rec, token, nil
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
