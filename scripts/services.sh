# shellcheck shell=bash
# Functions that start and stop the servers the tests need, on loopback
# ports, in a scratch directory. Sourced by scripts/test.sh and bench scripts.
#
#   services_init            make the scratch directory, arm the cleanup trap
#   start_postgres           PostgreSQL 15 -> exports IDEM_TEST_POSTGRES_URL
#   services_stop            stop everything started (also on exit)

PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
SERVICES_DIR=""
SERVICES_USER=""
_started=()

log() { printf '%s %s\n' "[$(date +%H:%M:%S)]" "$*" >&2; }

services_init() {
	SERVICES_DIR=$(mktemp -d "${TMPDIR:-/tmp}/idem-services.XXXXXX")
	chmod 755 "$SERVICES_DIR"
	trap services_stop EXIT
	trap 'exit 130' INT TERM
}

# as_service_user runs a command as an unprivileged user when we are root
# (initdb and postgres refuse to run as root).
as_service_user() {
	if [ "$(id -u)" -ne 0 ]; then
		"$@"
		return
	fi
	if [ -z "$SERVICES_USER" ]; then
		if id -u postgres >/dev/null 2>&1; then
			SERVICES_USER=postgres
		else
			id -u idemtest >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin idemtest
			SERVICES_USER=idemtest
		fi
	fi
	runuser -u "$SERVICES_USER" -- "$@"
}

# free_port prints a loopback TCP port nobody listens on.
free_port() {
	local port
	for _ in $(seq 1 100); do
		port=$((20000 + RANDOM % 30000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "$port"
			return
		fi
	done
	echo "no free port found" >&2
	return 1
}

start_postgres() {
	[ -x "$PG_BIN/initdb" ] || { echo "PostgreSQL binaries not found in $PG_BIN" >&2; return 1; }
	local dir="$SERVICES_DIR/pg" port
	mkdir -p "$dir/data" "$dir/sock"
	[ "$(id -u)" -eq 0 ] && { as_service_user true; chown -R "$SERVICES_USER" "$dir"; }
	port=$(free_port)
	log "starting PostgreSQL on 127.0.0.1:$port"
	as_service_user "$PG_BIN/initdb" -D "$dir/data" -U idem --auth=trust --no-sync -E UTF8 >"$dir/initdb.log" 2>&1 ||
		{ cat "$dir/initdb.log" >&2; return 1; }
	as_service_user "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start \
		-o "-c listen_addresses=127.0.0.1 -p $port -k $dir/sock -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" \
		>/dev/null || { cat "$dir/server.log" >&2; return 1; }
	_started+=("postgres")
	export IDEM_TEST_POSTGRES_URL="postgres://idem@127.0.0.1:$port/postgres?sslmode=disable"
}

stop_postgres() {
	as_service_user "$PG_BIN/pg_ctl" -D "$SERVICES_DIR/pg/data" -m immediate -w stop >/dev/null 2>&1 || true
}

services_stop() {
	local s
	for s in "${_started[@]}"; do
		"stop_$s" || true
	done
	_started=()
	[ -n "$SERVICES_DIR" ] && rm -rf "$SERVICES_DIR"
	SERVICES_DIR=""
}
