#!/usr/bin/env bash
# Checks that a release of HEAD works for its users, without tagging
# anything in this repository: clones HEAD (no tags) into a temporary
# directory, runs scripts/release.sh VERSION --skip-tests there (so the
# go.mod files and tags are as a release makes them), then builds a user
# program of each integration module in a fresh module outside the
# repository that gets the module from a file:// module proxy holding the
# tagged versions (tools/releasecheck). Third-party modules come from the
# machine's module cache, then $(go env GOPROXY).
# Usage: scripts/release-check.sh [VERSION] (default v0.1.0; GO from the
# environment).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=${1:-v0.1.0}
GO=${GO:-go}
start=$SECONDS
tmp=$(mktemp -d "${TMPDIR:-/tmp}/release-check.XXXXXX")
# The module cache in $tmp is made writable (-modcacherw), but be sure.
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT

echo "== release-check: clone $(git -C "$root" rev-parse --short HEAD) into $tmp/repo"
git -c advice.detachedHead=false clone -q --no-tags "$root" "$tmp/repo"
git -C "$tmp/repo" config user.name release-check
git -C "$tmp/repo" config user.email release-check@localhost
git -C "$tmp/repo" config commit.gpgsign false
git -C "$tmp/repo" config tag.gpgsign false

# --skip-api-check: make test's api-check step checks this tree's API.
echo "== release-check: scripts/release.sh $version --skip-tests --skip-api-check (in the clone)"
GO=$GO "$tmp/repo/scripts/release.sh" "$version" --skip-tests --skip-api-check

echo "== release-check: users of each integration, from a module proxy"
GOWORK=off "$GO" -C "$root/tools" build -o "$tmp/releasecheck" ./releasecheck
"$tmp/releasecheck" -repo "$tmp/repo" -version "$version" -work "$tmp/work"
echo "release-check: ok in $((SECONDS - start))s"
