package rediscore

import "strconv"

// The scripts change a record that exists; a new key is claimed by a plain
// SET NX (see Acquisition), which needs none. Each script touches one key,
// or a record's key and its steps key, which StepsKey puts in the same
// Cluster slot (steps.go) (its multi-key forms, for a single server only,
// touch their keys in order), so every one is atomic and Cluster-safe
// without hash tags in the user's keys. They
// keep to what is cheap in Redis's Lua: fixed offsets, string cuts and
// joins, the state compared as a byte, and times decoded from and encoded
// into their 6 bytes (record.go) by arithmetic, never compared as strings
// (Lua compares strings by the server's locale); the functions and TIME
// are made once per run, not once per key. Most of what a script costs
// Redis is the commands it calls (each redis.call about 1µs, a SET more),
// so the completion of a batch reads its keys with one MGET.
//
// The states as bytes: 112 'p' and 113 'q' processing, 99 'c' and 67 'C'
// completed, 102 'f' failed.

// t48Lua and n48Lua are the functions of a record's times (record.go):
// t48(ms) encodes a time in its 6 bytes, n48(v, i) decodes the one at
// byte i of v (1-based, as Lua counts). A time fits a Lua number exactly
// (48 bits of the 53 a double holds). d24Lua's d24(done) encodes the done
// of the short form, which the caller has checked is within its 3 bytes.
const (
	t48Lua = `
local function t48(n)
	local f = n % 256
	n = (n - f) / 256
	local e = n % 256
	n = (n - e) / 256
	local d = n % 256
	n = (n - d) / 256
	local c = n % 256
	n = (n - c) / 256
	local b = n % 256
	n = (n - b) / 256
	return string.char(n % 256, b, c, d, e, f)
end
`
	n48Lua = `
local function n48(v, i)
	local a, b, c, d, e, f = string.byte(v, i, i + 5)
	return ((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f
end
`
	d24Lua = `
local function d24(done)
	local x = done + 8388608
	local c = x % 256
	x = (x - c) / 256
	local b = x % 256
	return string.char((x - b) / 256, b, c)
end
`
)

// clockLua reads the server's clock, in ms, for the expiry of a settled
// record and the time it was settled. A settled record's key expires at
// the last millisecond of its life, ExpiresAt - 1 ms: Redis keeps a key
// while its clock reads the key's expiry and drops it from the next
// millisecond on, so the record is gone when the server's clock reads its
// ExpiresAt, exactly, with no reader checking the time. The record keeps
// that last millisecond in its 6 bytes, and PXAT gets it in decimal.
const clockLua = t48Lua + n48Lua + d24Lua + `
local clock = redis.call('TIME')
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
`

// completeLua: complete(key, token, result, retention ms) stores result in
// the processing record held by token, as a completed record kept for
// retention, done now. Completing again with the token that completed it
// changes nothing. It answers 1 when it wrote the record, 2 when token had
// completed it already, or 0 when token does not hold the key. A record in
// the short form ('q') completes in the short form ('C') while its done
// fits 3 bytes; the long form's record from byte 30 on (',', the attempt,
// the lengths, the fingerprint and the last error; done is empty while
// processing) follows the new done as it is.
const completeLua = `
local function complete(key, token, result, retention)
	local v = redis.call('GET', key)
	if not v or string.sub(v, 2, 17) ~= token then
		return 0
	end
	local state = string.byte(v)
	if state ~= 113 and state ~= 112 then
		return (state == 67 or state == 99) and 2 or 0
	end
	local last = now + retention - 1
	local done = now - n48(v, 24)
	local rec
	if state == 113 and done >= -8388608 and done < 8388608 then
		rec = 'C' .. token .. t48(last) .. string.sub(v, 24, 29) .. d24(done) .. result
	elseif state == 113 then
		rec = 'c' .. token .. t48(last) .. string.sub(v, 24, 29) .. done .. ',1,0,0,' .. result
	else
		rec = 'c' .. token .. t48(last) .. string.sub(v, 24, 29) .. done .. string.sub(v, 30) .. result
	end
	redis.call('SET', key, rec, 'PXAT', tostring(last))
	return 1
end
`

// completeOneLua is complete as a script of its own, for the one key of
// a new message's completion, the call that Redis runs most: the same
// steps and answers as completeLua, written out with no function made per
// run (t48, n48, d24 and complete are closures that a script made of them
// creates on every call) and the server's clock read only once the record
// is found held by the token. Its expiry goes to PXAT through
// string.format('%d'), which prints an integer, where tostring prints a
// number by the C library's %.14g, about twice as dear.
const completeOneLua = `
local key, token = KEYS[1], ARGV[1]
local v = redis.call('GET', key)
if not v or string.sub(v, 2, 17) ~= token then
	return 0
end
local state = string.byte(v)
if state ~= 113 and state ~= 112 then
	return (state == 67 or state == 99) and 2 or 0
end
local clock = redis.call('TIME')
local now = clock[1] * 1000 + math.floor(clock[2] / 1000)
local last = now + ARGV[3] - 1
local a, b, c, d, e, f = string.byte(v, 24, 29)
local done = now - (((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f)
local n = last
f = n % 256
n = (n - f) / 256
e = n % 256
n = (n - e) / 256
d = n % 256
n = (n - d) / 256
c = n % 256
n = (n - c) / 256
b = n % 256
n = (n - b) / 256
local rec = string.char(n % 256, b, c, d, e, f) .. string.sub(v, 24, 29)
if state == 113 and done >= -8388608 and done < 8388608 then
	n = done + 8388608
	c = n % 256
	n = (n - c) / 256
	b = n % 256
	rec = 'C' .. token .. rec .. string.char((n - b) / 256, b, c) .. ARGV[2]
elseif state == 113 then
	rec = 'c' .. token .. rec .. string.format('%d', done) .. ',1,0,0,' .. ARGV[2]
else
	rec = 'c' .. token .. rec .. string.format('%d', done) .. string.sub(v, 30) .. ARGV[2]
end
redis.call('SET', key, rec, 'PXAT', string.format('%d', last))
return 1
`

// completeManyLua is complete for every key of KEYS in order, ARGV holding
// token, result and retention for each key in turn; it answers their
// answers (1, 2 or 0, as complete's). What a batch of completions costs
// Redis is mostly the commands the script calls, so it reads every key
// with one MGET instead of a GET each (a key that MGET found no string at
// is read again by GET, which answers an absent key and fails on another
// type, as complete's does), and turns the expiry into bytes and text once
// per distinct retention, not once per key. MGET reads every key before
// the first is written, so KEYS must not repeat a key: a batch that does
// runs completeEachScript instead. The loop decodes the creation time and
// encodes done in place, with the string functions in locals, and prints
// numbers with string.format('%d'), as completeOneLua does.
const completeManyLua = `
local sub, byte, char, call = string.sub, string.byte, string.char, redis.call
local vals = call('MGET', unpack(KEYS))
local out, retained, last, last48 = {}, nil, nil, nil
for i = 1, #KEYS do
	local key, j = KEYS[i], i * 3 - 2
	local token = ARGV[j]
	local v = vals[i] or call('GET', key)
	local answer = 0
	if v and sub(v, 2, 17) == token then
		local state = byte(v)
		if state == 113 or state == 112 then
			if ARGV[j + 2] ~= retained then
				retained = ARGV[j + 2]
				last = now + retained - 1
				last48, last = t48(last), string.format('%d', last)
			end
			local a, b, c, d, e, f = byte(v, 24, 29)
			local done = now - (((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f)
			local rec
			if state == 113 and done >= -8388608 and done < 8388608 then
				a = done + 8388608
				c = a % 256
				a = (a - c) / 256
				b = a % 256
				rec = 'C' .. token .. last48 .. sub(v, 24, 29) .. char((a - b) / 256, b, c) .. ARGV[j + 1]
			elseif state == 113 then
				rec = 'c' .. token .. last48 .. sub(v, 24, 29) .. string.format('%d', done) .. ',1,0,0,' .. ARGV[j + 1]
			else
				rec = 'c' .. token .. last48 .. sub(v, 24, 29) .. string.format('%d', done) .. sub(v, 30) .. ARGV[j + 1]
			end
			call('SET', key, rec, 'PXAT', last)
			answer = 1
		elseif state == 67 or state == 99 then
			answer = 2
		end
	end
	out[i] = answer
end
return out
`

// keepStepsLua: keepSteps(steps, v, life) keeps the step records at
// steps (steps.go) of the record v, the record as it was before the call
// (its creation time is the same after), alive for at least life ms plus
// the retention SaveStep was given, when the hash there is v's (its meta
// field starts with v's creation time); it never shortens their life. It
// costs a key with no step records one HGET.
const keepStepsLua = `
local function keepSteps(steps, v, life)
	local meta = redis.call('HGET', steps, '')
	if meta and string.sub(meta, 1, 6) == string.sub(v, 24, 29) then
		life = life + (tonumber(string.sub(meta, 7)) or 0)
		if redis.call('PTTL', steps) < life then
			redis.call('PEXPIRE', steps, string.format('%d', life))
		end
	end
end
`

// releaseLua: release(key, steps, token, message, retention ms) turns the
// processing record held by token into a failed one with message as its
// last error, kept for retention, done now, and keeps its step records at
// steps as long (keepSteps). It answers 1, or 0.
const releaseLua = keepStepsLua + `
local function release(key, steps, token, message, retention)
	local v = redis.call('GET', key)
	if not v or string.sub(v, 2, 17) ~= token then
		return 0
	end
	local state = string.byte(v)
	local attempt, fpLen, at = '1', 0, 30
	if state == 112 then
		local _
		attempt, fpLen, _, at = string.match(v, '^,(%d+),(%d+),(%d+),()', 30)
		if not at then
			return 0
		end
	elseif state ~= 113 then
		return 0
	end
	local last = now + retention - 1
	redis.call('SET', key, 'f' .. token .. t48(last) .. string.sub(v, 24, 29) .. (now - n48(v, 24)) .. ',' ..
		attempt .. ',' .. fpLen .. ',' .. #message .. ',' .. string.sub(v, at, at + fpLen - 1) .. message,
		'PXAT', tostring(last))
	keepSteps(steps, v, tonumber(retention))
	return 1
end
`

// extendLua: extend(key, steps, token, deadline, ttl ms) sets the lease of
// the processing record held by token to deadline (a time of the record),
// even when that is earlier than it was, the key living ttl (the lease
// plus the abandoned grace), and keeps its step records at steps as long
// (keepSteps). It answers 1, or 0.
const extendLua = keepStepsLua + `
local function extend(key, steps, token, deadline, ttl)
	local v = redis.call('GET', key)
	if not v or string.sub(v, 2, 17) ~= token then
		return 0
	end
	local state = string.byte(v)
	if state ~= 113 and state ~= 112 then
		return 0
	end
	redis.call('SET', key, string.sub(v, 1, 17) .. deadline .. string.sub(v, 24), 'PX', ttl)
	keepSteps(steps, v, tonumber(ttl))
	return 1
end
`

// acquireLua: acquire(key, token, deadline, fingerprint, ttl ms, now,
// created) is Acquire for a key that SET NX found taken: it claims key for
// token until deadline (a time of the record) if the record is failed or
// its lease has ended by now (ms in decimal, the caller's clock, as
// deadline is), counting the attempt, keeping the creation time, the first
// fingerprint and the last error, the key living ttl; or, created at
// created (a time of the record), if the record is gone by now. A record
// processing under token itself, its lease live or ended, is the caller's
// own claim asked for again (AcquireRequest.Token): it is granted again as
// it is, its deadline set as extend sets it, no attempt counted. The
// script needs no word on whether token is the caller's: a fresh one
// (NewToken, 128 random bits) is on no record. A claim given back
// (abandonLua: its deadline zeroed, its attempt count as before it) is
// no longer the token's own: its retry takes it over, counting the
// attempt again, as the claim given back had. It answers {1, the new
// record}, {0, the record holding the key}, or {2, the record} when the
// fingerprints differ, which wins over a retry, a takeover or the
// caller's own token. A completed record in the short form has no
// fingerprint to differ.
const acquireLua = n48Lua + `
local function acquire(key, token, deadline, fp, ttl, now, created)
	local v = redis.call('GET', key)
	local attempt, lastErr = 1, ''
	if v then
		local state = string.byte(v)
		local attempts, fpLen, errLen, at = 1, 0, 0, 30
		if state == 113 then
			if #v ~= 29 then
				return {0, v}
			end
		elseif state == 67 then
			return {0, v}
		else
			attempts, fpLen, errLen, at = string.match(v, '^%-?%d*,(%d+),(%d+),(%d+),()', 30)
			if not at then
				return {0, v}
			end
		end
		local stored = string.sub(v, at, at + fpLen - 1)
		if stored ~= '' and fp ~= '' and stored ~= fp then
			return {2, v}
		end
		if (state == 113 or state == 112) and string.sub(v, 2, 17) == token and n48(v, 18) > 0 then
			local rec = string.sub(v, 1, 17) .. deadline .. string.sub(v, 24)
			redis.call('SET', key, rec, 'PX', ttl)
			return {1, rec}
		end
		if not (state == 102 or ((state == 113 or state == 112) and n48(v, 18) <= tonumber(now))) then
			return {0, v}
		end
		attempt = attempts + 1
		lastErr = string.sub(v, at + fpLen, at + fpLen + errLen - 1)
		created = string.sub(v, 24, 29)
		if stored ~= '' then
			fp = stored
		end
	end
	local rec
	if attempt == 1 and fp == '' then
		rec = 'q' .. token .. deadline .. created
	else
		rec = 'p' .. token .. deadline .. created .. ',' .. attempt .. ',' .. #fp .. ',' .. #lastErr .. ',' .. fp .. lastErr
	end
	redis.call('SET', key, rec, 'PX', ttl)
	return {1, rec}
end
`

// deleteIfLua: deleteIf(key, steps, states, expired, now) deletes the record
// of key, and its step records at steps, when its state is one of states ('p', 'c', 'f' in any order, for
// processing, completed, failed), or when it is processing, expired is
// '1' and its lease deadline is at or before now (ms in decimal, the
// caller's clock, as every lease). It answers {1, the record} when it
// deleted it, {0, the record} when it kept it, or {} when there is no
// record. A value of another program is kept and answered, for the
// caller to refuse.
const deleteIfLua = n48Lua + `
local function deleteIf(key, steps, states, expired, now)
	local v = redis.call('GET', key)
	if not v then
		return {}
	end
	if #v < 29 then
		return {0, v}
	end
	local state = string.sub(v, 1, 1)
	if state == 'q' then
		state = 'p'
	elseif state == 'C' then
		state = 'c'
	end
	if string.find(states, state, 1, true) or
		(expired == '1' and state == 'p' and n48(v, 18) <= tonumber(now)) then
		redis.call('DEL', key, steps)
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
// next Acquire takes it over at once and counts that attempt again. Its
// deadline is zero, which no claim's is: acquireLua reads it as given
// back, so that the retry of the Acquire with its own token takes it over
// too, instead of being granted the attempt count of the claim before it.
// It answers 1, or 0 when token does not hold the key.
const abandonLua = `
local function abandon(key, token)
	local v = redis.call('GET', key)
	if not v or string.sub(v, 2, 17) ~= token then
		return 0
	end
	local state = string.byte(v)
	if state == 113 then
		redis.call('DEL', key)
		return 1
	end
	if state ~= 112 then
		return 0
	end
	local attempt, rest = string.match(v, '^,(%d+)(,.*)$', 30)
	if not attempt then
		return 0
	end
	if attempt == '1' then
		redis.call('DEL', key)
	else
		redis.call('SET', key, string.sub(v, 1, 17) .. '\0\0\0\0\0\0' .. string.sub(v, 24, 29) .. ',' .. (attempt - 1) .. rest, 'KEEPTTL')
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
	if not v or string.sub(v, 2, 17) ~= token then
		return 0
	end
	local state = string.byte(v)
	if state ~= 67 and state ~= 99 then
		return 0
	end
	redis.call('SET', key, v, 'KEEPTTL')
	return 1
end
`

// saveStepLua records a step of the processing record at KEYS[1] held by
// ARGV[1]: in the hash at KEYS[2], the record's steps key, field ARGV[2]
// (the name) is set to ARGV[3] (the value), and the meta field to the
// record's creation time and ARGV[4] (the retention, ms); a hash there
// that is not the record's (another creation time: an earlier record's)
// is deleted first. The steps key then lives at least as long as the
// record plus the retention. It answers 1, or 0, writing nothing, when
// the token does not hold the key processing.
const saveStepLua = `
local v = redis.call('GET', KEYS[1])
if not v or string.sub(v, 2, 17) ~= ARGV[1] then
	return 0
end
local state = string.byte(v)
if state ~= 113 and state ~= 112 then
	return 0
end
local created = string.sub(v, 24, 29)
local meta = redis.call('HGET', KEYS[2], '')
if not meta or string.sub(meta, 1, 6) ~= created then
	redis.call('DEL', KEYS[2])
end
redis.call('HSET', KEYS[2], '', created .. ARGV[4], ARGV[2], ARGV[3])
local life = math.max(redis.call('PTTL', KEYS[1]), 0) + ARGV[4]
if redis.call('PTTL', KEYS[2]) < life then
	redis.call('PEXPIRE', KEYS[2], string.format('%d', life))
end
return 1
`

// loadStepsLua answers the step records of the processing record at
// KEYS[1] held by ARGV[1]: the fields and values of the hash at KEYS[2],
// the meta field among them, or none when the hash is not the record's.
// It keeps the hash alive as long as the record plus the retention, as
// keepSteps does: a takeover's holder reads its steps before it extends
// or completes. It answers 0 when the token does not hold the key
// processing.
const loadStepsLua = `
local v = redis.call('GET', KEYS[1])
if not v or string.sub(v, 2, 17) ~= ARGV[1] then
	return 0
end
local state = string.byte(v)
if state ~= 113 and state ~= 112 then
	return 0
end
local meta = redis.call('HGET', KEYS[2], '')
if not meta or string.sub(meta, 1, 6) ~= string.sub(v, 24, 29) then
	return {}
end
local life = math.max(redis.call('PTTL', KEYS[1]), 0) + (tonumber(string.sub(meta, 7)) or 0)
if redis.call('PTTL', KEYS[2]) < life then
	redis.call('PEXPIRE', KEYS[2], string.format('%d', life))
end
return redis.call('HGETALL', KEYS[2])
`

// one returns the source of a script that calls fn with KEYS[1] and its n
// arguments.
func one(prelude, lua, fn string, n int) string {
	return prelude + lua + "return " + fn + "(KEYS[1]" + argvList("", n) + ")"
}

// two returns the source of a script that calls fn with KEYS[1], KEYS[2]
// (a record's key and its steps key) and its n arguments.
func two(prelude, lua, fn string, n int) string {
	return prelude + lua + "return " + fn + "(KEYS[1], KEYS[2]" + argvList("", n) + ")"
}

// manyTwo returns the source of a script that calls fn for every pair of
// keys in order (a record's key, then its steps key), ARGV holding its n
// arguments for each pair in turn, and answers their answers.
func manyTwo(prelude, lua, fn string, n int) string {
	return prelude + lua + `
local out = {}
for i = 1, #KEYS / 2 do
	local j = (i - 1) * ` + strconv.Itoa(n) + `
	out[i] = ` + fn + `(KEYS[2 * i - 1], KEYS[2 * i]` + argvList("j + ", n) + `)
end
return out`
}

// many returns the source of a script that calls fn for every key in
// order, ARGV holding its n arguments for each key in turn, and answers
// their answers.
func many(prelude, lua, fn string, n int) string {
	return prelude + lua + `
local out = {}
for i, key in ipairs(KEYS) do
	local j = (i - 1) * ` + strconv.Itoa(n) + `
	out[i] = ` + fn + `(key` + argvList("j + ", n) + `)
end
return out`
}

// argvList is ", ARGV[<base>1], ARGV[<base>2], ..." up to n.
func argvList(base string, n int) string {
	s := ""
	for i := 1; i <= n; i++ {
		s += ", ARGV[" + base + strconv.Itoa(i) + "]"
	}
	return s
}

// The scripts' sources, for each client to wrap in its own script type
// (EVALSHA, and the source when the server lost it). A store loads them
// all when it starts. The single-key forms take KEYS[1]; the Many and
// Each forms take any number of keys on one server, ARGV holding each
// key's arguments in turn, and answer a list of the single-key answers.
var (
	// CompleteScript: KEYS[1], ARGV token, result, retention ms; answers
	// 1 wrote, 2 completed already by the token, 0 lease lost.
	CompleteScript = completeOneLua
	// CompleteManyScript is CompleteScript for keys that do not repeat
	// (one MGET reads them all).
	CompleteManyScript = clockLua + completeManyLua
	// CompleteEachScript is CompleteScript for keys that may repeat.
	CompleteEachScript = many(clockLua, completeLua, "complete", 3)
	// ReleaseScript: KEYS record, steps (Core.StepsKey), ARGV token,
	// error text, retention ms; answers 1 or 0.
	ReleaseScript = two(clockLua, releaseLua, "release", 3)
	// ExtendScript: KEYS record, steps, ARGV token, deadline
	// (TimeString), key TTL ms; answers 1 or 0. ExtendManyScript takes
	// the pairs of keys in turn.
	ExtendScript     = two("", extendLua, "extend", 3)
	ExtendManyScript = manyTwo("", extendLua, "extend", 3)
	// AcquireScript: KEYS[1], ARGV Acquisition.Args; answers {code,
	// record} (see Core.Retaken): a takeover, a retry, or the caller's own
	// claim granted again.
	AcquireScript     = one("", acquireLua, "acquire", 6)
	AcquireManyScript = many("", acquireLua, "acquire", 6)
	// DeleteIfScript: KEYS record, steps, ARGV Core.DeleteIfArgs;
	// answers {} or {code, record} (see Core.Deleted).
	DeleteIfScript = two("", deleteIfLua, "deleteIf", 3)
	// SaveStepScript: KEYS record, steps, ARGV token, name, value,
	// retention ms (SaveStepArgs); answers 1 or 0 (see saveStepLua).
	SaveStepScript = saveStepLua
	// LoadStepsScript: KEYS record, steps, ARGV token; answers 0, or the
	// step records' fields and values in turn (LoadedSteps).
	LoadStepsScript = loadStepsLua
	// AbandonScript and ConfirmScript serve a store that waits for
	// replicas (redisstore's MinReplicas): KEYS[1], ARGV token.
	AbandonScript     = one("", abandonLua, "abandon", 1)
	AbandonManyScript = many("", abandonLua, "abandon", 1)
	ConfirmScript     = one("", confirmLua, "confirm", 1)
	ConfirmManyScript = many("", confirmLua, "confirm", 1)
)
