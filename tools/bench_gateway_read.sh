#!/usr/bin/env bash
# bench_gateway_read.sh: the gateway's authenticated read path, measured with
# wrk against nginx serving the same reply as a static page, in the same run.
#
#   tools/bench_gateway_read.sh [BUILD_DIR (build)] [SECONDS per run (10)]
#
# It starts a stack of its own (deploy/local/stack.sh, free ports, two auth
# replicas), signs a user up, logs in, and calls WhoAmI with that session:
# after the first call the context comes from the gateway's cache, so a
# request costs the gateway its rate-limit decision in Redis (limits on, but
# set far above the offered load so that every request is decided and
# allowed) and one WhoAmI round trip to auth through the broker. nginx
# (nginx-light) runs on a free loopback port with a config in a temporary
# folder and answers every request with the WhoAmI body the gateway gave.
# Both are driven by wrk at 10 and 50 connections; the script prints
# requests/s, p50 and p99 and the gateway/nginx ratios. Then the tenant gets
# 60 customers and billing's ListCustomers (50 a page) is driven at 50
# connections against nginx serving that page's JSON as a static file. Then
# the CPU each process of the stack spent per WhoAmI in one more run at 10
# connections.
# Needs wrk, nginx, curl.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
DURATION=${2:-10}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/keelson-bench-gateway.XXXXXX")
NGINX_WORKERS=2
CONNECTIONS=(10 50)

BENCH_NAME=bench_gateway_read
# shellcheck source=tools/bench_whoami.sh
. "$ROOT/tools/bench_whoami.sh"
need "wrk nginx-light curl" wrk nginx curl

# ---- the stack and a session ----------------------------------------------------

export KEELSON_GATEWAY_RATE_API=1000000:1000000/1s
export KEELSON_GATEWAY_RATE_AUTH=1000:1000/1s
# The stack's gateway lets more gateway processes share its port (the
# cheapest route is measured with one gateway per core below).
export KEELSON_GATEWAY_REUSE_PORT=true
whoami_session

# post_script FILE BODY: a wrk script that POSTs the JSON BODY with the session's token.
post_script() {
        cat >"$1" <<EOF
wrk.method = "POST"
wrk.body = '$2'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $TOKEN"
EOF
}

post_script "$WORK/whoami.lua" '{}'

# ---- nginx, same body ------------------------------------------------------------

NGINX_PORT=$(free_port)
cat >"$WORK/nginx.conf" <<EOF
worker_processes $NGINX_WORKERS;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log;
events { worker_connections 1024; }
http {
    access_log off;
    default_type application/json;
    server {
        listen 127.0.0.1:$NGINX_PORT;
        location = /list.json { root $WORK; }
        location / { return 200 '$BODY'; }
    }
}
EOF
nginx -p "$WORK" -c "$WORK/nginx.conf"
for _ in $(seq 1 50); do
        curl -s -o /dev/null "http://127.0.0.1:$NGINX_PORT/" && break
        sleep 0.1
done

# ---- wrk ------------------------------------------------------------------------

# wrk's latency ("812.00us", "1.23ms", "1.01s") in milliseconds.
to_ms() {
        awk -v v="$1" 'BEGIN {
                n = v + 0
                if (v ~ /us$/) n /= 1000; else if (v ~ /ms$/) n = n; else if (v ~ /s$/) n *= 1000
                printf "%.2f", n }'
}

# run URL CONNECTIONS [plain | LUA]: prints "req/s p50_ms p99_ms non2xx"; "plain" sends
# wrk's default GET instead of the WhoAmI POST, LUA another request's script.
run() {
        local out rps p50 p99 bad script=(-s "${3:-$WORK/whoami.lua}")
        [ "${3:-}" != plain ] || script=()
        out=$(wrk -t2 -c"$2" -d"${DURATION}s" --latency "${script[@]}" "$1")
        rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
        p50=$(awk '$1 == "50%" {print $2}' <<<"$out")
        p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
        bad=$(awk '/Non-2xx or 3xx responses:/ {print $NF}' <<<"$out")
        echo "$rps $(to_ms "$p50") $(to_ms "$p99") ${bad:-0}"
}

WHOAMI="$GW/keelson.auth.v1.AuthService/WhoAmI"
wrk -t2 -c10 -d2s -s "$WORK/whoami.lua" "$WHOAMI" >/dev/null # warm-up

# The table of a read against nginx: its header, then one row per line of
# "CONNS GATEWAY_RUN NGINX_RUN" (each run's four figures), with the ratio.
table_header() {
        printf '%-6s %12s %9s %9s %8s | %12s %9s %9s | %7s\n' conns "gateway r/s" "p50 ms" \
                "p99 ms" non-2xx "nginx r/s" "p50 ms" "p99 ms" ratio
}
table_row() {
        local g_rps g_p50 g_p99 g_bad n_rps n_p50 n_p99
        read -r g_rps g_p50 g_p99 g_bad <<<"$2"
        read -r n_rps n_p50 n_p99 _ <<<"$3"
        printf '%-6s %12s %9s %9s %8s | %12s %9s %9s | %7s\n' "$1" "$g_rps" "$g_p50" "$g_p99" \
                "$g_bad" "$n_rps" "$n_p50" "$n_p99" \
                "$(awk -v a="$g_rps" -v b="$n_rps" 'BEGIN { printf "%.3f", a / b }')"
}

echo "WhoAmI through the gateway (cached context, rate limit decided in Redis, auth x2 behind the broker)"
echo "vs nginx ($NGINX_WORKERS workers) returning the same ${#BODY}-byte body; wrk -t2, ${DURATION}s per row; $(nproc) cores"
table_header
for c in "${CONNECTIONS[@]}"; do
        table_row "$c" "$(run "$WHOAMI" "$c")" "$(run "http://127.0.0.1:$NGINX_PORT/" "$c")"
done
# ---- ListCustomers, 50 a page, against nginx serving the same page ------------------------

# The session's tenant gets 60 customers; nginx serves the first page's JSON as
# a static file (sendfile), the gateway reads it from billing and PostgreSQL.
BILLING="$GW/keelson.billing.v1.BillingService"
for i in $(seq 1 60); do
        curl -sS -o /dev/null -w '%{http_code}\n' "$BILLING/CreateCustomer" \
                -H 'Content-Type: application/json' -H "Authorization: Bearer $TOKEN" \
                -d "{\"email\":\"c$i@example.test\",\"name\":\"Customer $i\",\"currency\":\"USD\",\"taxRateBp\":2000}" |
                grep -qx 200 || die "CreateCustomer failed"
done
curl -sS -o "$WORK/list.json" "$BILLING/ListCustomers" -H 'Content-Type: application/json' \
        -H "Authorization: Bearer $TOKEN" -d '{"pageSize":50}'
grep -q '"nextPageToken"' "$WORK/list.json" || die "ListCustomers failed: $(head -c 300 "$WORK/list.json")"
# nginx's workers may run as another user (nobody, under root): the folder only passable.
chmod 0711 "$WORK"
chmod 0644 "$WORK/list.json"
cmp -s "$WORK/list.json" <(curl -sS "http://127.0.0.1:$NGINX_PORT/list.json") ||
        die "nginx does not serve the page: $(curl -sS "http://127.0.0.1:$NGINX_PORT/list.json" | head -c 300)"
post_script "$WORK/list.lua" '{"pageSize":50}'
wrk -t2 -c10 -d2s -s "$WORK/list.lua" "$BILLING/ListCustomers" >/dev/null # warm-up
g_run=$(run "$BILLING/ListCustomers" 50 "$WORK/list.lua")
n_run=$(run "http://127.0.0.1:$NGINX_PORT/list.json" 50 plain)
echo "ListCustomers (50 a page, $(stat -c %s "$WORK/list.json") bytes of JSON; billing x1 behind the broker)"
echo "vs nginx serving the same page as a static file; wrk -t2, ${DURATION}s per row"
table_header
table_row 50 "$g_run" "$n_run"

# ---- where a request's CPU goes ------------------------------------------------------

# ticks PID...: the user and system clock ticks of these processes, summed: "user system".
ticks() {
        local p
        for p in "$@"; do
                [ -r "/proc/$p/stat" ] && sed 's/^.*) //' "/proc/$p/stat"
        done | awk '{u += $12; s += $13} END {print u + 0, s + 0}'
}

# switches PID...: context switches (voluntary and not) of every thread of these processes, summed.
switches() {
        local p
        for p in "$@"; do
                cat /proc/"$p"/task/*/status 2>/dev/null
        done | awk '/^(voluntary|nonvoluntary)_ctxt_switches:/ {n += $2} END {print n + 0}'
}

# The postmaster and its children: every process of the cluster.
pg_pids() {
        local pm f
        pm=$(head -1 "$(cat "$WORK/stack/pg.path")/postmaster.pid")
        echo "$pm"
        for f in /proc/[0-9]*/stat; do
                sed 's/^.*) //' "$f" 2>/dev/null | awk -v pm="$pm" -v f="$f" \
                        '$2 == pm { split(f, a, "/"); print a[3] }'
        done
}

# One more run at 10 connections with every process's CPU read before and after,
# divided by the requests wrk completed.
cpu_per_request() {
        local hz names=(postgres auth gateway broker redis) out n i u0 s0 u1 s1 cs
        local -a groups before cs_before
        hz=$(getconf CLK_TCK)
        groups[0]=$(pg_pids | tr '\n' ' ')
        groups[1]=$(cat "$WORK"/stack/pids/auth-*.pid | tr '\n' ' ')
        groups[2]=$(cat "$WORK/stack/pids/gateway.pid")
        groups[3]=$(cat "$WORK/stack/pids/broker.pid")
        groups[4]=$(cat "$WORK/stack/pids/redis.pid")
        for i in "${!names[@]}"; do
                # shellcheck disable=SC2086 # a list of pids
                before[i]=$(ticks ${groups[i]})
                # shellcheck disable=SC2086
                cs_before[i]=$(switches ${groups[i]})
        done
        out=$(wrk -t2 -c10 -d"${DURATION}s" -s "$WORK/whoami.lua" "$WHOAMI")
        n=$(awk '/requests in/ {print $1}' <<<"$out")
        echo "CPU per WhoAmI (10 conns, $n requests; /proc/<pid>/stat before and after), and context"
        echo "switches per WhoAmI (every thread's, /proc/<pid>/task/*/status):"
        printf '  %-10s %9s %9s %9s %9s\n' process "user µs" "sys µs" "total µs" switches
        for i in "${!names[@]}"; do
                read -r u0 s0 <<<"${before[i]}"
                # shellcheck disable=SC2086
                read -r u1 s1 <<<"$(ticks ${groups[i]})"
                # shellcheck disable=SC2086
                cs=$(($(switches ${groups[i]}) - cs_before[i]))
                awk -v name="${names[i]}" -v u=$((u1 - u0)) -v s=$((s1 - s0)) -v hz="$hz" -v n="$n" -v cs="$cs" \
                        'BEGIN { f = 1e6 / hz / n; printf "  %-10s %9.0f %9.0f %9.0f %9.1f\n", name, u * f, s * f, (u + s) * f, cs / n }'
        done
}

cpu_per_request

# Context: the gateway's HTTP side alone: the same POST to a method no service
# has, answered 404 from the loop (no token check, no limit, no upstream).
read -r h_rps h_p50 h_p99 _ <<<"$(run "$GW/keelson.none.v1.None/Nothing" 10)"
echo "gateway POST to an unknown method (404 from the loop, no upstream, no limit), 10 conns: $h_rps req/s, p50 $h_p50 ms, p99 $h_p99 ms"

# The same with one gateway process per core on the stack's port
# (KEELSON_GATEWAY_REUSE_PORT: the kernel spreads the connections).
extra_pids=()
for ((k = 1; k < $(nproc); k++)); do
        KEELSON_GATEWAY_HOST=127.0.0.1 KEELSON_GATEWAY_PORT=${GW##*:} KEELSON_GATEWAY_ADMIN_PORT=0 \
                KEELSON_BROKER_URL=$(sed -n 's/^KEELSON_IT_BROKER_URL=//p' "$WORK/stack/env") \
                KEELSON_REDIS_URL=$(sed -n 's/^KEELSON_IT_REDIS_URL=//p' "$WORK/stack/env") \
                "$BUILD/keelson-gateway" 2>"$WORK/gateway-$k.log" &
        extra_pids+=($!)
        for _ in $(seq 1 100); do
                grep -qs '"gateway listening"' "$WORK/gateway-$k.log" && break
                sleep 0.05
        done
done
read -r hn_rps hn_p50 hn_p99 _ <<<"$(run "$GW/keelson.none.v1.None/Nothing" 10)"
for pid in "${extra_pids[@]}"; do
        kill "$pid"
        wait "$pid" 2>/dev/null || true
done
echo "the same with $(nproc) gateway processes on the port (SO_REUSEPORT), 10 conns: $hn_rps req/s, p50 $hn_p50 ms, p99 $hn_p99 ms"

# The baseline of that route: a minimal libevent HTTP server (evhttp, a fixed
# 20-byte reply; tools/http_front/minimal_evhttp.c) on a free port of the same
# loopback, with one loop, then one loop per core (SO_REUSEPORT).
MINIMAL="$BUILD/tools/minimal_evhttp"
if [ -x "$MINIMAL" ]; then
        for threads in 1 "$(nproc)"; do
                m_port=$(free_port)
                "$MINIMAL" "$m_port" "$threads" &
                m_pid=$!
                for _ in $(seq 1 50); do
                        curl -s -o /dev/null "http://127.0.0.1:$m_port/" && break
                        sleep 0.1
                done
                read -r m_rps m_p50 m_p99 _ <<<"$(run "http://127.0.0.1:$m_port/keelson.none.v1.None/Nothing" 10)"
                kill "$m_pid"
                wait "$m_pid" 2>/dev/null || true
                g_same=$h_rps
                [ "$threads" = 1 ] || g_same=$hn_rps
                awk -v t="$threads" -v m="$m_rps" -v p50="$m_p50" -v p99="$m_p99" -v g="$g_same" 'BEGIN {
                        printf "minimal libevent server, %d loop(s), 10 conns: %s req/s, p50 %s ms, p99 %s ms; gateway 404 (%d process(es)) / it: %.2f\n", t, m, p50, p99, t, g / m }'
        done
else
        echo "(no $MINIMAL: the minimal libevent baseline is built with the tools, make build)"
fi
echo "(reference from DESIGN.md: an authenticated list read, Go + PostgreSQL on a 10-core M2 Pro:"
echo " 7,814 req/s, p99 27 ms)"
