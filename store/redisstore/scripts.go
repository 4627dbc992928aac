package redisstore

import (
	"github.com/redis/go-redis/v9"

	"github.com/dedup-go/dedup/store/rediscore"
)

// The scripts, whose sources rediscore keeps for every Redis store: the
// same records, the same Lua (see rediscore's scripts.go for what each
// does and costs). go-redis runs them by SHA (EVALSHA), sending the
// source when the server lost it.
var (
	completeScript     = redis.NewScript(rediscore.CompleteScript)
	completeManyScript = redis.NewScript(rediscore.CompleteManyScript)
	completeEachScript = redis.NewScript(rediscore.CompleteEachScript)
	releaseScript      = redis.NewScript(rediscore.ReleaseScript)
	extendScript       = redis.NewScript(rediscore.ExtendScript)
	extendManyScript   = redis.NewScript(rediscore.ExtendManyScript)
	acquireScript      = redis.NewScript(rediscore.AcquireScript)
	acquireManyScript  = redis.NewScript(rediscore.AcquireManyScript)
	deleteIfScript     = redis.NewScript(rediscore.DeleteIfScript)
	abandonScript      = redis.NewScript(rediscore.AbandonScript)
	abandonManyScript  = redis.NewScript(rediscore.AbandonManyScript)
	confirmScript      = redis.NewScript(rediscore.ConfirmScript)
	confirmManyScript  = redis.NewScript(rediscore.ConfirmManyScript)
	saveStepScript     = redis.NewScript(rediscore.SaveStepScript)
	loadStepsScript    = redis.NewScript(rediscore.LoadStepsScript)
)

// scripts are loaded together by New, and again by a pipeline that met
// NOSCRIPT.
var scripts = []*redis.Script{
	completeScript, completeManyScript, completeEachScript, releaseScript,
	extendScript, extendManyScript, acquireScript, acquireManyScript,
	deleteIfScript, abandonScript, abandonManyScript, confirmScript, confirmManyScript,
	saveStepScript, loadStepsScript,
}
