package redisstore

import "github.com/redis/go-redis/v9"

// A record is one Redis hash, so every operation touches one key and runs
// as one script: atomic, and Cluster-safe without hash tags. Its fields:
//
//	s  state: "p" processing, "c" completed, "f" failed
//	t  the token of the last claim (16 raw bytes)
//	a  attempts: claims made so far
//	f  fingerprint of the first claim that had one
//	r  result (read in a completed record only)
//	e  error text of the last failed attempt
//	l  lease deadline, ms since the epoch (read while processing only)
//	x  expiry, ms since the epoch (read once completed or failed only)
//
// Fields that the state does not read are left behind rather than deleted:
// one command less per operation.
//
// Time is the server's (TIME), so the clocks of the consumers never
// matter, and the key's Redis TTL follows the state: a processing record
// lives for its lease plus the abandoned-claim grace (so that the attempt
// count of a worker that crashed survives until a redelivery takes the key
// over), a completed or failed one for its retention.

// lib holds the operations as Lua functions; each script below is lib and
// a line that calls them, for one key or for many.
const lib = `
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

-- acquire claims key for token with a lease of lease ms and fingerprint
-- fp, the key living abandoned ms past the lease. It answers {outcome,
-- state, attempt, fingerprint, result, last error, lease deadline, expiry}
-- with outcome "acquired" or "held", or {"reused", state}.
local function acquire(key, token, lease, fp, abandoned)
	local rec = redis.call('HMGET', key, 's', 'a', 'f', 'r', 'e', 'l', 'x')
	local state = rec[1]
	local attempt = tonumber(rec[2]) or 0
	local stored = rec[3] or ''
	local lastErr = rec[5] or ''
	if state then
		if stored ~= '' and fp ~= '' and stored ~= fp then
			return {'reused', state}
		end
		if state == 'c' then
			return {'held', state, attempt, stored, rec[4] or '', lastErr, 0, tonumber(rec[7]) or 0}
		end
		local leaseUntil = tonumber(rec[6]) or 0
		if state == 'p' and now < leaseUntil then
			return {'held', state, attempt, stored, '', lastErr, leaseUntil, 0}
		end
	end
	attempt = attempt + 1
	lease = tonumber(lease)
	if stored == '' and fp ~= '' then
		stored = fp
		redis.call('HSET', key, 's', 'p', 't', token, 'a', attempt, 'l', now + lease, 'f', fp)
	else
		redis.call('HSET', key, 's', 'p', 't', token, 'a', attempt, 'l', now + lease)
	end
	redis.call('PEXPIRE', key, lease + tonumber(abandoned))
	return {'acquired', 'p', attempt, stored, '', lastErr, now + lease, 0}
end

-- settle ends the claim of token on key: it stores state with field set
-- to value (the result of a completed record, the error of a failed one),
-- kept for retention ms. It answers {"ok"} or {"lost"}.
local function settle(key, token, state, field, value, retention)
	local rec = redis.call('HMGET', key, 's', 't')
	if rec[1] ~= 'p' or rec[2] ~= token then
		return {'lost'}
	end
	retention = tonumber(retention)
	redis.call('HSET', key, 's', state, field, value, 'x', now + retention)
	redis.call('PEXPIRE', key, retention)
	return {'ok'}
end

-- extend pushes the lease of token on key to lease ms from now, the key
-- living abandoned ms past it. It answers {"ok"} or {"lost"}.
local function extend(key, token, lease, abandoned)
	local rec = redis.call('HMGET', key, 's', 't')
	if rec[1] ~= 'p' or rec[2] ~= token then
		return {'lost'}
	end
	lease = tonumber(lease)
	redis.call('HSET', key, 'l', now + lease)
	redis.call('PEXPIRE', key, lease + tonumber(abandoned))
	return {'ok'}
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

// scripts are loaded together by New.
var scripts = []*redis.Script{acquireScript, settleScript, extendScript, acquireManyScript, settleManyScript}
