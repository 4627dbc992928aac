#!/usr/bin/env bash
# Makes sure the local services the test suite talks to are running on their
# standard ports, starting them (or installing them from Debian's packages)
# when they are not. Usage: scripts/services.sh [redis] [postgres] [nats]
# [rabbitmq] [prometheus] [mariadb] (no argument: all of them). A service that cannot
# be brought up is reported; the tests that need it then skip, or fail under
# DEDUP_TEST_REQUIRE=1.
set -u

log() { printf 'services: %s\n' "$*" >&2; }

up() { # host port
	(exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
}

wait_up() { # name port seconds
	local i
	for ((i = 0; i < $3 * 2; i++)); do
		if up 127.0.0.1 "$2"; then
			log "$1 is up on 127.0.0.1:$2"
			return 0
		fi
		sleep 0.5
	done
	log "$1 did not come up on 127.0.0.1:$2 within $3s"
	return 1
}

apt_updated=
install() { # package...
	if ! command -v apt-get >/dev/null; then
		log "cannot install $*: no apt-get"
		return 1
	fi
	local sudo=
	[ "$(id -u)" -eq 0 ] || sudo=sudo
	if [ -z "$apt_updated" ]; then
		$sudo apt-get update -qq >&2 || return 1
		apt_updated=1
	fi
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >&2
}

redis() {
	# The binaries are needed even when a Redis is up: the outage and Cluster
	# tests start redis-server instances of their own and use redis-cli.
	{ command -v redis-server && command -v redis-cli; } >/dev/null || install redis-server redis-tools || return 1
	up 127.0.0.1 6379 && return 0
	mkdir -p /var/lib/redis /var/log/redis 2>/dev/null
	redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
		--dir /var/lib/redis --logfile /var/log/redis/ci.log >&2
	wait_up redis 6379 30
}

postgres() {
	up 127.0.0.1 5432 && return 0
	[ -d /etc/postgresql ] && [ -n "$(ls /etc/postgresql 2>/dev/null)" ] || install postgresql || return 1
	pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n 1)" main start >&2
	wait_up postgres 5432 60
}

nats() {
	up 127.0.0.1 4222 && return 0
	[ -x /usr/sbin/nats-server ] || install nats-server || return 1
	mkdir -p /var/lib/nats-server
	start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- \
		-a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log >&2
	wait_up nats 4222 30
}

rabbitmq() {
	up 127.0.0.1 5672 && return 0
	command -v rabbitmq-server >/dev/null || install rabbitmq-server || return 1
	rabbitmq-server -detached >&2
	local i
	for ((i = 0; i < 60; i++)); do
		rabbitmqctl await_startup >/dev/null 2>&1 && break
		sleep 2
	done
	wait_up rabbitmq 5672 10
}

prometheus() {
	# Only the programs: the observability example's test starts a
	# prometheus of its own on a free port, and runs promtool on the rules.
	# No server is left running on 9090.
	{ command -v prometheus && command -v promtool; } >/dev/null && return 0
	local running=
	pgrep -x prometheus >/dev/null && running=1
	install --no-install-recommends prometheus || return 1
	[ -n "$running" ] && return 0
	# Where an init system lets it, the package's postinst starts its
	# service: stop that one (and only if none ran before the install).
	local sudo=
	[ "$(id -u)" -eq 0 ] || sudo=sudo
	if [ -d /run/systemd/system ]; then
		$sudo systemctl disable --now prometheus >/dev/null 2>&1 || true
	elif [ -x /etc/init.d/prometheus ]; then
		$sudo /etc/init.d/prometheus stop >/dev/null 2>&1 || true
	fi
	local pid
	for pid in $(pgrep -x prometheus); do
		log "stopping the prometheus (pid $pid) its package started"
		$sudo kill "$pid"
	done
	return 0
}

# The tests' database and user on MariaDB, over TCP (root logs in over the
# unix socket only): store/mysqlstore's tests connect as them, and make a
# database of their own (dedup_test_*) per test, and users of their own
# for the privilege tests. DEDUP_TEST_MYSQL points them elsewhere.
MARIADB_TEST_DB=dedup_test
MARIADB_TEST_USER=dedup
MARIADB_TEST_PASSWORD=dedup

mariadb() {
	# The programs are needed even when a server is up: the restart test of
	# store/mysqlstore starts a mariadbd of its own (mariadb-install-db).
	{ [ -x /usr/sbin/mariadbd ] && command -v mariadb-install-db && command -v mariadb; } >/dev/null ||
		install mariadb-server mariadb-client || return 1
	if ! up 127.0.0.1 3306; then
		mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld 2>/dev/null
		if [ ! -d /var/lib/mysql/mysql ]; then
			mariadb-install-db --user=mysql --datadir=/var/lib/mysql --skip-test-db >&2 || return 1
		fi
		start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd >&2
		wait_up mariadb 3306 60 || return 1
	fi
	# As root, over the unix socket; idempotent.
	command mariadb --protocol=socket -u root >&2 <<SQL || { log "mariadb: could not prepare the tests' database and user"; return 1; }
CREATE DATABASE IF NOT EXISTS \`$MARIADB_TEST_DB\`;
CREATE USER IF NOT EXISTS '$MARIADB_TEST_USER'@'127.0.0.1' IDENTIFIED BY '$MARIADB_TEST_PASSWORD';
CREATE USER IF NOT EXISTS '$MARIADB_TEST_USER'@'localhost' IDENTIFIED BY '$MARIADB_TEST_PASSWORD';
ALTER USER '$MARIADB_TEST_USER'@'127.0.0.1' IDENTIFIED BY '$MARIADB_TEST_PASSWORD';
ALTER USER '$MARIADB_TEST_USER'@'localhost' IDENTIFIED BY '$MARIADB_TEST_PASSWORD';
GRANT ALL PRIVILEGES ON \`dedup\\_test%\`.* TO '$MARIADB_TEST_USER'@'127.0.0.1' WITH GRANT OPTION;
GRANT ALL PRIVILEGES ON \`dedup\\_test%\`.* TO '$MARIADB_TEST_USER'@'localhost' WITH GRANT OPTION;
GRANT CREATE USER, PROCESS ON *.* TO '$MARIADB_TEST_USER'@'127.0.0.1';
GRANT CREATE USER, PROCESS ON *.* TO '$MARIADB_TEST_USER'@'localhost';
SQL
	log "mariadb: database $MARIADB_TEST_DB and user $MARIADB_TEST_USER ready on 127.0.0.1:3306"
}

status=0
for svc in "${@:-redis postgres nats rabbitmq prometheus mariadb}"; do
	for s in $svc; do
		"$s" || { log "$s is not available"; status=1; }
	done
done
exit $status
