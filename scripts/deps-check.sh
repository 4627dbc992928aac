#!/usr/bin/env bash
# Builds a throwaway module that imports only the core (the root package and
# store/redisstore), as a user of the core would, and fails if its build
# list (go list -m all) holds a broker client, nats-server, or a client of
# an integration that has a module of its own.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cat >"$tmp/go.mod" <<MOD
module example.com/coreuser

go 1.26.0

require github.com/dedup-go/dedup v0.0.0-00010101000000-000000000000

replace github.com/dedup-go/dedup => $root
MOD
cat >"$tmp/main.go" <<'SRC'
package main

import (
	"context"

	"github.com/dedup-go/dedup"
	"github.com/dedup-go/dedup/store/redisstore"
	"github.com/redis/go-redis/v9"
)

func main() {
	s, err := redisstore.New(context.Background(), redis.NewClient(&redis.Options{}), nil)
	if err != nil {
		return
	}
	_, _ = dedup.NewReceiver(s, func(m *dedup.Message[[]byte]) (string, error) { return m.ID, nil },
		func(ctx context.Context, m *dedup.Message[[]byte]) (struct{}, error) { return struct{}{}, nil }, nil)
}
SRC
cd "$tmp"
go mod tidy >/dev/null
go build ./...
mods=$(go list -m all)
echo "deps-check: a module importing only the core builds with:"
printf '%s\n' "$mods" | sed 's/^/  /'
bad=$(printf '%s\n' "$mods" | grep -E 'nats-io|rabbitmq|amqp|segmentio/kafka|twmb/franz|jackc/pgx|go-sql-driver/mysql|google.golang.org/grpc|go.opentelemetry.io|redis/rueidis' || true)
if [ -n "$bad" ]; then
	echo "deps-check: FAIL: the core pulls in integration dependencies:" >&2
	printf '%s\n' "$bad" >&2
	exit 1
fi
echo "deps-check: ok, no broker client, nats-server, pgx, the MySQL driver, gRPC or rueidis"

# An integration pulls in only what its users need: the HTTP middleware only
# the standard library and the core, the gRPC interceptor no grpc-gateway
# (its gateway subpackage does). Checked on the packages a program importing
# it builds, since a module's go.mod also lists what its tests use.
pkgcheck() { # module-dir import-path forbidden-regex what
	local dir=$1 pkg=$2 bad=$3 what=$4 t
	[ -f "$root/$dir/go.mod" ] || return 0
	t=$(mktemp -d)
	cat >"$t/go.mod" <<MOD
module example.com/user

go 1.26.0

require (
	github.com/dedup-go/dedup v0.0.0-00010101000000-000000000000
	github.com/dedup-go/dedup/$dir v0.0.0-00010101000000-000000000000
)

replace github.com/dedup-go/dedup => $root
MOD
	# Every module of the repository it may require (pgoutbox requires
	# pgstore) comes from its directory.
	local m
	for m in $(cd "$root" && find adapters store middleware otel cmd -name go.mod -not -path '*/testdata/*' -exec dirname {} \;); do
		echo "replace github.com/dedup-go/dedup/$m => $root/$m" >>"$t/go.mod"
	done
	printf 'package main\n\nimport _ "%s"\n\nfunc main() {}\n' "$pkg" >"$t/main.go"
	(cd "$t" && go mod tidy >/dev/null 2>&1 && go build ./...) || { echo "deps-check: FAIL: a program importing $pkg does not build" >&2; rm -rf "$t"; exit 1; }
	local found
	found=$(cd "$t" && go list -deps ./... | grep -E "$bad" || true)
	rm -rf "$t"
	if [ -n "$found" ]; then
		echo "deps-check: FAIL: $pkg pulls in $what:" >&2
		printf '%s\n' "$found" >&2
		exit 1
	fi
	echo "deps-check: ok, $pkg builds without $what"
}
pkgcheck middleware/http github.com/dedup-go/dedup/middleware/http '^(google\.golang\.org|github\.com/grpc-ecosystem|github\.com/redis|github\.com/nats-io|github\.com/rabbitmq)' "gRPC, Redis or a broker client"
pkgcheck middleware/grpc github.com/dedup-go/dedup/middleware/grpc '^github\.com/grpc-ecosystem' "grpc-gateway"
pkgcheck store/rueidisstore github.com/dedup-go/dedup/store/rueidisstore '^github\.com/redis/go-redis' "go-redis (a rueidis user builds one Redis client)"
pkgcheck store/pgoutbox github.com/dedup-go/dedup/store/pgoutbox '^(github\.com/nats-io|github\.com/rabbitmq|github\.com/segmentio|github\.com/twmb)' "a broker client"
