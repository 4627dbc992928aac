#!/usr/bin/env bash
# gofmt over the whole tree, then go vet and staticcheck in every module
# given (staticcheck with its tests, at the version tools/go.mod pins as a
# tool: nothing to install by hand). Any finding fails.
# Usage: scripts/lint.sh MODULE_DIR... (GO from the environment).
set -u
cd "$(dirname "$0")/.."
GO=${GO:-go}
status=0
out=$(gofmt -l .)
if [ -n "$out" ]; then
	echo "gofmt needed:"
	echo "$out"
	status=1
fi
# The tool's binary, built once (and cached by the go command), so that it
# runs in each module's directory against that module's go.mod.
if ! staticcheck=$("$GO" -C tools tool -n staticcheck); then
	echo "staticcheck: cannot build the tool pinned in tools/go.mod"
	staticcheck=
	status=1
fi
for m in "$@"; do
	(cd "$m" && "$GO" vet ./...) || status=1
	if [ -n "$staticcheck" ]; then
		if ! out=$(cd "$m" && "$staticcheck" ./... 2>&1); then
			echo "staticcheck in $m:"
			echo "$out"
			status=1
		fi
	fi
done
exit $status
