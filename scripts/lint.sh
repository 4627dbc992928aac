#!/usr/bin/env bash
# gofmt over the whole tree, and go vet in every module given.
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
for m in "$@"; do
	(cd "$m" && "$GO" vet ./...) || status=1
done
exit $status
