#!/usr/bin/env bash
# Tags every library module at VERSION, after making them require VERSION
# of each other (committed) and running make test. Pushes nothing: prints
# the git push command. Refuses a module's incompatible API change with its
# latest tag (or tools/apicheck/base) unless VERSION is a new major version.
# See tools/release/main.go for the details.
# Usage: scripts/release.sh VERSION [--dry-run] [--skip-tests] [--skip-api-check]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
GOWORK=off "${GO:-go}" -C "$root/tools" build -o "$bin/release" ./release
status=0
"$bin/release" -C "$root" "$@" || status=$?
exit $status
