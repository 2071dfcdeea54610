# shellcheck shell=bash
# Functions that start and stop the servers the tests need, on loopback
# ports, in a scratch directory. Sourced by scripts/test.sh and bench scripts.
#
#   services_init            make the scratch directory, arm the cleanup trap
#   start_postgres           PostgreSQL 15 -> exports IDEM_TEST_POSTGRES_URL
#                            (fsync off for tests; PG_DURABLE=1 keeps fsync and
#                            synchronous_commit on, as benchmarks need)
#   start_redis              standalone Redis -> exports IDEM_TEST_REDIS_URL
#   start_redis_cluster      3-master Redis Cluster -> exports IDEM_TEST_REDIS_CLUSTER_ADDRS
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

# free_port prints a loopback TCP port nobody listens on, below the usual
# ephemeral range (32768-60999) where a client socket could hold it.
free_port() {
	local port
	for _ in $(seq 1 100); do
		port=$((23000 + RANDOM % 9000))
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
	log "initializing PostgreSQL in $dir"
	as_service_user "$PG_BIN/initdb" -D "$dir/data" -U idem --auth=trust --no-sync -E UTF8 >"$dir/initdb.log" 2>&1 ||
		{ cat "$dir/initdb.log" >&2; return 1; }
	local try durability="-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
	[ "${PG_DURABLE:-0}" = 1 ] && durability="-c fsync=on -c synchronous_commit=on"
	for try in 1 2 3; do # a port found free can be taken before the server binds it
		port=$(free_port)
		log "starting PostgreSQL on 127.0.0.1:$port ($durability)"
		as_service_user "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start \
			-o "-c listen_addresses=127.0.0.1 -p $port -k $dir/sock $durability -c max_connections=300" \
			>/dev/null && break
		[ "$try" -eq 3 ] && { cat "$dir/server.log" >&2; return 1; }
	done
	_started+=("postgres")
	PG_PORT=$port
	export IDEM_TEST_POSTGRES_URL="postgres://idem@127.0.0.1:$port/postgres?sslmode=disable"
}

stop_postgres() {
	as_service_user "$PG_BIN/pg_ctl" -D "$SERVICES_DIR/pg/data" -m immediate -w stop >/dev/null 2>&1 || true
}

# ensure_packages installs, in one apt-get run, the Debian packages whose
# commands are missing; each argument is COMMAND:PACKAGE. CI runs as root on a
# fresh machine. A package's service that apt starts (redis-server's system
# instance on port 6379, which the tests never use) is stopped, so that nothing
# we caused outlives the script.
ensure_packages() {
	local spec missing=()
	for spec in "$@"; do
		command -v "${spec%%:*}" >/dev/null 2>&1 || missing+=("${spec#*:}")
	done
	[ ${#missing[@]} -eq 0 ] && return
	[ "$(id -u)" -eq 0 ] || { echo "missing commands; install: ${missing[*]}" >&2; return 1; }
	local apt_log="${SERVICES_DIR:-${TMPDIR:-/tmp}}/apt.$$.log"
	log "installing ${missing[*]}"
	apt-get update -qq >"$apt_log" 2>&1 &&
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >>"$apt_log" 2>&1 ||
		{ cat "$apt_log" >&2; return 1; }
	service redis-server stop >/dev/null 2>&1 || true
}

# ensure_redis installs redis-server (and redis-cli) when missing.
ensure_redis() {
	ensure_packages redis-server:redis-server redis-cli:redis-server
}

# redis_port prints a loopback port for a Redis node such that the port and
# its cluster-bus port (port+10000) are both free and not in "$@". Both lie
# below the usual ephemeral range (32768-60999), where a client socket's
# local port would make bind fail although nobody listens.
redis_port() {
	local port
	for _ in $(seq 1 200); do
		port=$((10000 + RANDOM % 12700))
		[[ " $* " == *" $port "* || " $* " == *" $((port + 10000)) "* ]] && continue
		(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && continue
		(exec 3<>"/dev/tcp/127.0.0.1/$((port + 10000))") 2>/dev/null && continue
		echo "$port"
		return
	done
	echo "no free port for Redis found" >&2
	return 1
}

# redis_node starts one redis-server in the background on 127.0.0.1:port
# with its files in dir (no persistence, not daemonized: its pid is tracked
# and services_stop stops it) and waits until it answers. Extra arguments go
# to redis-server. It fails quietly (the log is in dir/redis.log).
redis_node() {
	local dir=$1 port=$2
	shift 2
	mkdir -p "$dir"
	redis-server --bind 127.0.0.1 --port "$port" --dir "$dir" --daemonize no \
		--save '' --appendonly no --logfile "$dir/redis.log" "$@" &
	local pid=$!
	_redis_pids+=("$pid")
	for _ in $(seq 1 100); do
		redis-cli -h 127.0.0.1 -p "$port" ping >/dev/null 2>&1 && return
		kill -0 "$pid" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

# redis_node_anyport starts a node like redis_node in dir/<port>, on a port
# from redis_port that avoids the ports listed in $2, retrying on another
# port when the bind fails; the port is left in _redis_port. (No command
# substitution: the server must be a child of this shell, for its pid.)
_redis_port=""
redis_node_anyport() {
	local dir=$1 avoid=$2 port=""
	shift 2
	for _ in 1 2 3 4 5; do
		# shellcheck disable=SC2086 # $avoid is a list of ports
		port=$(redis_port $avoid) || return 1
		rm -rf "${dir:?}/$port"
		if redis_node "$dir/$port" "$port" "$@"; then
			_redis_port=$port
			return
		fi
	done
	echo "redis-server did not start on 5 ports; last log:" >&2
	cat "$dir/$port/redis.log" >&2 || true
	return 1
}

_redis_pids=()

_mark_started() {
	[[ " ${_started[*]} " == *" $1 "* ]] || _started+=("$1")
}

start_redis() {
	ensure_redis
	_mark_started redis
	local port
	redis_node_anyport "$SERVICES_DIR/redis" ""
	port=$_redis_port
	log "started Redis on 127.0.0.1:$port"
	export IDEM_TEST_REDIS_URL="redis://127.0.0.1:$port/0"
}

start_redis_cluster() {
	ensure_redis
	_mark_started redis
	local i port addrs=() ports=() taken=""
	for i in 1 2 3; do
		redis_node_anyport "$SERVICES_DIR/redis-cluster" "$taken" \
			--cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 5000
		port=$_redis_port
		ports+=("$port")
		taken="$taken $port $((port + 10000))"
		addrs+=("127.0.0.1:$port")
	done
	log "creating a Redis Cluster of 3 masters on ${addrs[*]}"
	redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes >"$SERVICES_DIR/redis-cluster/create.log" 2>&1 ||
		{ cat "$SERVICES_DIR/redis-cluster/create.log" >&2; return 1; }
	for port in "${ports[@]}"; do
		for i in $(seq 1 200); do
			redis-cli -h 127.0.0.1 -p "$port" cluster info 2>/dev/null | grep -q '^cluster_state:ok' && break
			[ "$i" -eq 200 ] && { echo "Redis Cluster node $port never reached cluster_state:ok" >&2; return 1; }
			sleep 0.1
		done
	done
	export IDEM_TEST_REDIS_CLUSTER_ADDRS
	IDEM_TEST_REDIS_CLUSTER_ADDRS=$(IFS=,; echo "${addrs[*]}")
}

stop_redis() {
	local pid
	for pid in "${_redis_pids[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${_redis_pids[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	_redis_pids=()
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
