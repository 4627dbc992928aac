package redisstore

import "github.com/redis/go-redis/v9"

// A record is one Redis hash, so every operation touches one key and runs
// as one script: atomic, and Cluster-safe without hash tags. Its fields:
//
//	s  state: "p" processing, "c" completed, "f" failed
//	t  the token of the last claim (16 raw bytes); a completed record keeps
//	   the token that completed it, so that the same Complete again succeeds
//	a  attempts: claims made so far
//	f  fingerprint of the first claim that had one
//	r  result (read in a completed record only)
//	e  error text of the last failed attempt (a completed record keeps it)
//	l  lease deadline, ms since the epoch (read while processing only)
//	x  expiry, ms since the epoch (read once completed or failed only)
//
// Fields that the state does not read are left behind rather than deleted:
// one command less per operation.
//
// Time is the server's (TIME), so the clocks of the consumers never
// matter. A lease has ended once now >= l. The key's Redis expiry follows
// the state, set as an absolute time (PEXPIREAT) from the same now: a
// processing record lives until its lease deadline plus the abandoned-claim
// grace (so that the attempt count of a worker that crashed survives until
// a redelivery takes the key over), a completed or failed one until x.
// Redis drops a key only once its clock is past the expiry, so at x exactly
// the hash is still there: the scripts treat a completed or failed record
// with now >= x as absent.

// lib holds the operations as Lua functions; each script below is lib and
// a line that calls them, for one key or for many.
const lib = `
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

-- read returns the fields s, t, a, f, r, e, l, x of key's record, or nil
-- when there is none: no hash, or a completed or failed record whose
-- expiry has come (then stale is true: Redis drops the hash a millisecond
-- later).
local function read(key)
	local rec = redis.call('HMGET', key, 's', 't', 'a', 'f', 'r', 'e', 'l', 'x')
	local state = rec[1]
	if not state then
		return nil, false
	end
	if (state == 'c' or state == 'f') and (tonumber(rec[8]) or 0) <= now then
		return nil, true
	end
	return rec, false
end

-- view answers rec as {state, attempt, fingerprint, result, last error,
-- lease deadline, expiry}, with the fields its state does not read zeroed.
local function view(rec)
	local state = rec[1]
	local out = {state, tonumber(rec[3]) or 0, rec[4] or '', '', rec[6] or '', 0, 0}
	if state == 'p' then
		out[6] = tonumber(rec[7]) or 0
	else
		out[7] = tonumber(rec[8]) or 0
	end
	if state == 'c' then
		out[4] = rec[5] or ''
	end
	return out
end

-- acquire claims key for token with a lease of lease ms and fingerprint
-- fp, the key living abandoned ms past the lease. It answers {outcome,
-- view...} with outcome "acquired" or "held", or {"reused", state}. A
-- fingerprint mismatch wins over the retry of a failed record and the
-- takeover of an expired lease.
local function acquire(key, token, lease, fp, abandoned)
	local rec, stale = read(key)
	local attempt, stored, lastErr = 0, '', ''
	if rec then
		local state = rec[1]
		stored = rec[4] or ''
		if stored ~= '' and fp ~= '' and stored ~= fp then
			return {'reused', state}
		end
		if state == 'c' or (state == 'p' and now < (tonumber(rec[7]) or 0)) then
			local out = view(rec)
			table.insert(out, 1, 'held')
			return out
		end
		attempt = tonumber(rec[3]) or 0
		lastErr = rec[6] or ''
	elseif stale then
		-- Its fields must not leak into the new record.
		redis.call('DEL', key)
	end
	attempt = attempt + 1
	lease = tonumber(lease)
	if stored == '' and fp ~= '' then
		stored = fp
		redis.call('HSET', key, 's', 'p', 't', token, 'a', attempt, 'l', now + lease, 'f', fp)
	else
		redis.call('HSET', key, 's', 'p', 't', token, 'a', attempt, 'l', now + lease)
	end
	redis.call('PEXPIREAT', key, now + lease + tonumber(abandoned))
	return {'acquired', 'p', attempt, stored, '', lastErr, now + lease, 0}
end

-- settle ends the claim of token on key: it stores state with field set
-- to value (the result of a completed record, the error of a failed one),
-- kept for retention ms. Completing again with the token that completed
-- the record changes nothing. It answers {"ok"} or {"lost"}.
local function settle(key, token, state, field, value, retention)
	local rec = read(key)
	if not rec or rec[2] ~= token then
		return {'lost'}
	end
	if rec[1] == 'c' and state == 'c' then
		return {'ok'}
	end
	if rec[1] ~= 'p' then
		return {'lost'}
	end
	local expiry = now + tonumber(retention)
	redis.call('HSET', key, 's', state, field, value, 'x', expiry)
	redis.call('PEXPIREAT', key, expiry)
	return {'ok'}
end

-- extend sets the lease of token on key to lease ms from now, even when
-- that is earlier than the deadline it had, the key living abandoned ms
-- past it. It answers {"ok"} or {"lost"}.
local function extend(key, token, lease, abandoned)
	local rec = redis.call('HMGET', key, 's', 't')
	if rec[1] ~= 'p' or rec[2] ~= token then
		return {'lost'}
	end
	local deadline = now + tonumber(lease)
	redis.call('HSET', key, 'l', deadline)
	redis.call('PEXPIREAT', key, deadline + tonumber(abandoned))
	return {'ok'}
end

-- get answers key's record as view does, or {} when there is none.
local function get(key)
	local rec = read(key)
	if not rec then
		return {}
	end
	return view(rec)
end
`

// acquireScript: KEYS[1]; ARGV token, lease, fingerprint, abandoned.
var acquireScript = redis.NewScript(lib + `
return acquire(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4])`)

// settleScript: KEYS[1]; ARGV token, state, field, value, retention.
var settleScript = redis.NewScript(lib + `
return settle(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])`)

// extendScript: KEYS[1]; ARGV token, lease, abandoned.
var extendScript = redis.NewScript(lib + `
return extend(KEYS[1], ARGV[1], ARGV[2], ARGV[3])`)

// getScript: KEYS[1].
var getScript = redis.NewScript(lib + `
return get(KEYS[1])`)

// acquireManyScript runs acquire for every key, in order, in one script;
// ARGV holds acquireScript's four arguments for each key in turn. It
// answers one acquire answer per key. Only for a server that holds every
// key (not a Cluster).
var acquireManyScript = redis.NewScript(lib + `
local out = {}
for i, key in ipairs(KEYS) do
	local j = (i - 1) * 4
	out[i] = acquire(key, ARGV[j + 1], ARGV[j + 2], ARGV[j + 3], ARGV[j + 4])
end
return out`)

// settleManyScript runs settle for every key, in order, in one script;
// ARGV holds settleScript's five arguments for each key in turn.
var settleManyScript = redis.NewScript(lib + `
local out = {}
for i, key in ipairs(KEYS) do
	local j = (i - 1) * 5
	out[i] = settle(key, ARGV[j + 1], ARGV[j + 2], ARGV[j + 3], ARGV[j + 4], ARGV[j + 5])
end
return out`)

// extendManyScript runs extend for every key, in order, in one script;
// ARGV holds extendScript's three arguments for each key in turn.
var extendManyScript = redis.NewScript(lib + `
local out = {}
for i, key in ipairs(KEYS) do
	local j = (i - 1) * 3
	out[i] = extend(key, ARGV[j + 1], ARGV[j + 2], ARGV[j + 3])
end
return out`)

// scripts are loaded together by New, and again by a pipeline that met
// NOSCRIPT.
var scripts = []*redis.Script{
	acquireScript, settleScript, extendScript, getScript,
	acquireManyScript, settleManyScript, extendManyScript,
}
