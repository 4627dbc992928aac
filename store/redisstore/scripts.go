package redisstore

import "github.com/redis/go-redis/v9"

// A record is one Redis hash, so every operation touches one key and runs
// as one script: atomic, and Cluster-safe without hash tags. Its fields:
//
//	s  state: "p" processing, "c" completed, "f" failed
//	t  the token holding a processing record (16 raw bytes)
//	a  attempts: claims made so far
//	f  fingerprint of the first claim that had one
//	r  result of a completed record
//	e  error text of the last failed attempt
//	l  lease deadline of a processing record, ms since the epoch
//	x  expiry of a completed or failed record, ms since the epoch
//
// Time is the server's (TIME), so the clocks of the consumers never
// matter, and the key's Redis TTL follows the state: a processing record
// lives for its lease plus the abandoned-claim grace (so that the attempt
// count of a worker that crashed survives until a redelivery takes the key
// over), a completed or failed one for its retention.
//
// Every script answers an array whose first element is the outcome.

// nowMS is the server's clock in milliseconds; Redis 5 and later replicate
// scripts by effects, so reading it in a script that writes is allowed.
const nowMS = `
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
`

// acquireScript claims KEYS[1] for token ARGV[1] with a lease of ARGV[2] ms
// and fingerprint ARGV[3], the key living ARGV[4] ms past the lease. It
// answers {outcome, state, attempt, fingerprint, result, last error, lease
// deadline, expiry} with outcome "acquired" or "held", or {"reused", state}.
var acquireScript = redis.NewScript(nowMS + `
local rec = redis.call('HMGET', KEYS[1], 's', 'a', 'f', 'r', 'e', 'l', 'x')
local state = rec[1]
local attempt = tonumber(rec[2]) or 0
local fp = rec[3] or ''
local lastErr = rec[5] or ''
if state then
	if fp ~= '' and ARGV[3] ~= '' and fp ~= ARGV[3] then
		return {'reused', state}
	end
	if state == 'c' then
		return {'held', state, attempt, fp, rec[4] or '', lastErr, 0, tonumber(rec[7]) or 0}
	end
	local leaseUntil = tonumber(rec[6]) or 0
	if state == 'p' and now < leaseUntil then
		return {'held', state, attempt, fp, '', lastErr, leaseUntil, 0}
	end
end
if fp == '' then fp = ARGV[3] end
attempt = attempt + 1
local lease = tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 's', 'p', 't', ARGV[1], 'a', attempt, 'f', fp, 'e', lastErr, 'l', now + lease)
redis.call('HDEL', KEYS[1], 'r', 'x')
redis.call('PEXPIRE', KEYS[1], lease + tonumber(ARGV[4]))
return {'acquired', 'p', attempt, fp, '', lastErr, now + lease, 0}
`)

// settleScript ends the claim of token ARGV[1] on KEYS[1]: it stores state
// ARGV[2] with field ARGV[3] set to ARGV[4] (the result of a completed
// record, the error of a failed one), kept for ARGV[5] ms. It answers {"ok"}
// or {"lost"}.
var settleScript = redis.NewScript(nowMS + `
local rec = redis.call('HMGET', KEYS[1], 's', 't')
if rec[1] ~= 'p' or rec[2] ~= ARGV[1] then
	return {'lost'}
end
local retention = tonumber(ARGV[5])
redis.call('HSET', KEYS[1], 's', ARGV[2], ARGV[3], ARGV[4], 'x', now + retention)
redis.call('HDEL', KEYS[1], 't', 'l')
redis.call('PEXPIRE', KEYS[1], retention)
return {'ok'}
`)

// extendScript pushes the lease of token ARGV[1] on KEYS[1] to ARGV[2] ms
// from now, the key living ARGV[3] ms past it. It answers {"ok"} or
// {"lost"}.
var extendScript = redis.NewScript(nowMS + `
local rec = redis.call('HMGET', KEYS[1], 's', 't')
if rec[1] ~= 'p' or rec[2] ~= ARGV[1] then
	return {'lost'}
end
local lease = tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'l', now + lease)
redis.call('PEXPIRE', KEYS[1], lease + tonumber(ARGV[3]))
return {'ok'}
`)

// scripts are loaded together by New.
var scripts = []*redis.Script{acquireScript, settleScript, extendScript}
