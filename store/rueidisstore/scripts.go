package rueidisstore

import (
	"github.com/redis/rueidis"

	"github.com/dedup-go/dedup/store/rediscore"
)

// The scripts, whose sources rediscore keeps for every Redis store: the
// same records and the same Lua as redisstore's. rueidis runs them by SHA
// (EVALSHA), sending the source when the server lost it (NOSCRIPT).
// redisstore's scripts for MinReplicas (abandon, confirm) are left out
// with it.
var (
	completeScript     = rueidis.NewLuaScript(rediscore.CompleteScript)
	completeManyScript = rueidis.NewLuaScript(rediscore.CompleteManyScript)
	completeEachScript = rueidis.NewLuaScript(rediscore.CompleteEachScript)
	releaseScript      = rueidis.NewLuaScript(rediscore.ReleaseScript)
	extendScript       = rueidis.NewLuaScript(rediscore.ExtendScript)
	extendManyScript   = rueidis.NewLuaScript(rediscore.ExtendManyScript)
	acquireScript      = rueidis.NewLuaScript(rediscore.AcquireScript)
	acquireManyScript  = rueidis.NewLuaScript(rediscore.AcquireManyScript)
	deleteIfScript     = rueidis.NewLuaScript(rediscore.DeleteIfScript)
	saveStepScript     = rueidis.NewLuaScript(rediscore.SaveStepScript)
	loadStepsScript    = rueidis.NewLuaScript(rediscore.LoadStepsScript)
)

// sources are the scripts New loads on every node.
var sources = []string{
	rediscore.CompleteScript, rediscore.CompleteManyScript, rediscore.CompleteEachScript,
	rediscore.ReleaseScript, rediscore.ExtendScript, rediscore.ExtendManyScript,
	rediscore.AcquireScript, rediscore.AcquireManyScript, rediscore.DeleteIfScript,
	rediscore.SaveStepScript, rediscore.LoadStepsScript,
}
