#!/usr/bin/env bash
# Runs every check of `make test` and every module's tests, whatever fails
# on the way, then prints one line per step and exits non-zero if any
# failed: one flaky module must not hide the results of the others.
# Usage: scripts/test.sh MODULE_DIR... (GO and GOTESTFLAGS from the
# environment; TEST_SKIP="release-check docs-check" skips the steps named).
set -u
cd "$(dirname "$0")/.."
export GO=${GO:-go}
read -r -a flags <<<"${GOTESTFLAGS:--race -count=1 -timeout 30m}"

names=() results=() secs=()
step() { # name command...
	local name=$1 start status
	shift
	if [[ " ${TEST_SKIP:-} " == *" $name "* ]]; then
		names+=("$name") secs+=(0) results+=(skip)
		return
	fi
	echo "== $name"
	start=$SECONDS
	"$@"
	status=$?
	names+=("$name")
	secs+=($((SECONDS - start)))
	if [ $status -eq 0 ]; then results+=(ok); else results+=(FAIL); fi
}

gotest() { (cd "$1" && "$GO" test "${flags[@]}" ./...); }

# make docs-check: the docs' links and programs, and the generated table
# of docs/performance.md.
docs_check() {
	local status=0
	"$GO" -C tools run ./docscheck .. || status=1
	./scripts/perf-table.sh --check || status=1
	return $status
}

step lint ./scripts/lint.sh "$@"
step deps-check ./scripts/deps-check.sh
step release-check ./scripts/release-check.sh
step docs-check docs_check
step api-budget "$GO" -C tools run ./apicount -max 90 ..
step api-check "$GO" -C tools run ./apicheck ..
for m in "$@"; do
	step "go test $m" gotest "$m"
done

echo
echo "== summary"
passed=0 failed=0 skipped=0
for i in "${!names[@]}"; do
	printf '%-5s %-40s %5ss\n' "${results[$i]}" "${names[$i]}" "${secs[$i]}"
	case ${results[$i]} in
	ok) passed=$((passed + 1)) ;;
	skip) skipped=$((skipped + 1)) ;;
	*) failed=$((failed + 1)) ;;
	esac
done
echo "steps: $passed passed, $failed failed, $skipped skipped"
[ $failed -eq 0 ]
