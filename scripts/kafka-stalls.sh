#!/usr/bin/env bash
# Measures, for both Kafka adapters in one run, what a rebalance and a
# crash cost each partition (issue 41), and prints the figures side by
# side:
#
#   dedupkafka  TestRebalanceStalls (adapters/kafka; part of make test too)
#   dedupfranz  TestStallsJoinKill and TestStallsStaticRestart
#               (adapters/franz; only with DEDUP_KAFKA_STALLS=1)
#
# Both run the same measurement: 12 partitions on an in-process kfake
# cluster, consumer processes (the test binary re-executed) with one
# handler at a time (4ms each), the default 30s lease and a 1s session
# timeout, over a tieredstore in front of the shared Redis (DEDUP_TEST_REDIS,
# 127.0.0.1:6379 by default, under a key prefix of their own); a stream of
# 160 orders/s, three in ten sent again 0.5s later; a and b consume, a
# burst of 1200 orders comes and c joins; 8s later a is SIGKILLed inside a
# handler, holding its key for the rest of its lease; the stream goes on
# until 33s after the kill. dedupfranz also restarts a static member
# (kgo.InstanceID, 10s session timeout) of a group of three; kafka-go has
# no static membership. The adapters run one after the other, not at once.
#
# Each test writes its figures in one line ("STALLS adapter=... key=value
# ..."); the aims are reported by dedupfranz's tests as met or missed, not
# asserted. A test that fails (an order lost or run twice, a partition not
# committed to its end) makes the script fail, after printing what it got.
#
# Usage: scripts/kafka-stalls.sh [runs]   (runs: how many times, 1 by default)
# Environment: GO (go by default); RACE=1 runs the tests under the race
# detector (the figures are then slower); LOGS=dir keeps the tests' output.
set -u
cd "$(dirname "$0")/.."
GO=${GO:-go}
runs=${1:-1}
race=()
[ "${RACE:-}" = 1 ] && race=(-race)
logs=${LOGS:-}
if [ -z "$logs" ]; then
	logs=$(mktemp -d)
	trap 'rm -rf "$logs"' EXIT
fi
mkdir -p "$logs"
status=0

# The rows: a figure's key and what it is.
rows=(
	join_worst "join: longest stall of any partition (aim < 1s)"
	held_partition "kill: the partition whose key the killed consumer held"
	held_after_kill "kill: its order ran this long after the kill"
	rest_of_lease "kill: ... the rest of the lease at the kill"
	held_over_lease "kill: ... past the rest of the lease (aim <= 1s)"
	held_stall "kill: the held partition's longest stall"
	others_worst "kill: every other partition, longest stall (aim < 2s)"
	others_dead_members "kill: ... the killed consumer's other partitions"
	others_survivors "kill: ... the survivors' own partitions"
	orders "orders produced"
	doubles "orders run twice"
	lost "orders never run"
	committed_to_end "every partition committed to its end"
	static_restart "static restart: SIGTERM to the member's first effect again"
	static_restarted_partitions "static restart: its partitions' longest stall"
	static_others_worst "static restart: the other partitions' longest stall"
	static_rebalance_callbacks "static restart: callbacks heard by the other members (0: no rebalance)"
	static_doubles "static restart: orders run twice"
	static_lost "static restart: orders never run"
	static_committed_to_end "static restart: every partition committed to its end"
)

# figures LOG: the key=value pairs of the STALLS lines of LOG, one a line.
figures() {
	grep -o 'STALLS adapter=.*' "$1" | tr ' ' '\n' | grep '=' | grep -v '^adapter='
}

for run in $(seq 1 "$runs"); do
	echo "== run $run of $runs: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
	klog=$logs/kafka-$run.log
	flog=$logs/franz-$run.log
	(cd adapters/kafka && "$GO" test "${race[@]}" -count=1 -run '^TestRebalanceStalls$' -v -timeout 10m .) >"$klog" 2>&1
	kstatus=$?
	(cd adapters/franz && DEDUP_KAFKA_STALLS=1 "$GO" test "${race[@]}" -count=1 -run '^TestStalls(JoinKill|StaticRestart)$' -v -timeout 10m .) >"$flog" 2>&1
	fstatus=$?
	echo "   load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
	declare -A k=() f=()
	while IFS='=' read -r key val; do k[$key]=$val; done < <(figures "$klog")
	while IFS='=' read -r key val; do f[$key]=$val; done < <(figures "$flog")
	printf '%-72s %-12s %-12s\n' "" dedupkafka dedupfranz
	for ((i = 0; i < ${#rows[@]}; i += 2)); do
		key=${rows[i]}
		printf '%-72s %-12s %-12s\n' "${rows[i + 1]}" "${k[$key]:--}" "${f[$key]:--}"
	done
	grep -o 'AIM .*' "$flog" | sed 's/^/   dedupfranz /'
	if [ $kstatus -ne 0 ]; then
		echo "dedupkafka's TestRebalanceStalls failed (exit $kstatus):"
		grep -E -e '--- FAIL|Error|expected|actual' "$klog" | head -30
		status=1
	fi
	if [ $fstatus -ne 0 ]; then
		echo "dedupfranz's stall measurements failed (exit $fstatus):"
		grep -E -e '--- FAIL|Error|expected|actual' "$flog" | head -30
		status=1
	fi
	unset k f
done
exit $status
