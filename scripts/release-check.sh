#!/usr/bin/env bash
# Checks that a release of HEAD works for its users, without tagging
# anything in this repository: clones HEAD (no tags) into a temporary
# directory, runs scripts/release.sh VERSION --skip-tests there (so the
# go.mod files and tags are as a release makes them), then, through a
# file:// module proxy holding the tagged versions (tools/releasecheck),
# in fresh modules outside the repository: builds a user program of each
# integration module, go gets every other library module and builds its
# public packages, and installs each command module.
#
# The upgrade run: the version in tools/releasecheck/upgrade-from (0.1.0)
# is released in the same clone by its own commit's scripts/release.sh
# (in a worktree), its tags go into the proxy too, and a user program
# built at that version is upgraded to VERSION: the packages carved out
# of a module since then (middleware/grpc/gateway, store/redisstore) must
# resolve to one module, never "ambiguous import".
#
# Third-party modules come from the machine's module cache, then
# $(go env GOPROXY).
# Usage: scripts/release-check.sh [VERSION] (default v1.0.0-rc.1; GO from
# the environment).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=${1:-v1.0.0-rc.1}
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

# COMMIT VERSION, the one line of the file that is not a comment.
read -r from_commit from_version < <(grep -v -e '^#' -e '^[[:space:]]*$' "$root/tools/releasecheck/upgrade-from")
from=()
if [ "$from_version" = "$version" ]; then
	echo "== release-check: no upgrade run: $version is the version upgraded from"
else
	echo "== release-check: $from_version as released at $(git -C "$tmp/repo" rev-parse --short "$from_commit"): its scripts/release.sh $from_version --skip-tests (in a worktree of the clone)"
	git -C "$tmp/repo" worktree add -q --detach "$tmp/from" "$from_commit"
	GO=$GO "$tmp/from/scripts/release.sh" "$from_version" --skip-tests
	from=(-from "$from_version")
fi

echo "== release-check: users of each library module, from a module proxy"
GOWORK=off "$GO" -C "$root/tools" build -o "$tmp/releasecheck" ./releasecheck
"$tmp/releasecheck" -repo "$tmp/repo" -version "$version" "${from[@]}" -work "$tmp/work"
echo "release-check: ok in $((SECONDS - start))s"
