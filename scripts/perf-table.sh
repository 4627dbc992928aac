#!/usr/bin/env bash
# docs/performance.md's comparison table is generated: this rewrites the
# lines between its markers <!-- perf-table:begin ... --> and
# <!-- perf-table:end --> from run files of BenchmarkTable (BENCH_OUT=*.json)
# and the aims of bench/internal/perf/aims.go; with --check it writes
# nothing and fails when those lines differ from what they give (part of
# make docs-check: no service, a few seconds).
# Usage: scripts/perf-table.sh [--check] [RUN.json...]
#   (default: every bench/results/*.json, in name order)
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
check=()
if [ "${1:-}" = --check ]; then
	check=(-check)
	shift
fi
runs=()
for f in "${@:-bench/results/*.json}"; do
	for g in $f; do
		[ -e "$g" ] || { echo "perf-table: no run file $g" >&2; exit 1; }
		runs+=("$(cd "$(dirname "$g")" && pwd)/$(basename "$g")")
	done
done
exec "$GO" -C bench run ./cmd/perftable -doc "$PWD/docs/performance.md" "${check[@]}" "${runs[@]}"
