#!/usr/bin/env bash
# bench_list_ab.sh: ListCustomers pages from two builds compared in turn, on
# a machine whose speed moves during the day.
#
#   tools/bench_list_ab.sh BUILD_A BUILD_B [ROUNDS (6)] [SECONDS per run (5)]
#
# It starts one stack per build (deploy/local/stack.sh, free ports, 2 auth,
# 2 billing and 2 ledger replicas, local stack settings, the API rate limit
# off), both running for the whole comparison, signs a tenant up on each
# and gives it 60 customers, then drives ListCustomers (50 a page) with wrk
# (2 threads, 50 connections) against A, then B, ROUNDS times. For every
# run it prints pages a second, p99, and the CPU a page cost the gateway,
# the billing replicas, the broker and PostgreSQL (/proc before and after
# the run). Runs of one round share the machine's state; compare within a
# round. STACK_ARGS_A and STACK_ARGS_B add options to one side's stack.sh
# start: STACK_ARGS_A=--tcp with the same build twice compares the services'
# unix sockets (PostgreSQL's and the brokers') with TCP. READ=whoami drives
# auth's WhoAmI with the same session instead, and reports the auth
# replicas' CPU in billing's column; READ=members auth's ListMembers (the
# same column); READ=get billing's GetCustomer of the tenant's first
# customer. Needs wrk, curl.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STACK_SH=$ROOT/deploy/local/stack.sh
A=$(cd "${1:?usage: bench_list_ab.sh BUILD_A BUILD_B [ROUNDS] [SECONDS]}" && pwd)
B=$(cd "${2:?usage: bench_list_ab.sh BUILD_A BUILD_B [ROUNDS] [SECONDS]}" && pwd)
ROUNDS=${3:-6}
SECONDS_PER_RUN=${4:-5}
READ=${READ:-list}
case $READ in
list) METHOD=keelson.billing.v1.BillingService/ListCustomers BODY='{"pageSize":50}' SERVICE=BILLING ;;
whoami) METHOD=keelson.auth.v1.AuthService/WhoAmI BODY='{}' SERVICE=AUTH ;;
members) METHOD=keelson.auth.v1.AuthService/ListMembers BODY='{}' SERVICE=AUTH ;;
get) METHOD=keelson.billing.v1.BillingService/GetCustomer BODY= SERVICE=BILLING ;; # the id: stack()
*)
        echo "bench_list_ab: READ is list, whoami, members or get" >&2
        exit 2
        ;;
esac
WORK=$(mktemp -d "${TMPDIR:-/tmp}/keelson-bench-list.XXXXXX")
PASSWORD="correct horse battery staple"

for tool in wrk curl; do
        command -v "$tool" >/dev/null 2>&1 || {
                echo "bench_list_ab: $tool is not installed (apt-get install $tool)" >&2
                exit 1
        }
done

cleanup() {
        for s in a b; do
                "$STACK_SH" stop --dir "$WORK/$s" >/dev/null 2>&1 || true
        done
        rm -rf "$WORK"
}
trap cleanup EXIT

export KEELSON_GATEWAY_RATE_API=off KEELSON_GATEWAY_RATE_AUTH=off

# stack NAME BUILD [STACK OPTIONS]: a stack in $WORK/NAME with a tenant of 60 customers; its
# wrk script.
stack() {
        local dir=$WORK/$1 gw token body=$BODY reply
        "$STACK_SH" start --dir "$dir" --bin "$2" --free-ports --auth-replicas 2 \
                --billing-replicas 2 --ledger-replicas 2 --unsafe-fast "${@:3}" >/dev/null
        gw=$(sed -n 's/^KEELSON_IT_GATEWAY_URL=//p' "$dir/env")
        curl -sS -o /dev/null "$gw/keelson.auth.v1.AuthService/SignUp" -H 'Content-Type: application/json' \
                -d "{\"email\":\"list@example.test\",\"password\":\"$PASSWORD\",\"tenantName\":\"List\"}"
        token=$(curl -sS "$gw/keelson.auth.v1.AuthService/Login" -H 'Content-Type: application/json' \
                -d "{\"email\":\"list@example.test\",\"password\":\"$PASSWORD\"}" |
                sed -n 's/.*"sessionToken": *"\([^"]*\)".*/\1/p')
        [ -n "$token" ] || {
                echo "bench_list_ab: login failed on $1" >&2
                exit 1
        }
        for i in $(seq 1 60); do
                reply=$(curl -sS "$gw/keelson.billing.v1.BillingService/CreateCustomer" \
                        -H 'Content-Type: application/json' -H "Authorization: Bearer $token" \
                        -d "{\"email\":\"c$i@example.test\",\"name\":\"Customer $i\",\"currency\":\"USD\",\"taxRateBp\":2000}")
                [ -n "$body" ] || body="{\"id\":\"$(sed -n 's/.*"id": *"\([^"]*\)".*/\1/p' <<<"$reply")\"}"
        done
        cat >"$dir.lua" <<EOF
wrk.method = "POST"
wrk.body = '$body'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $token"
EOF
}

# The CPU ticks of the given pids, those that still run.
ticks() {
        local t=0 p
        for p in "$@"; do
                if [ -r "/proc/$p/stat" ]; then
                        t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat")))
                fi
        done
        echo "$t"
}

# cpu NAME: the CPU ticks of the stack NAME's gateway, the read's service's replicas, broker,
# PostgreSQL.
cpu() {
        local dir=$WORK/$1 pm
        local -a gwp bp pgp
        read -ra gwp <<<"$(sed -n 's/^KEELSON_IT_GATEWAY_PIDS=//p' "$dir/env" | tr , ' ')"
        read -ra bp <<<"$(sed -n "s/^KEELSON_IT_${SERVICE}_PIDS=//p" "$dir/env" | tr , ' ')"
        # The cluster is $dir/pg unless stack.sh had to put it where postgres can reach.
        pm=$(head -1 "$(cat "$dir/pg.path" 2>/dev/null || echo "$dir/pg")/postmaster.pid")
        mapfile -t pgp < <(pgrep -P "$pm" || true)
        echo "$(ticks "${gwp[@]}") $(ticks "${bp[@]}") $(ticks "$(cat "$dir/pids/broker.pid")")" \
                "$(ticks "$pm" "${pgp[@]}")"
}

# run NAME: one wrk run against the stack NAME and its figures.
run() {
        local dir=$WORK/$1 gw out n hz g0 b0 r0 p0 g1 b1 r1 p1
        gw=$(sed -n 's/^KEELSON_IT_GATEWAY_URL=//p' "$dir/env")
        hz=$(getconf CLK_TCK)
        read -r g0 b0 r0 p0 <<<"$(cpu "$1")"
        out=$(wrk -t2 -c50 -d"${SECONDS_PER_RUN}s" --latency -s "$dir.lua" \
                "$gw/$METHOD")
        read -r g1 b1 r1 p1 <<<"$(cpu "$1")"
        n=$(echo "$out" | awk '/requests in/ {print $1}')
        if [ -z "$n" ] || [ "$n" -eq 0 ]; then
                echo "bench_list_ab: wrk gave no figures: $out" >&2
                exit 1
        fi
        if echo "$out" | grep -q 'Non-2xx'; then
                echo "bench_list_ab: failed replies: $(echo "$out" | grep 'Non-2xx')" >&2
        fi
        printf '%-3s %10s %9s %9d %9d %9d %9d\n' "$1" \
                "$(echo "$out" | awk '/Requests\/sec/ {printf "%.0f", $2}')" \
                "$(echo "$out" | awk '$1 == "99%" {print $2}')" \
                $(((g1 - g0) * 1000000 / hz / n)) $(((b1 - b0) * 1000000 / hz / n)) \
                $(((r1 - r0) * 1000000 / hz / n)) $(((p1 - p0) * 1000000 / hz / n))
}

read -ra args_a <<<"${STACK_ARGS_A-}"
read -ra args_b <<<"${STACK_ARGS_B-}"
stack a "$A" "${args_a[@]+"${args_a[@]}"}"
stack b "$B" "${args_b[@]+"${args_b[@]}"}"
echo "$METHOD $BODY, wrk -t2 -c50, ${SECONDS_PER_RUN} s a run;" \
        "a: $A ${STACK_ARGS_A-}, b: $B ${STACK_ARGS_B-}"
printf 'CPU µs a call:        req/s       p99   gateway %9s    broker  postgres\n' \
        "$(echo "$SERVICE" | tr '[:upper:]' '[:lower:]')"
for r in $(seq 1 "$ROUNDS"); do
        echo "round $r"
        run a
        run b
done
