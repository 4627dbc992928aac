// Package rediscore is what the Redis stores share, whatever their client:
// the record's layout and codec (record.go), the keys and codec of step
// records (steps.go: a hash per record in its Cluster slot), the Lua
// scripts' sources
// (scripts.go), the arguments of the claim and the scripts, the reading of
// their answers, the checks of a request and the errors of the contract
// (Core), and the shared deadline of calls whose context cannot be
// cancelled (Deadlines).
//
// store/redisstore (go-redis) and store/rueidisstore (rueidis) build on it,
// so that both write and read the same records under the same keys: a user
// may switch clients with no migration, and dedupctl reads either's
// records. Each store sends the commands with its own client and turns its
// client's replies into the plain values this package reads (a string and
// whether it was there, an integer code). It imports no Redis client.
//
// It is a module of its own, so that each Redis store requires the version
// of it that it was built with, whatever version of the core a user
// selects. It is for those stores, not for applications: users see the
// stores' documentation. Its API is checked like every module's (make
// api-check), so a release of it never breaks a store that requires an
// older one.
package rediscore
