package rediscore

import (
	"strconv"
	"time"

	"github.com/dedup-go/dedup/store"
)

// Completion is the completion script's work done by the client, for a
// store that completes a batch in a transaction (WATCH, then MULTI and
// EXEC) instead: Redis spends about half the time on a batch's completion
// in a transaction as in the script, whose every key pays a SET called
// from Lua and the Lua around it (INFO commandstats, batches of 100 on a
// busy 2-core machine: 6 to 15 µs a key against 11 to 36, in alternating
// runs). It decides on the record v,
// which the caller read under WATCH, at now, the server's clock (TIME, read
// with it), exactly as completeLua does: the answer (1 wrote, 2 completed
// already by token, 0 lease lost), and when it is 1 the record to SET with
// PXAT last. ok is false for a value the script would fail on or that
// this package did not write (shorter than a record's header): the caller
// leaves the key to the script.
func Completion(v string, token store.Token, result []byte, retention time.Duration, now int64) (rec string, last, answer int64, ok bool) {
	if len(v) < HeaderLen {
		return "", 0, 0, false
	}
	if v[1:timeAt] != string(token[:]) {
		return "", 0, 0, true
	}
	switch v[0] {
	case 'q', 'p':
	case 'C', 'c':
		return "", 0, 2, true
	default:
		return "", 0, 0, true
	}
	last = now + MS(retention) - 1
	done := now - parseTime(v[createdAt:createdAt+timeLen])
	b := make([]byte, 0, HeaderLen+20+len(v)-HeaderLen+len(result))
	short := v[0] == 'q' && done >= -doneBias && done < doneBias
	if short {
		b = append(b, 'C')
	} else {
		b = append(b, 'c')
	}
	b = append(b, token[:]...)
	b = appendTime(b, last)
	b = append(b, v[createdAt:HeaderLen]...)
	switch {
	case short:
		d := done + doneBias
		b = append(b, byte(d>>16), byte(d>>8), byte(d))
	case v[0] == 'q':
		b = strconv.AppendInt(b, done, 10)
		b = append(b, ",1,0,0,"...)
	default:
		b = strconv.AppendInt(b, done, 10)
		b = append(b, v[HeaderLen:]...)
	}
	return string(append(b, result...)), last, 1, true
}

// ServerTime reads the answer of TIME, seconds and microseconds in
// decimal, as ms, as the scripts do.
func ServerTime(seconds, micros string) (int64, bool) {
	s, err1 := strconv.ParseInt(seconds, 10, 64)
	u, err2 := strconv.ParseInt(micros, 10, 64)
	return s*1000 + u/1000, err1 == nil && err2 == nil
}
