// Package overredis holds the tests of tieredstore in front of redisstore
// (conformance, linearizability, the repeated completion, the benchmark).
// They live in this module because the core module, tieredstore's,
// requires no Redis client.
package overredis
