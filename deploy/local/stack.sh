#!/usr/bin/env bash
# keelson's local stack: a throwaway PostgreSQL cluster and Redis from the
# machine's packages, the broker, N replicas of every service and the gateway, all on
# 127.0.0.1, everything (data, logs, pids) under one folder.
#
#   stack.sh start --dir DIR --bin BUILD_DIR [--free-ports] [--auth-replicas N]
#                  [--billing-replicas N] [--ledger-replicas N] [--summary-replicas N]
#                  [--webhook-replicas N] [--gateway-port P]
#                  [--gateway-replicas N] [--broker-replicas N] [--keep-data] [--unsafe-fast]
#                  [--tcp]
#   stack.sh run   (same options)   start, print a curl example, wait for Ctrl-C, stop
#   stack.sh stop  --dir DIR         stop what DIR/pids names, then PostgreSQL
#   stack.sh status --dir DIR        which of the started processes still run
#   stack.sh restart --dir DIR NAME [--signal TERM|KILL]
#                                    stop one process (auth-2, broker-2, gateway-1,
#                                    ...; TERM: graceful, the default) and start it
#                                    again as start did; exits 0 once it is ready
#   stack.sh ensure-packages         install deploy/local/packages.txt (root) or say how
#   stack.sh curl-example [--dir DIR]
#   stack.sh redis-stop --dir DIR    stop the stack's Redis (tests of the fallback)
#   stack.sh redis-start --dir DIR   start it again on the same port
#   stack.sh pg-crash --dir DIR      stop PostgreSQL as a crash would (pg_ctl -m immediate)
#   stack.sh pg-start --dir DIR      start it again on the same port and data
#
# PostgreSQL runs durable (fsync, synchronous_commit and full_page_writes on,
# as in production): a write it acknowledged survives a crash. --unsafe-fast
# turns all three off, for throwaway benchmark and test clusters only: a
# crash of PostgreSQL then loses acknowledged writes.
#
# The services reach PostgreSQL through its unix socket (local_dsn), and the
# brokers through theirs (ipc://, broker_url; each broker listens on TCP
# too, for tests and tools), or over 127.0.0.1 with --tcp: for services that
# do not share this machine's files, such as the container smoke test's
# (deploy/container/smoke.sh).
#
# start writes DIR/env, KEY=value lines the integration tests read
# (tests/integration/it_support.c). Without --keep-data the cluster and Redis
# data are recreated on every start: this stack is for development and tests,
# never for data anyone wants to keep.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PACKAGES_FILE="$SCRIPT_DIR/packages.txt"

READY_TIMEOUT_S=60 # every /readyz must answer 200 within this
STOP_TIMEOUT_S=10  # SIGTERM grace before SIGKILL
RESTART_TRIES=3    # restart: starts of a process that exits at once
BROKER_SPAN=42     # the broker uses base .. base+41 (services/core/ks_topology.h)
AUTH_REPLICAS_MAX=8
# Auth replicas share this machine's cores, so each hashes on one thread
# unless the environment says otherwise. Every other KEELSON_* variable in
# the caller's environment reaches the services unchanged (the test fixture
# shortens the lockout that way: tests/CMakeLists.txt). Webhook deliveries
# may reach 127.0.0.1 here (KEELSON_WEBHOOK_DELIVERY_ALLOW), so that a
# receiver on this machine can be tried; set the variable to override.
BILLING_REPLICAS_MAX=8
WEBHOOK_REPLICAS_MAX=8
LEDGER_REPLICAS_MAX=8
SUMMARY_REPLICAS_MAX=8
GATEWAY_REPLICAS_MAX=8
BROKER_REPLICAS_MAX=4
# Random ports come from below Linux's ephemeral range (32768-60999), so an
# outgoing connection cannot take one between our check and the bind.
FREE_PORT_LO=15000
FREE_PORT_HI=32000

DIR=""
BIN=""
FREE_PORTS=0
AUTH_REPLICAS=1
BILLING_REPLICAS=1
WEBHOOK_REPLICAS=1
LEDGER_REPLICAS=1
SUMMARY_REPLICAS=1
GATEWAY_PORT=""
GATEWAY_REPLICAS=1
BROKER_REPLICAS=1
GATEWAY_PORTS=() # one per replica; the first is GATEWAY_PORT
KEEP_DATA=0
UNSAFE_FAST=0 # --unsafe-fast: PostgreSQL without fsync, synchronous_commit, full_page_writes
TCP_ONLY=0    # --tcp: the services reach PostgreSQL and the brokers over 127.0.0.1, no socket

PG_PORT=55432
REDIS_PORT=56379
BROKER_BASE=7400
BROKER_HEALTH_PORT=7480
# Brokers 2..4 without --free-ports: spans from 7600, health ports from 7531.
BROKER_EXTRA_BASE=7600
BROKER_EXTRA_HEALTH_BASE=7531
BROKER_BASES=()        # one per broker; the first is BROKER_BASE
BROKER_HEALTH_PORTS=() # one per broker; the first is BROKER_HEALTH_PORT
AUTH_HEALTH_BASE=7481
AUTH_HEALTH_PORTS=()
LEDGER_HEALTH_BASE=7491
LEDGER_HEALTH_PORTS=()
SUMMARY_HEALTH_BASE=7501
SUMMARY_HEALTH_PORTS=()
BILLING_HEALTH_BASE=7511
BILLING_HEALTH_PORTS=()
WEBHOOK_HEALTH_BASE=7521
WEBHOOK_HEALTH_PORTS=()
GATEWAY_ADMIN_BASE=7470 # /healthz, /readyz, /metrics of each gateway replica
GATEWAY_ADMIN_PORTS=()
USED_PORTS=()
STARTED=0 # set once start began launching things: a failure then cleans up

log() { printf 'stack: %s\n' "$*" >&2; }
die() {
        log "error: $*"
        exit 1
}

usage() {
        sed -n '2,/^set -euo/{/^#/p}' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

# ---- arguments ---------------------------------------------------------------

parse_args() {
        while [ $# -gt 0 ]; do
                case "$1" in
                --dir) DIR=${2:?--dir needs a value}; shift 2 ;;
                --bin) BIN=${2:?--bin needs a value}; shift 2 ;;
                --free-ports) FREE_PORTS=1; shift ;;
                --auth-replicas) AUTH_REPLICAS=${2:?--auth-replicas needs a value}; shift 2 ;;
                --billing-replicas) BILLING_REPLICAS=${2:?--billing-replicas needs a value}; shift 2 ;;
                --webhook-replicas) WEBHOOK_REPLICAS=${2:?--webhook-replicas needs a value}; shift 2 ;;
                --ledger-replicas) LEDGER_REPLICAS=${2:?--ledger-replicas needs a value}; shift 2 ;;
                --summary-replicas) SUMMARY_REPLICAS=${2:?--summary-replicas needs a value}; shift 2 ;;
                --gateway-port) GATEWAY_PORT=${2:?--gateway-port needs a value}; shift 2 ;;
                --gateway-replicas) GATEWAY_REPLICAS=${2:?--gateway-replicas needs a value}; shift 2 ;;
                --broker-replicas) BROKER_REPLICAS=${2:?--broker-replicas needs a value}; shift 2 ;;
                --keep-data) KEEP_DATA=1; shift ;;
                --unsafe-fast) UNSAFE_FAST=1; shift ;;
                --tcp) TCP_ONLY=1; shift ;;
                -h | --help) usage; exit 0 ;;
                *) die "unknown option: $1 (see --help)" ;;
                esac
        done
        [ -n "$DIR" ] || die "--dir is required"
        mkdir -p "$DIR"
        DIR=$(cd "$DIR" && pwd)
}

check_start_args() {
        [ -n "$BIN" ] || die "--bin BUILD_DIR is required"
        BIN=$(cd "$BIN" 2>/dev/null && pwd) || die "--bin: no such folder"
        local b
        for b in keelson-broker keelson-auth keelson-billing keelson-ledger keelson-summary \
                keelson-webhook keelson-gateway; do
                [ -x "$BIN/$b" ] || die "$BIN/$b is missing: build first (make)"
        done
        case "$AUTH_REPLICAS" in
        '' | *[!0-9]*) die "--auth-replicas must be a number" ;;
        esac
        if [ "$AUTH_REPLICAS" -lt 1 ] || [ "$AUTH_REPLICAS" -gt "$AUTH_REPLICAS_MAX" ]; then
                die "--auth-replicas must be within 1..$AUTH_REPLICAS_MAX"
        fi
        case "$BILLING_REPLICAS" in
        '' | *[!0-9]*) die "--billing-replicas must be a number" ;;
        esac
        if [ "$BILLING_REPLICAS" -lt 1 ] || [ "$BILLING_REPLICAS" -gt "$BILLING_REPLICAS_MAX" ]; then
                die "--billing-replicas must be within 1..$BILLING_REPLICAS_MAX"
        fi
        case "$WEBHOOK_REPLICAS" in
        '' | *[!0-9]*) die "--webhook-replicas must be a number" ;;
        esac
        if [ "$WEBHOOK_REPLICAS" -lt 1 ] || [ "$WEBHOOK_REPLICAS" -gt "$WEBHOOK_REPLICAS_MAX" ]; then
                die "--webhook-replicas must be within 1..$WEBHOOK_REPLICAS_MAX"
        fi
        case "$LEDGER_REPLICAS" in
        '' | *[!0-9]*) die "--ledger-replicas must be a number" ;;
        esac
        if [ "$LEDGER_REPLICAS" -lt 1 ] || [ "$LEDGER_REPLICAS" -gt "$LEDGER_REPLICAS_MAX" ]; then
                die "--ledger-replicas must be within 1..$LEDGER_REPLICAS_MAX"
        fi
        case "$SUMMARY_REPLICAS" in
        '' | *[!0-9]*) die "--summary-replicas must be a number" ;;
        esac
        if [ "$SUMMARY_REPLICAS" -lt 1 ] || [ "$SUMMARY_REPLICAS" -gt "$SUMMARY_REPLICAS_MAX" ]; then
                die "--summary-replicas must be within 1..$SUMMARY_REPLICAS_MAX"
        fi
        case "$GATEWAY_PORT" in
        *[!0-9]*) die "--gateway-port must be a number" ;;
        esac
        case "$GATEWAY_REPLICAS" in
        '' | *[!0-9]*) die "--gateway-replicas must be a number" ;;
        esac
        if [ "$GATEWAY_REPLICAS" -lt 1 ] || [ "$GATEWAY_REPLICAS" -gt "$GATEWAY_REPLICAS_MAX" ]; then
                die "--gateway-replicas must be within 1..$GATEWAY_REPLICAS_MAX"
        fi
        case "$BROKER_REPLICAS" in
        '' | *[!0-9]*) die "--broker-replicas must be a number" ;;
        esac
        if [ "$BROKER_REPLICAS" -lt 1 ] || [ "$BROKER_REPLICAS" -gt "$BROKER_REPLICAS_MAX" ]; then
                die "--broker-replicas must be within 1..$BROKER_REPLICAS_MAX"
        fi
}

# ---- ports -------------------------------------------------------------------

declare -A LISTENING=() # ports with a TCP listener, read once from ss

read_listening() {
        local addr
        command -v ss >/dev/null 2>&1 || return 0
        while read -r _ _ _ addr _; do
                LISTENING[${addr##*:}]=1
        done < <(ss -Hltn 2>/dev/null)
}

# True when something listens on port $1 (or the port is ours already).
port_busy() {
        local p=$1 u
        for u in "${USED_PORTS[@]+"${USED_PORTS[@]}"}"; do
                [ "$u" = "$p" ] && return 0
        done
        [ -z "${LISTENING[$p]+x}" ] || return 0
        # Without ss, a connect test: refused at once when nothing listens.
        if ! command -v ss >/dev/null 2>&1; then
                (: <>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && return 0
        fi
        return 1
}

# Sets REPLY to the first of $1 consecutive free ports, drawn at random.
pick_ports() {
        local span=$1 tries=0 base i ok
        while [ $tries -lt 200 ]; do
                tries=$((tries + 1))
                base=$((FREE_PORT_LO + RANDOM % (FREE_PORT_HI - FREE_PORT_LO - span)))
                ok=1
                for ((i = 0; i < span; i++)); do
                        if port_busy $((base + i)); then
                                ok=0
                                break
                        fi
                done
                if [ $ok = 1 ]; then
                        for ((i = 0; i < span; i++)); do USED_PORTS+=($((base + i))); done
                        REPLY=$base
                        return 0
                fi
        done
        die "no $span free consecutive loopback ports found"
}

claim_port() {
        local p=$1 what=$2
        port_busy "$p" && die "port $p ($what) is in use: stop what uses it, or choose other ports (--free-ports)"
        USED_PORTS+=("$p")
}

choose_ports() {
        local i
        read_listening
        if [ $FREE_PORTS = 1 ]; then
                for ((i = 0; i < BROKER_REPLICAS; i++)); do
                        pick_ports $BROKER_SPAN; BROKER_BASES+=("$REPLY")
                        pick_ports 1; BROKER_HEALTH_PORTS+=("$REPLY")
                done
                BROKER_BASE=${BROKER_BASES[0]}
                BROKER_HEALTH_PORT=${BROKER_HEALTH_PORTS[0]}
                pick_ports 1; PG_PORT=$REPLY
                pick_ports 1; REDIS_PORT=$REPLY
                for ((i = 0; i < AUTH_REPLICAS; i++)); do
                        pick_ports 1; AUTH_HEALTH_PORTS+=("$REPLY")
                done
                for ((i = 0; i < BILLING_REPLICAS; i++)); do
                        pick_ports 1; BILLING_HEALTH_PORTS+=("$REPLY")
                done
                for ((i = 0; i < WEBHOOK_REPLICAS; i++)); do
                        pick_ports 1; WEBHOOK_HEALTH_PORTS+=("$REPLY")
                done
                for ((i = 0; i < LEDGER_REPLICAS; i++)); do
                        pick_ports 1; LEDGER_HEALTH_PORTS+=("$REPLY")
                done
                for ((i = 0; i < SUMMARY_REPLICAS; i++)); do
                        pick_ports 1; SUMMARY_HEALTH_PORTS+=("$REPLY")
                done
                if [ -z "$GATEWAY_PORT" ]; then
                        pick_ports 1; GATEWAY_PORT=$REPLY
                else
                        claim_port "$GATEWAY_PORT" gateway
                fi
                GATEWAY_PORTS=("$GATEWAY_PORT")
                for ((i = 1; i < GATEWAY_REPLICAS; i++)); do
                        pick_ports 1; GATEWAY_PORTS+=("$REPLY")
                done
                for ((i = 0; i < GATEWAY_REPLICAS; i++)); do
                        pick_ports 1; GATEWAY_ADMIN_PORTS+=("$REPLY")
                done
                return
        fi
        GATEWAY_PORT=${GATEWAY_PORT:-8080}
        local b j
        BROKER_BASES=("$BROKER_BASE")
        BROKER_HEALTH_PORTS=("$BROKER_HEALTH_PORT")
        for ((i = 1; i < BROKER_REPLICAS; i++)); do
                BROKER_BASES+=($((BROKER_EXTRA_BASE + (i - 1) * BROKER_SPAN)))
                BROKER_HEALTH_PORTS+=($((BROKER_EXTRA_HEALTH_BASE + i - 1)))
        done
        for ((i = 0; i < BROKER_REPLICAS; i++)); do
                b=${BROKER_BASES[$i]}
                for ((j = 0; j < BROKER_SPAN; j++)); do claim_port $((b + j)) "$(broker_name $i)"; done
                claim_port "${BROKER_HEALTH_PORTS[$i]}" "$(broker_name $i) health"
        done
        claim_port "$PG_PORT" postgres
        claim_port "$REDIS_PORT" redis
        for ((i = 0; i < AUTH_REPLICAS; i++)); do
                claim_port $((AUTH_HEALTH_BASE + i)) "auth health"
                AUTH_HEALTH_PORTS+=($((AUTH_HEALTH_BASE + i)))
        done
        for ((i = 0; i < BILLING_REPLICAS; i++)); do
                claim_port $((BILLING_HEALTH_BASE + i)) "billing health"
                BILLING_HEALTH_PORTS+=($((BILLING_HEALTH_BASE + i)))
        done
        for ((i = 0; i < WEBHOOK_REPLICAS; i++)); do
                claim_port $((WEBHOOK_HEALTH_BASE + i)) "webhook health"
                WEBHOOK_HEALTH_PORTS+=($((WEBHOOK_HEALTH_BASE + i)))
        done
        for ((i = 0; i < LEDGER_REPLICAS; i++)); do
                claim_port $((LEDGER_HEALTH_BASE + i)) "ledger health"
                LEDGER_HEALTH_PORTS+=($((LEDGER_HEALTH_BASE + i)))
        done
        for ((i = 0; i < SUMMARY_REPLICAS; i++)); do
                claim_port $((SUMMARY_HEALTH_BASE + i)) "summary health"
                SUMMARY_HEALTH_PORTS+=($((SUMMARY_HEALTH_BASE + i)))
        done
        claim_port "$GATEWAY_PORT" gateway
        GATEWAY_PORTS=("$GATEWAY_PORT")
        for ((i = 1; i < GATEWAY_REPLICAS; i++)); do
                claim_port $((GATEWAY_PORT + i)) "gateway $((i + 1))"
                GATEWAY_PORTS+=($((GATEWAY_PORT + i)))
        done
        for ((i = 0; i < GATEWAY_REPLICAS; i++)); do
                claim_port $((GATEWAY_ADMIN_BASE + i)) "gateway admin"
                GATEWAY_ADMIN_PORTS+=($((GATEWAY_ADMIN_BASE + i)))
        done
}

# ---- PostgreSQL --------------------------------------------------------------

PG_BIN=""
PG_USER="" # the OS user the cluster runs as when we are root
PG_HOME="" # holds pg/ (data), pg-sock/ and, away from DIR, postgres.log

find_pg_bin() {
        local d
        if [ -n "${KEELSON_PG_BIN:-}" ]; then
                PG_BIN=$KEELSON_PG_BIN
        else
                # The highest installed major version (Debian keeps them side by side).
                for d in $(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V); do
                        [ -x "$d/initdb" ] && PG_BIN=$d
                done
                if [ -z "$PG_BIN" ] && command -v initdb >/dev/null 2>&1; then
                        PG_BIN=$(dirname "$(command -v initdb)")
                fi
        fi
        [ -x "$PG_BIN/initdb" ] || die "PostgreSQL server binaries not found (apt-get install postgresql, or set KEELSON_PG_BIN)"
}

# PostgreSQL refuses to run as root: as root, the cluster belongs to the
# postgres user the Debian package creates (or a system user keelson). When
# that user cannot reach DIR (a checkout under /root), the cluster lives in a
# folder of its own under /var/tmp, named after DIR so --keep-data finds it.
choose_pg_home() {
        PG_HOME=$DIR
        [ "$(id -u)" = 0 ] || return 0
        if id postgres >/dev/null 2>&1; then
                PG_USER=postgres
        else
                id keelson >/dev/null 2>&1 ||
                        useradd --system --no-create-home --shell /usr/sbin/nologin keelson
                PG_USER=keelson
        fi
        runuser -u "$PG_USER" -- test -x "$DIR" 2>/dev/null && return 0
        PG_HOME=/var/tmp/keelson-pg-$(printf '%s' "$DIR" | cksum | cut -d' ' -f1)
        [ -d "$PG_HOME" ] || mkdir -m 700 "$PG_HOME"
        case "$(stat -c %U "$PG_HOME")" in
        root | "$PG_USER") ;;
        *) die "$PG_HOME belongs to someone else: remove it" ;;
        esac
        chown "$PG_USER" "$PG_HOME"
        log "user $PG_USER cannot reach $DIR: the cluster lives in $PG_HOME"
}

as_pg() {
        if [ -n "$PG_USER" ]; then
                runuser -u "$PG_USER" -- "$@"
        else
                "$@"
        fi
}

pg_log_file() {
        if [ "$PG_HOME" = "$DIR" ]; then
                echo "$DIR/logs/postgres.log"
        else
                echo "$PG_HOME/postgres.log"
        fi
}

pg_init() {
        local data=$PG_HOME/pg
        echo "$data" >"$DIR/pg.path" # where stop finds the cluster
        rm -f "$DIR/pg.keep"
        [ $KEEP_DATA = 0 ] || : >"$DIR/pg.keep"
        if [ $KEEP_DATA = 1 ] && [ -f "$data/PG_VERSION" ]; then
                return 0
        fi
        rm -rf "$data"
        mkdir -p "$data"
        chmod 700 "$data"
        [ -z "$PG_USER" ] || chown "$PG_USER" "$data"
        # trust is safe here only because this cluster is throwaway and local:
        # it listens on 127.0.0.1 alone and its unix socket sits in a folder
        # of ours. Nothing else ever points at it.
        # --no-sync (--unsafe-fast only): the new files are not flushed to disk.
        local nosync=()
        [ $UNSAFE_FAST = 0 ] || nosync=(--no-sync)
        as_pg "$PG_BIN/initdb" -D "$data" -U postgres -A trust -E UTF8 --locale=C \
                "${nosync[@]+"${nosync[@]}"}" >"$DIR/logs/initdb.log" 2>&1 || {
                tail -n 20 "$DIR/logs/initdb.log" >&2
                die "initdb failed"
        }
        echo "include_if_exists = 'keelson.conf'" >>"$data/postgresql.conf"
}

# Rewritten on every start: the ports may differ from the last one.
pg_write_conf() {
        local sock=$PG_HOME/pg-sock
        mkdir -p "$sock"
        [ -z "$PG_USER" ] || chown "$PG_USER" "$sock"
        # A unix socket path is limited to 107 bytes; with a deeper folder the
        # cluster runs with TCP only (pg_sock, local_dsn).
        sock=$(pg_sock)
        # Durable unless --unsafe-fast: every commit waits for its WAL flush,
        # and full pages guard against torn writes. Off, a crash of the
        # server alone (not only of the machine) loses commits it had
        # acknowledged (synchronous_commit), and an OS crash may corrupt the
        # cluster (fsync, full_page_writes).
        # shared_buffers above the 128MB default, so that a ledger's transfer
        # indexes stay in PostgreSQL's own cache through a benchmark.
        local durable=on
        [ $UNSAFE_FAST = 0 ] || durable=off
        cat >"$PG_HOME/pg/keelson.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$sock'
fsync = $durable
synchronous_commit = $durable
full_page_writes = $durable
shared_buffers = 512MB
max_connections = 200
log_min_messages = warning
EOF
        [ -z "$PG_USER" ] || chown "$PG_USER" "$PG_HOME/pg/keelson.conf"
}

pg_start() { # [append]: keep the log of the server's last run (pg-start)
        local logf
        logf=$(pg_log_file)
        [ "${1:-}" = append ] || : >"$logf"
        [ -z "$PG_USER" ] || chown "$PG_USER" "$logf"
        [ "$PG_HOME" = "$DIR" ] || ln -sf "$logf" "$DIR/logs/postgres.log"
        as_pg "$PG_BIN/pg_ctl" -D "$PG_HOME/pg" -l "$logf" -w -t 60 start >/dev/null || {
                tail -n 20 "$logf" >&2
                die "PostgreSQL did not start"
        }
}

pg_sql() {
        "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT" -U postgres \
                -d "${2:-postgres}" -tAc "$1"
}

# The services run their migrations as keelson, owner of the database
# keelson; it may create roles because a service's migrations create its own
# roles. Their pools log in as keelson_<service>_login instead: roles that
# own nothing and hold no privilege (NOINHERIT), members of the runtime roles
# the pools switch to (docs/security.md). The runtime roles are made here
# too, so that the login roles can be members before any migration has run;
# the migrations find them there.
pg_role() { # name, attributes
        if [ -z "$(pg_sql "SELECT 1 FROM pg_roles WHERE rolname = '$1'")" ]; then
                pg_sql "CREATE ROLE $1 $2" >/dev/null
        fi
}

pg_bootstrap() {
        local r
        pg_role keelson "LOGIN CREATEROLE"
        if [ -z "$(pg_sql "SELECT 1 FROM pg_database WHERE datname = 'keelson'")" ]; then
                pg_sql "CREATE DATABASE keelson OWNER keelson" >/dev/null
        fi
        for r in keelson_auth_rt keelson_billing_rt keelson_billing_worker keelson_ledger_rt \
                keelson_ledger_sweeper keelson_summary_rt keelson_webhook_rt \
                keelson_webhook_worker; do
                pg_role "$r" NOLOGIN
        done
        for r in auth billing ledger summary webhook; do
                pg_role "keelson_${r}_login" "LOGIN NOINHERIT"
        done
        pg_sql "GRANT keelson_auth_rt TO keelson_auth_login;
                GRANT keelson_billing_rt, keelson_billing_worker TO keelson_billing_login;
                GRANT keelson_ledger_rt, keelson_ledger_sweeper TO keelson_ledger_login;
                GRANT keelson_summary_rt TO keelson_summary_login;
                GRANT keelson_webhook_rt, keelson_webhook_worker TO keelson_webhook_login" >/dev/null
}

# The cluster start made for DIR: PG_HOME, PG_BIN and, as root, PG_USER.
pg_locate() {
        local data
        data=$(cat "$DIR/pg.path" 2>/dev/null || echo "$DIR/pg")
        PG_HOME=${data%/pg}
        [ -f "$data/PG_VERSION" ] || return 1
        find_pg_bin
        if [ "$(id -u)" = 0 ]; then
                PG_USER=$(stat -c %U "$data")
        fi
}

pg_running() { [ -f "$PG_HOME/pg/postmaster.pid" ]; }

pg_stop() {
        pg_locate && pg_running || return 0
        as_pg "$PG_BIN/pg_ctl" -D "$PG_HOME/pg" -m fast -w -t 30 stop >/dev/null 2>&1 ||
                log "pg_ctl stop failed (already stopped?)"
}

# A crash of the server, for tests of durability: every backend is killed
# at once, nothing is flushed or checkpointed; the next start recovers from
# the WAL on disk.
do_pg_crash() {
        pg_locate || die "no cluster for $DIR (start the stack first)"
        pg_running || die "PostgreSQL of $DIR is not running"
        as_pg "$PG_BIN/pg_ctl" -D "$PG_HOME/pg" -m immediate -w -t 30 stop >/dev/null
}

# Starts the cluster again after pg-crash, with its configuration as start wrote it.
do_pg_start() {
        pg_locate || die "no cluster for $DIR (start the stack first)"
        pg_running && return 0
        pg_start append
}

# A cluster kept outside DIR (see choose_pg_home) goes with the stack unless
# it was started with --keep-data; the pattern guards the rm.
pg_remove_outside() {
        local data
        data=$(cat "$DIR/pg.path" 2>/dev/null) || return 0
        [ ! -f "$DIR/pg.keep" ] || return 0
        case "$data" in
        /var/tmp/keelson-pg-*/pg)
                [ -f "$data/postmaster.pid" ] || rm -rf "${data%/pg}"
                rm -f "$DIR/pg.path" "$DIR/logs/postgres.log"
                ;;
        esac
}

# ---- processes ---------------------------------------------------------------

# What restart gives a process again, besides its command line: the
# variables that configure keelson (every KEELSON_*) and those the C runtime,
# libpq, OpenSSL and the sanitizers read. Nothing else of the caller's
# environment is written down (DIR/cmd is a plain folder).
SPAWN_ENV_RE='^(KEELSON_[A-Z0-9_]*|PATH|HOME|USER|LANG|LC_[A-Z]*|TZ|TMPDIR|LD_LIBRARY_PATH|[A-Z]SAN_OPTIONS|PG[A-Z]*|SSL_CERT_FILE|SSL_CERT_DIR|OPENSSL_CONF)='

# spawn NAME COMMAND [ARG ...]: runs COMMAND in its own session (a Ctrl-C in
# the terminal reaches only this script, which then stops everything in
# order), stdin from /dev/null and output to DIR/logs/NAME.log so that no
# inherited descriptor keeps a caller such as CTest waiting. The pid goes to
# DIR/pids/NAME.pid, the process's start time to DIR/pids/NAME.start. The
# command line goes to DIR/cmd/NAME.argv and its environment to
# DIR/cmd/NAME.env (NUL-separated), for restart.
spawn() {
        local name=$1
        shift
        : >"$DIR/logs/$name.log"
        mkdir -p "$DIR/cmd"
        (umask 077 && printf '%s\0' "$@" >"$DIR/cmd/$name.argv")
        (umask 077 && { env -0 | grep -zE "$SPAWN_ENV_RE" || true; } >"$DIR/cmd/$name.env")
        launch "$name" "$@"
}

# launch NAME COMMAND [ARG ...]: the process itself, its log appended to.
launch() {
        local name=$1 pid
        shift
        if command -v setsid >/dev/null 2>&1; then
                setsid "$@" </dev/null >>"$DIR/logs/$name.log" 2>&1 &
        else
                "$@" </dev/null >>"$DIR/logs/$name.log" 2>&1 &
        fi
        pid=$!
        echo "$pid" >"$DIR/pids/$name.pid.tmp"
        start_time "$pid" >"$DIR/pids/$name.start" || true
        mv "$DIR/pids/$name.pid.tmp" "$DIR/pids/$name.pid"
}

# A zombie counts as dead: it holds no socket, and an init that does not
# reap (some containers) would otherwise keep it "alive" forever.
alive() {
        local stat
        [ -n "$1" ] && kill -0 "$1" 2>/dev/null || return 1
        # No /proc at all: trust kill -0. With /proc, a stat that cannot be read
        # is a process reaped since kill -0 (a zombie going away), not a live one.
        [ -d /proc/self ] || return 0
        stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
        stat=${stat##*) }
        [ "${stat:0:1}" != Z ]
}

# The start time of pid $1 in clock ticks since boot (field 22 of
# /proc/PID/stat, counted after the command name, which may hold spaces).
# It survives exec, so it names one process for its whole life.
start_time() {
        local stat
        stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
        stat=${stat##*) }
        # shellcheck disable=SC2086 # split the fields on purpose
        set -- $stat
        echo "${20}"
}

# True when pid $2 is still the process started as $1: a recycled pid
# belongs to someone else and is never signalled.
pid_is_ours() {
        local name=$1 pid=$2 now
        alive "$pid" || return 1
        [ -s "$DIR/pids/$name.start" ] || return 0 # no /proc: trust the pid
        now=$(start_time "$pid") || return 0
        [ "$now" = "$(cat "$DIR/pids/$name.start")" ]
}

start_redis() {
        local redis
        redis=$(command -v redis-server) || die "redis-server not found (apt-get install redis-server)"
        [ $KEEP_DATA = 1 ] || rm -rf "$DIR/redis"
        mkdir -p "$DIR/redis"
        spawn redis "$redis" --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
                --dir "$DIR/redis" --daemonize no
}

# The folder of the brokers' unix sockets, or nothing with --tcp or when its
# path is too long for one: an ipc base may have 92 bytes (ks_topology.h),
# and the longest name, "/broker-4" (BROKER_REPLICAS_MAX), takes 9 of them.
ipc_dir() {
        local d=$DIR/sock
        [ $TCP_ONLY = 1 ] || [ ${#d} -gt 83 ] || echo "$d"
}

# Broker I's TCP base, and its ipc base in DIR (the folder ipc_dir gives).
broker_tcp() { echo "tcp://127.0.0.1:${BROKER_BASES[$1]}"; }
broker_ipc() { echo "ipc://$2/$(broker_name "$1")"; }

# What broker I listens on: its TCP base, and its ipc base when there is a
# folder for one (both lead to the same devices).
broker_listen_url() {
        local dir
        dir=$(ipc_dir)
        if [ -n "$dir" ]; then
                echo "$(broker_tcp "$1"),$(broker_ipc "$1" "$dir")"
        else
                broker_tcp "$1"
        fi
}

# Every broker's base, comma-separated: what services and gateways dial.
# Their unix sockets when there are, so that no hop through a broker crosses
# the TCP stack on this one machine (docs/performance.md); else TCP.
broker_url() {
        local urls=() i dir
        dir=$(ipc_dir)
        for ((i = 0; i < BROKER_REPLICAS; i++)); do
                if [ -n "$dir" ]; then
                        urls+=("$(broker_ipc $i "$dir")")
                else
                        urls+=("$(broker_tcp $i)")
                fi
        done
        join_by_comma "${urls[@]}"
}

# Broker 1 is "broker" (its pid and log names predate several brokers), then broker-2...
broker_name() {
        if [ "$1" = 0 ]; then echo broker; else echo "broker-$(($1 + 1))"; fi
}
redis_url() { echo "redis://127.0.0.1:$REDIS_PORT"; }
tcp_dsn() { echo "postgresql://$1@127.0.0.1:$PG_PORT/keelson"; } # ROLE over 127.0.0.1
service_dsn() { tcp_dsn keelson; }
login_dsn() { tcp_dsn "keelson_$1_login"; }

# The cluster's unix socket folder, or nothing when its path is too long for
# one (pg_write_conf: the cluster then listens on TCP alone).
pg_sock() {
        local sock=$PG_HOME/pg-sock
        [ ${#sock} -gt 80 ] || echo "$sock"
}

# ROLE's DSN for the services this script starts: through the unix socket
# when there is one, so that no round trip crosses the TCP stack twice on
# this one machine (docs/performance.md); else, or with --tcp, 127.0.0.1.
# The env file keeps the TCP DSNs for tests and tools.
local_dsn() {
        local sock=""
        [ $TCP_ONLY = 1 ] || sock=$(pg_sock)
        if [ -n "$sock" ]; then
                echo "postgresql://$1@/keelson?host=$sock&port=$PG_PORT"
        else
                tcp_dsn "$1"
        fi
}
super_dsn() { tcp_dsn postgres; }

start_services() {
        local i sock
        # Each broker listens on its own bases alone; everyone else dials them all.
        sock=$(ipc_dir)
        [ -z "$sock" ] || { mkdir -p "$sock" && chmod 0700 "$sock"; }
        for ((i = 0; i < BROKER_REPLICAS; i++)); do
                spawn "$(broker_name $i)" env KEELSON_BROKER_URL="$(broker_listen_url $i)" \
                        KEELSON_BROKER_HTTP_HOST=127.0.0.1 \
                        KEELSON_BROKER_HTTP_PORT="${BROKER_HEALTH_PORTS[$i]}" \
                        "$BIN/keelson-broker"
        done
        for ((i = 0; i < AUTH_REPLICAS; i++)); do
                spawn "auth-$((i + 1))" env KEELSON_PG_DSN="$(local_dsn keelson)" \
                        KEELSON_AUTH_PG_LOGIN_DSN="$(local_dsn keelson_auth_login)" \
                        KEELSON_BROKER_URL="$(broker_url)" KEELSON_REDIS_URL="$(redis_url)" \
                        KEELSON_AUTH_HTTP_HOST=127.0.0.1 \
                        KEELSON_AUTH_HTTP_PORT="${AUTH_HEALTH_PORTS[$i]}" \
                        KEELSON_AUTH_HASH_WORKERS="${KEELSON_AUTH_HASH_WORKERS:-1}" \
                        "$BIN/keelson-auth"
        done
        for ((i = 0; i < LEDGER_REPLICAS; i++)); do
                spawn "ledger-$((i + 1))" env KEELSON_PG_DSN="$(local_dsn keelson)" \
                        KEELSON_LEDGER_PG_LOGIN_DSN="$(local_dsn keelson_ledger_login)" \
                        KEELSON_BROKER_URL="$(broker_url)" KEELSON_LEDGER_HTTP_HOST=127.0.0.1 \
                        KEELSON_LEDGER_HTTP_PORT="${LEDGER_HEALTH_PORTS[$i]}" \
                        KEELSON_LEDGER_EXPIRY_INTERVAL_MS=200 "$BIN/keelson-ledger"
        done
        for ((i = 0; i < BILLING_REPLICAS; i++)); do
                spawn "billing-$((i + 1))" env KEELSON_PG_DSN="$(local_dsn keelson)" \
                        KEELSON_BILLING_PG_LOGIN_DSN="$(local_dsn keelson_billing_login)" \
                        KEELSON_BROKER_URL="$(broker_url)" KEELSON_BILLING_HTTP_HOST=127.0.0.1 \
                        KEELSON_BILLING_HTTP_PORT="${BILLING_HEALTH_PORTS[$i]}" \
                        "$BIN/keelson-billing"
        done
        for ((i = 0; i < WEBHOOK_REPLICAS; i++)); do
                spawn "webhook-$((i + 1))" env KEELSON_PG_DSN="$(local_dsn keelson)" \
                        KEELSON_WEBHOOK_PG_LOGIN_DSN="$(local_dsn keelson_webhook_login)" \
                        KEELSON_BROKER_URL="$(broker_url)" KEELSON_WEBHOOK_HTTP_HOST=127.0.0.1 \
                        KEELSON_WEBHOOK_HTTP_PORT="${WEBHOOK_HEALTH_PORTS[$i]}" \
                        KEELSON_WEBHOOK_DELIVERY_ALLOW="${KEELSON_WEBHOOK_DELIVERY_ALLOW-127.0.0.1/32}" \
                        "$BIN/keelson-webhook"
        done
        # The reader role comes with auth's migrations: /readyz waits for it.
        for ((i = 0; i < SUMMARY_REPLICAS; i++)); do
                spawn "summary-$((i + 1))" env KEELSON_PG_DSN="$(local_dsn keelson)" \
                        KEELSON_SUMMARY_PG_LOGIN_DSN="$(local_dsn keelson_summary_login)" \
                        KEELSON_BROKER_URL="$(broker_url)" KEELSON_REDIS_URL="$(redis_url)" \
                        KEELSON_SUMMARY_HTTP_HOST=127.0.0.1 \
                        KEELSON_SUMMARY_HTTP_PORT="${SUMMARY_HEALTH_PORTS[$i]}" \
                        "$BIN/keelson-summary"
        done
        for ((i = 0; i < GATEWAY_REPLICAS; i++)); do
                spawn "$(gateway_name $i)" env KEELSON_GATEWAY_HOST=127.0.0.1 \
                        KEELSON_GATEWAY_PORT="${GATEWAY_PORTS[$i]}" \
                        KEELSON_GATEWAY_ADMIN_HOST=127.0.0.1 \
                        KEELSON_GATEWAY_ADMIN_PORT="${GATEWAY_ADMIN_PORTS[$i]}" \
                        KEELSON_GATEWAY_REPLICAS="$GATEWAY_REPLICAS" \
                        KEELSON_BROKER_URL="$(broker_url)" KEELSON_REDIS_URL="$(redis_url)" \
                        "$BIN/keelson-gateway"
        done
}

# Replica 1 is "gateway" (its pid and log names predate replicas), then gateway-2...
gateway_name() {
        if [ "$1" = 0 ]; then echo gateway; else echo "gateway-$(($1 + 1))"; fi
}

# Each "name port" pair: what must answer GET /readyz with 200.
ready_targets() {
        local i
        for ((i = 0; i < BROKER_REPLICAS; i++)); do
                echo "$(broker_name $i) ${BROKER_HEALTH_PORTS[$i]}"
        done
        for ((i = 0; i < AUTH_REPLICAS; i++)); do
                echo "auth-$((i + 1)) ${AUTH_HEALTH_PORTS[$i]}"
        done
        for ((i = 0; i < BILLING_REPLICAS; i++)); do
                echo "billing-$((i + 1)) ${BILLING_HEALTH_PORTS[$i]}"
        done
        for ((i = 0; i < WEBHOOK_REPLICAS; i++)); do
                echo "webhook-$((i + 1)) ${WEBHOOK_HEALTH_PORTS[$i]}"
        done
        for ((i = 0; i < LEDGER_REPLICAS; i++)); do
                echo "ledger-$((i + 1)) ${LEDGER_HEALTH_PORTS[$i]}"
        done
        for ((i = 0; i < SUMMARY_REPLICAS; i++)); do
                echo "summary-$((i + 1)) ${SUMMARY_HEALTH_PORTS[$i]}"
        done
        for ((i = 0; i < GATEWAY_REPLICAS; i++)); do
                echo "$(gateway_name $i) ${GATEWAY_ADMIN_PORTS[$i]}"
        done
}

http_status() {
        curl -s -o /dev/null -m 2 -w '%{http_code}' "http://127.0.0.1:$1$2" 2>/dev/null || true
}

redis_ready() {
        if command -v redis-cli >/dev/null 2>&1; then
                [ "$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null)" = PONG ]
        else
                (: <>"/dev/tcp/127.0.0.1/$REDIS_PORT") 2>/dev/null
        fi
}

fail_with_log() {
        local name=$1 why=$2
        log "$name $why; last lines of $DIR/logs/$name.log:"
        tail -n 30 "$DIR/logs/$name.log" >&2 || true
        exit 1
}

# Polls until every target is ready, a process dies, or READY_TIMEOUT_S passes.
wait_ready() {
        local deadline=$((SECONDS + READY_TIMEOUT_S)) pending name port code
        while true; do
                pending=""
                alive "$(cat "$DIR/pids/redis.pid")" || fail_with_log redis "exited"
                redis_ready || pending="redis"
                while read -r name port; do
                        alive "$(cat "$DIR/pids/$name.pid")" || fail_with_log "$name" "exited"
                        code=$(http_status "$port" /readyz)
                        [ "$code" = 200 ] || pending="$name (/readyz: ${code:-no answer})"
                done < <(ready_targets)
                [ -n "$pending" ] || return 0
                [ $SECONDS -lt $deadline ] ||
                        fail_with_log "${pending%% *}" "not ready after ${READY_TIMEOUT_S}s: $pending"
                sleep 0.2
        done
}

join_by_comma() {
        local IFS=,
        echo "$*"
}

write_env() {
        local pids=() billing_pids=() ledger_pids=() summary_pids=() webhook_pids=() gw_urls=() \
                gw_pids=() broker_urls=() broker_pids=() i
        for ((i = 0; i < BROKER_REPLICAS; i++)); do
                broker_urls+=("$(broker_tcp $i)")
                broker_pids+=("$(cat "$DIR/pids/$(broker_name $i).pid")")
        done
        for ((i = 0; i < AUTH_REPLICAS; i++)); do
                pids+=("$(cat "$DIR/pids/auth-$((i + 1)).pid")")
        done
        for ((i = 0; i < BILLING_REPLICAS; i++)); do
                billing_pids+=("$(cat "$DIR/pids/billing-$((i + 1)).pid")")
        done
        for ((i = 0; i < LEDGER_REPLICAS; i++)); do
                ledger_pids+=("$(cat "$DIR/pids/ledger-$((i + 1)).pid")")
        done
        for ((i = 0; i < WEBHOOK_REPLICAS; i++)); do
                webhook_pids+=("$(cat "$DIR/pids/webhook-$((i + 1)).pid")")
        done
        for ((i = 0; i < SUMMARY_REPLICAS; i++)); do
                summary_pids+=("$(cat "$DIR/pids/summary-$((i + 1)).pid")")
        done
        for ((i = 0; i < GATEWAY_REPLICAS; i++)); do
                gw_urls+=("http://127.0.0.1:${GATEWAY_PORTS[$i]}")
                gw_pids+=("$(cat "$DIR/pids/$(gateway_name $i).pid")")
        done
        cat >"$DIR/env.tmp" <<EOT
KEELSON_IT_PG_DSN=$(super_dsn)
KEELSON_IT_SERVICE_PG_DSN=$(service_dsn)
KEELSON_IT_AUTH_LOGIN_DSN=$(login_dsn auth)
KEELSON_IT_BILLING_LOGIN_DSN=$(login_dsn billing)
KEELSON_IT_LEDGER_LOGIN_DSN=$(login_dsn ledger)
KEELSON_IT_SUMMARY_LOGIN_DSN=$(login_dsn summary)
KEELSON_IT_WEBHOOK_LOGIN_DSN=$(login_dsn webhook)
KEELSON_IT_REDIS_URL=$(redis_url)
KEELSON_IT_BROKER_URL=tcp://127.0.0.1:$BROKER_BASE
KEELSON_IT_BROKER_URLS=$(join_by_comma "${broker_urls[@]}")
KEELSON_IT_BROKER_PIDS=$(join_by_comma "${broker_pids[@]}")
KEELSON_IT_BROKER_HEALTH_PORTS=$(join_by_comma "${BROKER_HEALTH_PORTS[@]}")
KEELSON_IT_GATEWAY_URL=http://127.0.0.1:$GATEWAY_PORT
KEELSON_IT_BROKER_HEALTH_PORT=$BROKER_HEALTH_PORT
KEELSON_IT_AUTH_HEALTH_PORTS=$(join_by_comma "${AUTH_HEALTH_PORTS[@]}")
KEELSON_IT_AUTH_PIDS=$(join_by_comma "${pids[@]}")
KEELSON_IT_BILLING_HEALTH_PORTS=$(join_by_comma "${BILLING_HEALTH_PORTS[@]}")
KEELSON_IT_BILLING_PIDS=$(join_by_comma "${billing_pids[@]}")
KEELSON_IT_LEDGER_HEALTH_PORTS=$(join_by_comma "${LEDGER_HEALTH_PORTS[@]}")
KEELSON_IT_LEDGER_PIDS=$(join_by_comma "${ledger_pids[@]}")
KEELSON_IT_SUMMARY_HEALTH_PORTS=$(join_by_comma "${SUMMARY_HEALTH_PORTS[@]}")
KEELSON_IT_SUMMARY_PIDS=$(join_by_comma "${summary_pids[@]}")
KEELSON_IT_WEBHOOK_HEALTH_PORTS=$(join_by_comma "${WEBHOOK_HEALTH_PORTS[@]}")
KEELSON_IT_WEBHOOK_PIDS=$(join_by_comma "${webhook_pids[@]}")
KEELSON_IT_GATEWAY_PID=$(cat "$DIR/pids/gateway.pid")
KEELSON_IT_GATEWAY_URLS=$(join_by_comma "${gw_urls[@]}")
KEELSON_IT_GATEWAY_PIDS=$(join_by_comma "${gw_pids[@]}")
KEELSON_IT_GATEWAY_ADMIN_PORTS=$(join_by_comma "${GATEWAY_ADMIN_PORTS[@]}")
KEELSON_IT_BIN=$BIN
KEELSON_IT_STACK_SH=$SCRIPT_DIR/stack.sh
EOT
        mv "$DIR/env.tmp" "$DIR/env"
        ready_targets >"$DIR/cmd/ready" # the health port of each process, for restart
}

on_start_exit() {
        local rc=$?
        if [ $rc != 0 ] && [ $STARTED = 1 ]; then
                log "start failed: stopping what was started"
                do_stop || true
        fi
        exit $rc
}

do_start() {
        check_start_args
        do_stop # a stack left over in DIR (an interrupted run) goes first
        mkdir -p "$DIR/logs" "$DIR/pids"
        rm -f "$DIR/env" "$DIR"/logs/*.log # logs of the last run would mislead
        choose_ports
        find_pg_bin
        choose_pg_home
        STARTED=1
        trap on_start_exit EXIT
        pg_init
        pg_write_conf
        pg_start
        [ $UNSAFE_FAST = 0 ] ||
                log "--unsafe-fast: PostgreSQL runs without fsync, synchronous_commit and full_page_writes; a crash loses acknowledged writes"
        pg_bootstrap
        start_redis
        start_services
        wait_ready
        write_env
        trap - EXIT
        log "ready: gateway http://127.0.0.1:$GATEWAY_PORT (health and metrics: http://127.0.0.1:${GATEWAY_ADMIN_PORTS[0]}), logs in $DIR/logs, env in $DIR/env"
}

# ---- stop --------------------------------------------------------------------

# Pid files in stopping order: the gateway first (no new requests), then the
# services, then the broker and Redis.
stop_order() {
        local f
        for f in "$DIR/pids/gateway.pid" "$DIR"/pids/gateway-*.pid "$DIR"/pids/auth-*.pid \
                "$DIR/pids/broker.pid" "$DIR"/pids/broker-*.pid \
                "$DIR/pids/redis.pid"; do
                [ -f "$f" ] && basename "$f" .pid
        done
        for f in "$DIR"/pids/*.pid; do
                [ -f "$f" ] || continue
                f=$(basename "$f" .pid)
                case "$f" in
                gateway | gateway-* | auth-* | broker | broker-* | redis) ;;
                *) echo "$f" ;;
                esac
        done
}

# SIGTERM to the named processes, at most STOP_TIMEOUT_S for them to exit,
# then SIGKILL for those still there.
stop_names() {
        local name pid names=() pids=() i deadline
        for name in "$@"; do
                pid=$(cat "$DIR/pids/$name.pid" 2>/dev/null || true)
                if pid_is_ours "$name" "$pid"; then
                        kill -TERM "$pid" 2>/dev/null || true
                        names+=("$name")
                        pids+=("$pid")
                fi
                rm -f "$DIR/pids/$name.pid" "$DIR/pids/$name.start"
        done
        deadline=$((SECONDS + STOP_TIMEOUT_S))
        for ((i = 0; i < ${#pids[@]}; i++)); do
                while alive "${pids[$i]}" && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
                if alive "${pids[$i]}"; then
                        log "${names[$i]} (pid ${pids[$i]}) ignored SIGTERM for ${STOP_TIMEOUT_S}s: SIGKILL"
                        kill -KILL "${pids[$i]}" 2>/dev/null || true
                fi
        done
}

# In stages, so that nothing is left waiting on what already stopped: the
# gateway (no new requests), the services, the broker, Redis, PostgreSQL.
do_stop() {
        local services=() gateways=() brokers=() name
        if [ -d "$DIR/pids" ]; then
                for name in $(stop_order); do
                        case "$name" in
                        gateway | gateway-*) gateways+=("$name") ;;
                        broker | broker-*) brokers+=("$name") ;;
                        redis) ;;
                        *) services+=("$name") ;;
                        esac
                done
                stop_names "${gateways[@]+"${gateways[@]}"}"
                stop_names "${services[@]+"${services[@]}"}"
                stop_names "${brokers[@]+"${brokers[@]}"}"
                stop_names redis
                rm -f "$DIR"/pids/*.pid "$DIR"/pids/*.start
        fi
        rm -rf "$DIR/cmd" "$DIR/env.lock"
        rm -f "$DIR/env"
        pg_stop
}

# A sanitizer build (make test-asan) reports into the services' logs, which
# nobody reads when the tests pass: stop fails when a log holds a report.
check_sanitizer_reports() {
        local f found=0
        for f in "$DIR"/logs/*.log; do
                [ -f "$f" ] || continue
                if grep -qE 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$f"; then
                        log "sanitizer report in $f:"
                        grep -A 30 -E 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$f" | head -n 60 >&2
                        found=1
                fi
        done
        return $found
}

# Starts the stack's Redis again, on the port DIR/env names (after redis-stop).
do_redis_start() {
        local deadline=$((SECONDS + READY_TIMEOUT_S))
        REDIS_PORT=$(sed -n 's|^KEELSON_IT_REDIS_URL=redis://127.0.0.1:||p' "$DIR/env" 2>/dev/null)
        [ -n "$REDIS_PORT" ] || die "no running stack in $DIR (no Redis port in $DIR/env)"
        if pid_is_ours redis "$(cat "$DIR/pids/redis.pid" 2>/dev/null || true)"; then
                return 0
        fi
        start_redis
        until redis_ready; do
                alive "$(cat "$DIR/pids/redis.pid")" || fail_with_log redis "exited"
                [ $SECONDS -lt $deadline ] || fail_with_log redis "not ready after ${READY_TIMEOUT_S}s"
                sleep 0.1
        done
}

# ---- restart -------------------------------------------------------------------

RESTART_NAME=""
RESTART_SIGNAL=TERM

# restart's own arguments (NAME, --signal); the rest goes to parse_args.
parse_restart_args() {
        local rest=()
        while [ $# -gt 0 ]; do
                case "$1" in
                --signal) RESTART_SIGNAL=${2:?--signal needs TERM or KILL}; shift 2 ;;
                --dir) rest+=("$1" "${2:?--dir needs a value}"); shift 2 ;;
                -*) rest+=("$1"); shift ;;
                *)
                        [ -z "$RESTART_NAME" ] || die "restart takes one NAME (got $RESTART_NAME and $1)"
                        RESTART_NAME=$1
                        shift
                        ;;
                esac
        done
        case "$RESTART_SIGNAL" in
        TERM | KILL) ;;
        SIGTERM | SIGKILL) RESTART_SIGNAL=${RESTART_SIGNAL#SIG} ;;
        *) die "--signal must be TERM or KILL" ;;
        esac
        parse_args "${rest[@]+"${rest[@]}"}"
        [ -n "$RESTART_NAME" ] || die "restart needs the NAME of a process (see: stack.sh status)"
        # The first gateway and broker are named gateway and broker: gateway-1
        # and broker-1 name them too.
        case "$RESTART_NAME" in
        gateway-1 | broker-1)
                [ -f "$DIR/cmd/$RESTART_NAME.argv" ] || RESTART_NAME=${RESTART_NAME%-1}
                ;;
        esac
        case "$RESTART_NAME" in
        */* | .*) die "restart: bad NAME $RESTART_NAME" ;;
        esac
        [ -f "$DIR/cmd/$RESTART_NAME.argv" ] ||
                die "restart: no process $RESTART_NAME was started in $DIR (see: stack.sh status --dir $DIR)"
}

# Stops NAME: SIGTERM and STOP_TIMEOUT_S to exit, then SIGKILL; or SIGKILL at once.
restart_stop() {
        local name=$1 sig=$2 pid deadline
        pid=$(cat "$DIR/pids/$name.pid" 2>/dev/null || true)
        pid_is_ours "$name" "$pid" || return 0 # already gone (a test killed it itself)
        kill -"$sig" "$pid" 2>/dev/null || true
        deadline=$((SECONDS + STOP_TIMEOUT_S))
        while alive "$pid" && [ $SECONDS -lt $deadline ]; do sleep 0.05; done
        if alive "$pid" && [ "$sig" = TERM ]; then
                log "$name (pid $pid) ignored SIGTERM for ${STOP_TIMEOUT_S}s: SIGKILL"
                kill -KILL "$pid" 2>/dev/null || true
                deadline=$((SECONDS + STOP_TIMEOUT_S))
                while alive "$pid" && [ $SECONDS -lt $deadline ]; do sleep 0.05; done
        fi
        ! alive "$pid" || die "$name (pid $pid) is still there after SIGKILL"
}

# The env file's list of pids for NAME's group, rewritten from the pid files
# (under a lock: several restarts may run at once).
restart_update_env() {
        local name=$1 key names=() n i pids=() prefix
        [ -f "$DIR/env" ] || return 0
        case "$name" in
        broker | broker-*) key=KEELSON_IT_BROKER_PIDS; prefix=broker ;;
        gateway | gateway-*) key=KEELSON_IT_GATEWAY_PIDS; prefix=gateway ;;
        auth-* | billing-* | ledger-* | summary-* | webhook-*)
                prefix=${name%-*}
                key=KEELSON_IT_$(echo "$prefix" | tr '[:lower:]' '[:upper:]')_PIDS
                ;;
        *) return 0 ;;
        esac
        (
                flock 9
                n=$(sed -n "s/^$key=//p" "$DIR/env" | tr ',' '\n' | grep -c . || true)
                for ((i = 1; i <= n; i++)); do
                        if [ $i = 1 ] && { [ "$prefix" = broker ] || [ "$prefix" = gateway ]; }; then
                                names+=("$prefix")
                        else
                                names+=("$prefix-$i")
                        fi
                done
                for i in "${names[@]}"; do pids+=("$(cat "$DIR/pids/$i.pid" 2>/dev/null || echo 0)"); done
                sed -e "s/^$key=.*/$key=$(join_by_comma "${pids[@]}")/" \
                        -e "s/^KEELSON_IT_GATEWAY_PID=.*/KEELSON_IT_GATEWAY_PID=$(cat "$DIR/pids/gateway.pid" 2>/dev/null || echo 0)/" \
                        "$DIR/env" >"$DIR/env.restart.tmp"
                mv "$DIR/env.restart.tmp" "$DIR/env"
        ) 9>>"$DIR/env.lock"
}

# Waits for NAME's /readyz (Redis: PING) for READY_TIMEOUT_S; 1 when it exited.
restart_wait_ready() {
        local name=$1 port deadline=$((SECONDS + READY_TIMEOUT_S)) code=""
        if [ "$name" = redis ]; then
                REDIS_PORT=$(sed -n 's|^KEELSON_IT_REDIS_URL=redis://127.0.0.1:||p' "$DIR/env" 2>/dev/null)
                until redis_ready; do
                        alive "$(cat "$DIR/pids/redis.pid")" || fail_with_log redis "exited"
                        [ $SECONDS -lt $deadline ] || fail_with_log redis "not ready after ${READY_TIMEOUT_S}s"
                        sleep 0.1
                done
                return 0
        fi
        port=$(awk -v n="$name" '$1 == n { print $2 }' "$DIR/cmd/ready" 2>/dev/null)
        [ -n "$port" ] || die "restart: no health port known for $name ($DIR/cmd/ready)"
        while true; do
                alive "$(cat "$DIR/pids/$name.pid")" || return 1
                code=$(http_status "$port" /readyz)
                [ "$code" != 200 ] || return 0
                [ $SECONDS -lt $deadline ] ||
                        fail_with_log "$name" "not ready after ${READY_TIMEOUT_S}s (/readyz: ${code:-no answer})"
                sleep 0.1
        done
}

# Stops one process and starts it again with the command line and
# environment start gave it (DIR/cmd/NAME.*), its log appended to.
do_restart() {
        local name=$RESTART_NAME argv=() envs=() a try
        while IFS= read -r -d '' a; do argv+=("$a"); done <"$DIR/cmd/$name.argv"
        while IFS= read -r -d '' a; do envs+=("$a"); done <"$DIR/cmd/$name.env"
        [ ${#argv[@]} -gt 0 ] || die "restart: $DIR/cmd/$name.argv is empty"
        restart_stop "$name" "$RESTART_SIGNAL"
        printf '{"ts":"%s","level":"info","service":"stack.sh","msg":"restart after SIG%s"}\n' \
                "$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ)" "$RESTART_SIGNAL" >>"$DIR/logs/$name.log"
        # A process that exits at once is started again, RESTART_TRIES times in
        # all: a binary being relinked by a build in the same folder cannot be
        # executed for a moment ("Permission denied", "Text file busy").
        for ((try = 1; ; try++)); do
                launch "$name" env -i "${envs[@]+"${envs[@]}"}" "${argv[@]}"
                restart_update_env "$name"
                restart_wait_ready "$name" && break
                [ $try -lt $RESTART_TRIES ] || fail_with_log "$name" "exited after restart ($try tries)"
                log "$name exited after restart; trying again"
                sleep 1
        done
        log "$name restarted (pid $(cat "$DIR/pids/$name.pid")), ready"
}

# ---- run, curl example, packages ----------------------------------------------

# The address is new every time: with --keep-data (make up) the accounts of
# earlier runs are still there, and a repeated SignUp would answer 409.
curl_example() {
        local gw=${1:-http://127.0.0.1:8080}
        local email
        email="ada-$(date +%Y%m%d%H%M%S)-$RANDOM@example.com"
        cat <<EOT
Try it (Connect protocol, JSON over HTTP):

  GW=$gw
  curl -sS \$GW/keelson.auth.v1.AuthService/SignUp -H 'Content-Type: application/json' \\
    -d '{"email":"$email","password":"correct horse battery","tenantName":"Analytical Engines","displayName":"Ada"}'
  TOKEN=\$(curl -sS \$GW/keelson.auth.v1.AuthService/Login -H 'Content-Type: application/json' \\
    -d '{"email":"$email","password":"correct horse battery"}' |
    sed -n 's/.*"sessionToken": *"\([^"]*\)".*/\1/p')
  curl -sS \$GW/keelson.auth.v1.AuthService/WhoAmI -H 'Content-Type: application/json' \\
    -H "Authorization: Bearer \$TOKEN" -d '{}'
EOT
}

gateway_url_of() {
        sed -n 's/^KEELSON_IT_GATEWAY_URL=//p' "$1/env" 2>/dev/null || true
}

do_run() {
        local name pid
        do_start
        curl_example "http://127.0.0.1:$GATEWAY_PORT"
        echo
        echo "Logs: $DIR/logs/. Press Ctrl-C to stop."
        trap 'echo; log "stopping"; do_stop; exit 0' INT TERM
        while true; do
                for name in $(stop_order); do
                        pid=$(cat "$DIR/pids/$name.pid" 2>/dev/null || true)
                        if [ -n "$pid" ] && ! alive "$pid"; then
                                log "$name (pid $pid) exited; last lines of its log:"
                                tail -n 10 "$DIR/logs/$name.log" >&2 || true
                                rm -f "$DIR/pids/$name.pid"
                        fi
                done
                sleep 1 &
                wait $! || true
        done
}

do_status() {
        local name pid rc=0
        for name in $(stop_order); do
                pid=$(cat "$DIR/pids/$name.pid")
                if pid_is_ours "$name" "$pid"; then
                        echo "$name: running (pid $pid)"
                else
                        echo "$name: not running"
                        rc=1
                fi
        done
        [ -n "$(stop_order)" ] || { echo "nothing started in $DIR"; rc=1; }
        return $rc
}

packages() {
        sed -e 's/#.*//' -e 's/[[:space:]]//g' "$PACKAGES_FILE" | grep -v '^$'
}

do_ensure_packages() {
        local missing=() p
        command -v dpkg-query >/dev/null 2>&1 ||
                die "not a Debian system: install the equivalents of $PACKAGES_FILE by hand"
        for p in $(packages); do
                dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
                        missing+=("$p")
        done
        [ ${#missing[@]} -gt 0 ] || return 0
        if [ "$(id -u)" = 0 ]; then
                log "installing: ${missing[*]}"
                apt-get update
                DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
                return
        fi
        log "missing packages: ${missing[*]}; install them with:"
        echo "sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}"
        exit 1
}

main() {
        local cmd=${1:-}
        [ $# -gt 0 ] && shift
        case "$cmd" in
        start) parse_args "$@"; do_start ;;
        run) parse_args "$@"; do_run ;;
        stop) parse_args "$@"; do_stop; pg_remove_outside; check_sanitizer_reports ;;
        status) parse_args "$@"; do_status ;;
        restart) parse_restart_args "$@"; do_restart ;;
        ensure-packages) do_ensure_packages ;;
        redis-stop) parse_args "$@"; stop_names redis ;;
        redis-start) parse_args "$@"; do_redis_start ;;
        pg-crash) parse_args "$@"; do_pg_crash ;;
        pg-start) parse_args "$@"; do_pg_start ;;
        curl-example)
                if [ "${1:-}" = --dir ]; then
                        parse_args "$@"
                        curl_example "$(gateway_url_of "$DIR")"
                else
                        curl_example
                fi
                ;;
        -h | --help | help) usage ;;
        *) usage >&2; exit 2 ;;
        esac
}

main "$@"
