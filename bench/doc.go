// Package bench compares dedup with its baselines and its peers in one run.
//
// It holds no library code: its benchmark, BenchmarkTable, runs every row
// of the comparison table in interleaved rounds (baseline, subject;
// subject, baseline; ...), so that a shared, noisy machine slows both sides
// of a pair alike, and prints one markdown table of medians, spreads and
// ratios, which docs/performance.md holds (merged from run files):
//
//	go -C bench test -run '^$' -bench Table -benchtime 1x -timeout 30m
//
// BENCH_ROUNDS sets the number of rounds (default 7), BENCH_ROWS a regular
// expression selecting rows by name, and BENCH_OUT a file to write the
// table to as well; a BENCH_OUT ending in .json gets the run file instead:
// every round of every line of every row run, which the perftable command
// merges. docs/performance.md's table is three whole-table runs merged:
//
//	BENCH_OUT=$PWD/bench/results/run-1.json go -C bench test -run '^$' -bench Table -benchtime 1x -timeout 90m
//	(twice more, run-2.json and run-3.json)
//	scripts/perf-table.sh           # rewrites the table from bench/results/*.json
//	scripts/perf-table.sh --check   # fails if it differs (make docs-check)
//
// Every row's aim is in internal/perf/aims.go, the one place aims are
// written (TestAims fails on a row without one): typed goals, each a line
// of the row, a ratio or value, a comparison and a limit, which the table
// marks met or missed. A broker row over memstore gets a ceiling line:
// memstore's own Acquire + Complete, run each round for the row's number of
// messages, and the ceiling it implies, bare time per message / (bare +
// memstore's). A row with a chunk (the sequential Redis rows) alternates
// its sides every chunk of operations within a round, so that the
// machine's swings of load fall on every side alike. Each line shows the
// spread of its ratio (of its value, on a baseline) over the rounds: the
// interquartile range and the range.
//
// The rows that need a service find it like the tests do, and fail when
// it is missing: RabbitMQ is the shared broker, and
// PostgreSQL and MariaDB the shared databases (each SQL row works in a
// schema or database of its own); Redis, NATS (an embedded nats-server)
// and Kafka (kfake, in process) are started by their rows. The broker rows
// consume fresh messages, published before the clock starts, from a queue,
// stream or topic of each run's own, and fail unless every message was
// handled once. Every broker row times each side from the first message
// handled to the last: connecting, subscribing or joining the consumer
// group before, and the last commit, stopping the consumer and closing
// its connections after, are outside the clock (the verbose output logs
// how long each side's closing took). Each cadence of Kafka commits is its
// own row, with a bare reader committing at the same cadence as its
// baseline and the same reader calling the receiver's Handle as the floor
// of the dedupkafka Consumer; the rows "Kafka consumer on franz-go" do the
// same for the dedupfranz Consumer with a bare franz-go (kgo) group
// consumer at the same cadence, and run dedupkafka's Consumer in the same
// rounds. The Kafka rows add under each side the process's CPU time per
// message (user + sys, kfake's included) over the same span. The outbox
// rows to Kafka measure the relay over dedupkafka's and dedupfranz's
// publishers, each beside a bare loop of its client.
//
// A row's ratio is to its first line, its baseline; a line "A over B" is
// the median of the per-round ratios of side A to side B of the same row,
// and the verbose output (-v) logs every round's value of every side. The
// sequential Redis rows add the client process's CPU per message too.
//
// TestSQLScale is no row of the table: it loads pgstore's and mysqlstore's
// tables to DEDUP_SQL_SCALE records (ten million, say) and measures them
// beside tables of 10,000 records in the same rounds, and skips unless
// that is set, since loading takes minutes (docs/stores.md, "At scale"):
//
//	DEDUP_SQL_SCALE=10000000 go -C bench test -run '^TestSQLScale$' -v -count=1 -timeout 2h
//
// It is a module of its own so that the peers it measures (Watermill and
// its AMQP and Kafka subscribers, sarama, an embedded nats-server, kfake)
// never enter the build of a user of dedup.
package bench
