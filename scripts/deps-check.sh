#!/usr/bin/env bash
# Proves, for a user of each library module, that the module graph holds no
# client the user did not ask for, and prints each graph's client list.
#
# For every library module (what tools/internal/repo.Modules calls one: a
# go.mod outside examples/, bench/ and tools/, without the
# "// dedup:test-only" line), a throwaway module outside the repository
# imports every public package of it (no internal, no package main),
# requires it and points every library module at the working tree with
# replace directives, as a user's build would select them. Its
# `go list -m all` (the module graph, which the user's version selection
# reads: a client there can raise the user's own version of it) is
# filtered to the clients below, printed, and checked against the table
# of what the module's purpose needs (allowed). The packages the user
# builds (`go list -deps`) are printed too and checked against the same
# row, without the root module's share: a client may sit in the graph (a
# go.mod's requirement) without being built. A command module (package
# main at its root: cmd/dedupctl) is installed with go install, whose
# graph is its own go.mod's: that is what is listed for it.
#
# It also fails when a library package of one module imports another
# module's internal package (test helpers aside), which would let a release
# of that module break it.
#
# Usage: scripts/deps-check.sh (GO from the environment).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
GO=${GO:-go}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The clients: broker clients and servers, database drivers, Redis
# clients, gRPC and grpc-gateway, the OpenTelemetry SDK. Name, then a
# regular expression on module paths.
clients=(
	nats.go '^github\.com/nats-io/nats\.go$'
	nats-server '^github\.com/nats-io/nats-server/'
	amqp091-go '^github\.com/rabbitmq/amqp091-go$'
	kafka-go '^github\.com/segmentio/kafka-go$'
	franz-go '^github\.com/twmb/franz-go' # kfake, Kafka in process, and its client
	pgx '^github\.com/jackc/pgx/'
	mysql '^github\.com/go-sql-driver/mysql$'
	go-redis '^github\.com/redis/go-redis/'
	rueidis '^github\.com/redis/rueidis$'
	grpc '^google\.golang\.org/grpc$'
	grpc-gateway '^github\.com/grpc-ecosystem/grpc-gateway/'
	otel-sdk '^go\.opentelemetry\.io/otel/sdk'
)

# What the root module (the core) brings into every graph, since every
# module requires it: nothing. Its go.mod requires no client (redisstore,
# on go-redis, is a module of its own), so a pgstore user's graph holds pgx
# alone. Kept as a variable so that a client the core comes to require
# fails every row at once, naming it here.
root_share=""

# The clients each library module's users may find in their graph, the
# root's share aside. A module's go.mod requires what its packages and
# their own unit tests need, so a client its tests alone use shows here,
# with the reason.
declare -A allowed=(
	[.]=""
	[store/redisstore]="go-redis"
	[store/rediscore]=""                           # the Redis stores' shared layout and scripts: no client
	[internal/redistest]="go-redis"                # the tests' Redis servers, shared by the modules below whose tests run Redis
	# The adapters' and the middleware's outage tests run over redisstore
	# (a Redis of their own, killed and restarted): go-redis is in their
	# graph through their go.mod, never built.
	[adapters/nats]="nats.go nats-server go-redis" # nats-server: the tests' embedded server (outages, restarts)
	[adapters/rabbitmq]="amqp091-go go-redis"
	[adapters/kafka]="kafka-go franz-go go-redis"  # franz-go: kfake, the tests' in-process Kafka
	[adapters/franz]="franz-go go-redis"           # franz-go: kgo, and kfake in its tests; go-redis: the stall measurements' consumer processes share a redisstore
	[adapters/redisstream]="go-redis"              # the broker is Redis: go-redis is what the consumer reads streams with
	[store/pgstore]="pgx"
	[store/pgoutbox]="pgx"                         # a broker only through an adapter's OutboxPublisher: its broker tests are store/pgoutbox/e2e
	[store/mysqlstore]="mysql"
	[store/rueidisstore]="rueidis go-redis"        # go-redis: its tests read records redisstore wrote (interop), never built
	[middleware/http]="go-redis"
	[middleware/grpc]="grpc otel-sdk go-redis"     # otel-sdk: google.golang.org/grpc's go.mod requires it (its stats/opentelemetry)
	[middleware/grpc/gateway]="grpc grpc-gateway otel-sdk go-redis"
	[middleware/watermill]="amqp091-go go-redis"   # the package needs Watermill alone; its router tests run watermill-amqp (amqp091-go) and redisstore
	[otel]="otel-sdk"                              # the package uses the API only; its tests record with the SDK, which a user sets up anyway
	# dedupctl: stores on Redis and PostgreSQL, redrive on the three brokers;
	# nats-server through adapters/nats's go.mod, franz-go (kfake) in its
	# tests, grpc in its tests too (otel-sdk through grpc's go.mod).
	[cmd/dedupctl]="go-redis pgx nats.go nats-server amqp091-go kafka-go franz-go grpc otel-sdk"
)

# The library modules, as tools/internal/repo.Modules finds them.
mods=(.)
while IFS= read -r f; do
	d=$(dirname "${f#./}")
	case $d in . | examples | examples/* | bench | bench/* | tools | tools/*) continue ;; esac
	grep -qx '// dedup:test-only' "$root/$d/go.mod" && continue
	mods+=("$d")
done < <(cd "$root" && find . -name go.mod -not -path '*/testdata/*' -not -path '*/vendor/*' -not -path '*/.*/*' -not -path '*/_*/*' | sort)

status=0
fail() {
	echo "deps-check: FAIL: $*" >&2
	status=1
}
for d in "${mods[@]}"; do
	[ -v "allowed[$d]" ] || fail "$d: a library module with no row in deps-check.sh's table of allowed clients"
done
for d in "${!allowed[@]}"; do
	[ -f "$root/$d/go.mod" ] || fail "$d: a row of deps-check.sh's table, but no module there"
done

# clientsOf reads module or package paths on stdin and prints the names of
# the clients among them, sorted.
clientsOf() {
	local input i found=()
	input=$(cat)
	for ((i = 0; i < ${#clients[@]}; i += 2)); do
		if grep -qE "${clients[i + 1]}" <<<"$input"; then found+=("${clients[i]}"); fi
	done
	printf '%s\n' "${found[@]}" | sort | grep . || true
}
# pathsOf prints the module paths of the clients among the modules on stdin.
pathsOf() {
	local input i
	input=$(cat)
	for ((i = 0; i < ${#clients[@]}; i += 2)); do
		grep -E "${clients[i + 1]}" <<<"$input" || true
	done | sort -u | paste -sd' ' -
}
# notIn prints the words of list $1 that are not in list $2.
notIn() {
	local w out=()
	for w in $1; do
		[[ " $2 " == *" $w "* ]] || out+=("$w")
	done
	echo "${out[*]}"
}

rootPath=$(cd "$root" && "$GO" list -m)
for d in "${mods[@]}"; do
	[ -v "allowed[$d]" ] || continue
	dir=$root/$d
	modPath=$(cd "$dir" && GOWORK=off "$GO" list -m)
	if [ -n "$(cd "$dir" && GOWORK=off "$GO" list -f '{{if eq .Name "main"}}main{{end}}' . 2>/dev/null)" ]; then
		# A command: go install builds it with its own go.mod.
		who="$d (go install)"
		graph=$(cd "$dir" && GOWORK=off "$GO" list -m all)
		built=$(cd "$dir" && GOWORK=off "$GO" list -deps -f '{{with .Module}}{{.Path}}{{end}}' . | sort -u)
	else
		who="$d user"
		u=$tmp/user-${d//\//-}
		mkdir -p "$u"
		pkgs=$(cd "$dir" && GOWORK=off "$GO" list -e -f '{{if and .GoFiles (ne .Name "main")}}{{.ImportPath}}{{end}}' ./... | grep -v '/internal\(/\|$\)' || true)
		{
			printf 'module example.com/depscheck/user\n\ngo 1.26.0\n\nrequire %s v0.0.0-00010101000000-000000000000\n\n' "$modPath"
			for m in "${mods[@]}"; do
				p=$rootPath
				[ "$m" = . ] || p=$rootPath/$m
				printf 'replace %s => %s\n' "$p" "$root/$m"
			done
		} >"$u/go.mod"
		# The modules' go.sum lines spare the checksum database lookups.
		for f in "$root/go.sum" "$dir/go.sum"; do [ ! -f "$f" ] || cat "$f"; done | sort -u >"$u/go.sum"
		{
			printf 'package main\n\nimport (\n'
			for p in $pkgs; do printf '\t_ "%s"\n' "$p"; done
			printf ')\n\nfunc main() {}\n'
		} >"$u/main.go"
		if ! (cd "$u" && GOWORK=off GOFLAGS=-mod=mod "$GO" mod tidy >"$u/tidy.log" 2>&1 && GOWORK=off "$GO" build -o /dev/null .); then
			cat "$u/tidy.log" >&2
			fail "$who: a program importing $modPath's packages does not build"
			continue
		fi
		graph=$(cd "$u" && GOWORK=off "$GO" list -m all)
		built=$(cd "$u" && GOWORK=off "$GO" list -deps -f '{{with .Module}}{{.Path}}{{end}}' . | sort -u)
	fi
	inGraph=$(clientsOf <<<"$(cut -d' ' -f1 <<<"$graph")" | paste -sd' ' -)
	inBuild=$(clientsOf <<<"$built" | paste -sd' ' -)
	echo "$who: clients in graph: $(pathsOf <<<"$(cut -d' ' -f1 <<<"$graph")")"
	echo "$who: clients built:    $(pathsOf <<<"$built")"
	ok="${allowed[$d]} $root_share"
	bad=$(notIn "$inGraph" "$ok")
	[ -z "$bad" ] || fail "$who: the module graph holds $bad, which $d does not need (allowed: ${ok# })"
	bad=$(notIn "$inBuild" "${allowed[$d]}")
	[ -z "$bad" ] || fail "$who: the build holds $bad, which $d does not need (allowed: ${allowed[$d]:-none})"
done
# No library package of one module imports another module's internal
# package: a release of that module could break it. Test helpers shared by
# several modules' tests (a package under internal/ whose name ends in
# "test", or testenv) may.
# Every module of the repository (examples, tools and test-only ones too),
# by path, read once.
mapfile -t modPaths < <(cd "$root" && find . -name go.mod -not -path './.git/*' -printf '%h\n' | sed "s#^\.#$rootPath#")
# ownerOf prints the module of this repository that holds package $1: the
# longest module path that is a prefix of it.
ownerOf() {
	local p=$1 best="" m
	for m in "${modPaths[@]}"; do
		if [[ $p == "$m" || $p == "$m"/* ]] && [ ${#m} -gt ${#best} ]; then best=$m; fi
	done
	echo "$best"
}
crossings=0
for d in "${mods[@]}"; do
	dir=$root/$d
	modPath=$(cd "$dir" && GOWORK=off "$GO" list -m)
	while read -r pkg imports; do
		base=${pkg##*/}
		if [[ $pkg == */internal/* && ( $base == *test || $base == testenv ) ]]; then continue; fi
		for imp in $imports; do
			[[ $imp == "$rootPath"/*internal* ]] || continue
			[[ $imp == */internal || $imp == */internal/* ]] || continue
			owner=$(ownerOf "$imp")
			if [ "$owner" != "$modPath" ]; then
				fail "$pkg (module $modPath) imports $imp, an internal package of module $owner"
				crossings=$((crossings + 1))
			fi
		done
	done < <(cd "$dir" && GOWORK=off "$GO" list -e -f '{{.ImportPath}}{{range .Imports}} {{.}}{{end}}' ./...)
done
echo "deps-check: $crossings library packages import another module's internal package"

if [ $status -eq 0 ]; then
	echo "deps-check: ok, ${#mods[@]} library modules: no user's module graph holds a client its module does not need"
fi
exit $status
