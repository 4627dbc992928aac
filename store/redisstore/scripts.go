package redisstore

import (
	"strconv"

	"github.com/redis/go-redis/v9"
)

// The scripts change a record that exists; a new key is claimed by a plain
// SET NX (see Store.Acquire), which needs none. Each script touches one key
// (its multi-key forms, for a single server only, touch their keys in
// order), so every one is atomic and Cluster-safe without hash tags. They
// keep to what is cheap in Redis's Lua: fixed offsets, string cuts and
// joins, the state compared as a byte, and times decoded from and encoded
// into their 8 digits of base 64 (record.go) by arithmetic on the bytes,
// never compared as strings (Lua compares strings by the server's locale);
// the functions and TIME are made once per run, not once per key. Most of what a script costs Redis is the commands it calls
// (each redis.call about 1µs, a SET more), so the completion of a batch
// reads its keys with one MGET.

// t64Lua and n64Lua are the functions of a record's times (record.go):
// t64(ms) encodes a time in its 8 digits of base 64, n64(v, i) decodes the
// one at byte i of v (1-based, as Lua counts). A time fits a Lua number
// exactly (48 bits of the 53 a double holds).
const (
	t64Lua = `
local function t64(n)
	local h = n % 64
	n = (n - h) / 64
	local g = n % 64
	n = (n - g) / 64
	local f = n % 64
	n = (n - f) / 64
	local e = n % 64
	n = (n - e) / 64
	local d = n % 64
	n = (n - d) / 64
	local c = n % 64
	n = (n - c) / 64
	local b = n % 64
	n = (n - b) / 64
	return string.char(n % 64 + 48, b + 48, c + 48, d + 48, e + 48, f + 48, g + 48, h + 48)
end
`
	n64Lua = `
local function n64(v, i)
	local a, b, c, d, e, f, g, h = string.byte(v, i, i + 7)
	return (((((((a - 48) * 64 + b - 48) * 64 + c - 48) * 64 + d - 48) * 64 + e - 48) * 64 + f - 48) * 64 + g - 48) * 64 + h - 48
end
`
)

// clockLua reads the server's clock, in ms, for the expiry of a settled
// record and the time it was settled. A settled record's key expires at
// the last millisecond of its life, ExpiresAt - 1 ms: Redis keeps a key
// while its clock reads the key's expiry and drops it from the next
// millisecond on, so the record is gone when the server's clock reads its
// ExpiresAt, exactly, with no reader checking the time. The record keeps
// that last millisecond, in base 64, and PXAT gets it in decimal.
const clockLua = t64Lua + n64Lua + `
local clock = redis.call('TIME')
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
`

// completeLua: complete(key, token, result, retention ms) stores result in
// the processing record held by token, as a completed record kept for
// retention, done now. Completing again with the token that completed it
// changes nothing. It answers 1 when it wrote the record, 2 when token had
// completed it already, or 0 when token does not hold the key. The state
// is compared as a byte (112 'p', 99 'c'), which makes no string. A
// processing record's done is empty, so the record from byte 34 on (',',
// the attempt, the lengths, the fingerprint and the last error) follows
// the new done as it is.
const completeLua = `
local function complete(key, token, result, retention)
	local v = redis.call('GET', key)
	if not v or string.sub(v, 2, 17) ~= token then
		return 0
	end
	local state = string.byte(v)
	if state ~= 112 then
		return state == 99 and 2 or 0
	end
	local last = now + retention - 1
	redis.call('SET', key, 'c' .. token .. t64(last) .. string.sub(v, 26, 33) .. (now - n64(v, 26)) .. string.sub(v, 34) .. result,
		'PXAT', tostring(last))
	return 1
end
`

// completeManyLua is complete for every key of KEYS in order, ARGV holding
// token, result and retention for each key in turn; it answers their
// answers (1, 2 or 0, as complete's). What a batch of completions costs
// Redis is mostly the commands the script calls, so it reads every key
// with one MGET instead of a GET each (a key that MGET found no string at
// is read again by GET, which answers an absent key and fails on another
// type, as complete's does), and turns the expiry into text once per
// distinct retention, not once per key. MGET reads every key before the
// first is written, so KEYS must not repeat a key: a batch that does runs
// completeEachScript instead.
const completeManyLua = `
local vals = redis.call('MGET', unpack(KEYS))
local out, retained, last, last64 = {}, nil, nil, nil
for i = 1, #KEYS do
	local key, j = KEYS[i], i * 3 - 2
	local token = ARGV[j]
	local v = vals[i] or redis.call('GET', key)
	local answer = 0
	if v and string.sub(v, 2, 17) == token then
		local state = string.byte(v)
		if state == 112 then
			if ARGV[j + 2] ~= retained then
				retained = ARGV[j + 2]
				last = now + retained - 1
				last64, last = t64(last), tostring(last)
			end
			redis.call('SET', key, 'c' .. token .. last64 .. string.sub(v, 26, 33) .. (now - n64(v, 26)) .. string.sub(v, 34) .. ARGV[j + 1],
				'PXAT', last)
			answer = 1
		elseif state == 99 then
			answer = 2
		end
	end
	out[i] = answer
end
return out
`

// releaseLua: release(key, token, message, retention ms) turns the
// processing record held by token into a failed one with message as its
// last error, kept for retention, done now. It answers 1, or 0.
const releaseLua = `
local function release(key, token, message, retention)
	local v = redis.call('GET', key)
	if not v or string.sub(v, 1, 17) ~= 'p' .. token then
		return 0
	end
	local attempt, fpLen, _, at = string.match(v, '^,(%d+),(%d+),(%d+),()', 34)
	if not at then
		return 0
	end
	local last = now + retention - 1
	redis.call('SET', key, 'f' .. token .. t64(last) .. string.sub(v, 26, 33) .. (now - n64(v, 26)) .. ',' ..
		attempt .. ',' .. fpLen .. ',' .. #message .. ',' .. string.sub(v, at, at + fpLen - 1) .. message,
		'PXAT', tostring(last))
	return 1
end
`

// extendLua: extend(key, token, deadline, ttl ms) sets the lease of the
// processing record held by token to deadline (a time of the record),
// even when that is earlier than it was, the key living ttl (the lease
// plus the abandoned grace). It answers 1, or 0.
const extendLua = `
local function extend(key, token, deadline, ttl)
	local v = redis.call('GET', key)
	if not v or string.sub(v, 1, 17) ~= 'p' .. token then
		return 0
	end
	redis.call('SET', key, string.sub(v, 1, 17) .. deadline .. string.sub(v, 26), 'PX', ttl)
	return 1
end
`

// acquireLua: acquire(key, token, deadline, fingerprint, ttl ms, now,
// created) is Acquire for a key that SET NX found taken: it claims key for
// token until deadline (a time of the record) if the record is failed or
// its lease has ended by now (ms in decimal, the caller's clock, as
// deadline is), counting the attempt, keeping the creation time, the first
// fingerprint and the last error, the key living ttl; or, created at
// created (a time of the record), if the record is gone by now. It answers
// {1, the new record}, {0, the record holding the key}, or {2, the record}
// when the fingerprints differ, which wins over a retry or a takeover.
const acquireLua = n64Lua + `
local function acquire(key, token, deadline, fp, ttl, now, created)
	local v = redis.call('GET', key)
	local attempt, lastErr = 1, ''
	if v then
		local attempts, fpLen, errLen, at = string.match(v, '^%-?%d*,(%d+),(%d+),(%d+),()', 34)
		if not at then
			return {0, v}
		end
		local stored = string.sub(v, at, at + fpLen - 1)
		if stored ~= '' and fp ~= '' and stored ~= fp then
			return {2, v}
		end
		local state = string.byte(v)
		if not (state == 102 or (state == 112 and n64(v, 18) <= tonumber(now))) then
			return {0, v}
		end
		attempt = attempts + 1
		lastErr = string.sub(v, at + fpLen, at + fpLen + errLen - 1)
		created = string.sub(v, 26, 33)
		if stored ~= '' then
			fp = stored
		end
	end
	local rec = 'p' .. token .. deadline .. created .. ',' .. attempt .. ',' .. #fp .. ',' .. #lastErr .. ',' .. fp .. lastErr
	redis.call('SET', key, rec, 'PX', ttl)
	return {1, rec}
end
`

// deleteIfLua: deleteIf(key, states, expired, now) deletes the record of
// key when its state byte is one of states ('p', 'c', 'f' in any order),
// or when it is processing, expired is '1' and its lease deadline is at
// or before now (ms in decimal, the caller's clock, as every lease). It
// answers {1, the record} when it deleted it, {0, the record} when it
// kept it, or {} when there is no record. A value of another program is
// kept and answered, for the caller to refuse.
const deleteIfLua = n64Lua + `
local function deleteIf(key, states, expired, now)
	local v = redis.call('GET', key)
	if not v then
		return {}
	end
	if #v < 40 then
		return {0, v}
	end
	local state = string.sub(v, 1, 1)
	if string.find(states, state, 1, true) or
		(expired == '1' and state == 'p' and n64(v, 18) <= tonumber(now)) then
		redis.call('DEL', key)
		return {1, v}
	end
	return {0, v}
end
`

// abandonLua: abandon(key, token) gives back the claim of token, which
// too few replicas acknowledged (Options.MinReplicas), so that the next
// Acquire need not wait for its lease: a first attempt's record is
// deleted; a takeover's is left processing with its lease ended and the
// attempt count it had before the takeover (the handler never ran), so the
// next Acquire takes it over at once and counts that attempt again. It
// answers 1, or 0 when token does not hold the key.
const abandonLua = `
local function abandon(key, token)
	local v = redis.call('GET', key)
	if not v or string.sub(v, 1, 17) ~= 'p' .. token then
		return 0
	end
	local attempt, rest = string.match(v, '^,(%d+)(,.*)$', 34)
	if not attempt then
		return 0
	end
	if attempt == '1' then
		redis.call('DEL', key)
	else
		redis.call('SET', key, string.sub(v, 1, 17) .. '00000000' .. string.sub(v, 26, 33) .. ',' .. (attempt - 1) .. rest, 'KEEPTTL')
	end
	return 1
end
`

// confirmLua: confirm(key, token) writes the completed record of token
// again, unchanged (value and expiry), and answers 1; or 0 when token did
// not complete the key. A completion that finds its record completed
// already (a retry of one whose WAIT fell short) wrote nothing on this
// connection, so a WAIT after it would not cover the write it found: this
// one does, the replication stream being in order.
const confirmLua = `
local function confirm(key, token)
	local v = redis.call('GET', key)
	if not v or string.sub(v, 1, 17) ~= 'c' .. token then
		return 0
	end
	redis.call('SET', key, v, 'KEEPTTL')
	return 1
end
`

// one returns a script that calls fn with KEYS[1] and its n arguments.
func one(prelude, lua, fn string, n int) *redis.Script {
	return redis.NewScript(prelude + lua + "return " + fn + "(KEYS[1]" + argvList("", n) + ")")
}

// many returns a script that calls fn for every key in order, ARGV holding
// its n arguments for each key in turn, and answers their answers.
func many(prelude, lua, fn string, n int) *redis.Script {
	return redis.NewScript(prelude + lua + `
local out = {}
for i, key in ipairs(KEYS) do
	local j = (i - 1) * ` + strconv.Itoa(n) + `
	out[i] = ` + fn + `(key` + argvList("j + ", n) + `)
end
return out`)
}

// argvList is ", ARGV[<base>1], ARGV[<base>2], ..." up to n.
func argvList(base string, n int) string {
	s := ""
	for i := 1; i <= n; i++ {
		s += ", ARGV[" + base + strconv.Itoa(i) + "]"
	}
	return s
}

var (
	completeScript     = one(clockLua, completeLua, "complete", 3)
	completeManyScript = redis.NewScript(clockLua + completeManyLua)
	completeEachScript = many(clockLua, completeLua, "complete", 3)
	releaseScript      = one(clockLua, releaseLua, "release", 3)
	extendScript       = one("", extendLua, "extend", 3)
	extendManyScript   = many("", extendLua, "extend", 3)
	acquireScript      = one("", acquireLua, "acquire", 6)
	acquireManyScript  = many("", acquireLua, "acquire", 6)
	deleteIfScript     = one("", deleteIfLua, "deleteIf", 3)
	abandonScript      = one("", abandonLua, "abandon", 1)
	abandonManyScript  = many("", abandonLua, "abandon", 1)
	confirmScript      = one("", confirmLua, "confirm", 1)
	confirmManyScript  = many("", confirmLua, "confirm", 1)
)

// scripts are loaded together by New, and again by a pipeline that met
// NOSCRIPT.
var scripts = []*redis.Script{
	completeScript, completeManyScript, completeEachScript, releaseScript,
	extendScript, extendManyScript, acquireScript, acquireManyScript,
	deleteIfScript, abandonScript, abandonManyScript, confirmScript, confirmManyScript,
}
