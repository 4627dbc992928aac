// Package bench compares dedup with its baselines and its peers in one run.
//
// It holds no library code: its benchmark, BenchmarkTable, runs every row
// of the comparison table in interleaved rounds (baseline, subject;
// subject, baseline; ...), so that a shared, noisy machine slows both sides
// of a pair alike, and prints one markdown table of medians, spreads and
// ratios, which the repository's README quotes:
//
//	go -C bench test -run '^$' -bench Table -benchtime 1x -timeout 30m
//
// BENCH_ROUNDS sets the number of rounds (default 7), BENCH_ROWS a regular
// expression selecting rows by name, and BENCH_OUT a file to write the
// table to as well. The rows that need a service (Redis, NATS, RabbitMQ)
// find it like the tests do, and fail when it is missing.
//
// It is a module of its own so that the peers it measures (Watermill and
// its subscribers) never enter the build of a user of dedup.
package bench
